package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/journal"
)

// withJournal runs fn on the store's journal: the writer's session's when
// it holds the store, else a read-only open (which fails after a moment
// while a direct writer has it). fn gets nil if there is no journal yet.
func (w *Writer) withJournal(fn func(*journal.Journal) error) error {
	w.opening.Lock()
	defer w.opening.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.session != nil {
		return fn(w.session.Journal())
	}
	ro, err := journal.OpenReadOnly(journal.Path(w.store), 500*time.Millisecond)
	if errors.Is(err, fs.ErrNotExist) {
		return fn(nil) // nothing was ever applied to this store
	}
	if err != nil {
		return err
	}
	defer ro.Close()
	return fn(ro)
}

// Lookup returns the recorded outcome of a job.
func (w *Writer) Lookup(id string) queue.Lookup {
	var l queue.Lookup
	err := w.withJournal(func(j *journal.Journal) error {
		if j == nil {
			return nil
		}
		var err error
		l, err = j.Lookup(id)
		return err
	})
	if err != nil {
		return queue.Lookup{Error: err.Error()}
	}
	return l
}

// DeadLetters returns the most recent dead letters (at most 100).
func (w *Writer) DeadLetters() (queue.DeadLetters, error) {
	var d queue.DeadLetters
	err := w.withJournal(func(j *journal.Journal) error {
		if j == nil {
			return nil
		}
		var err error
		d.Letters, d.Total, err = j.DeadLetters(100)
		return err
	})
	return d, err
}

// serveStatus answers status requests on the store's status subject: an
// empty request gets a StatusReport, DeadLettersRequest gets DeadLetters,
// a job ID gets a Lookup.
func (w *Writer) serveStatus() (micro.Service, error) {
	return micro.AddService(w.cfg.Conn, micro.Config{
		Name:        "scribe",
		Version:     "1.0.0",
		Description: "scribe store " + w.storeID,
		Endpoint: &micro.EndpointConfig{
			Subject: queue.StatusSubject(w.storeID),
			Handler: micro.HandlerFunc(func(req micro.Request) {
				if !w.inboxReply(req.Reply()) {
					return
				}
				var v any
				switch body := string(req.Data()); body {
				case "":
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					v = w.Report(ctx)
				case queue.DeadLettersRequest:
					d, err := w.DeadLetters()
					if err != nil {
						d.Error = err.Error()
					}
					v = d
				default: // a job ID, or a locate or jobs request (jobs.go)
					v = w.statusAnswer(body)
				}
				if b, err := w.reply(v); err == nil {
					_ = req.Respond(b)
				}
			}),
		},
	})
}

// inboxReply reports whether a request's reply subject is an inbox: all
// that submitters may subscribe to, _INBOX.> on the embedded server, the
// store's own prefix on a shared one. The requester picks it, and the
// daemon's connection may publish anywhere, so the services answer only
// there, never onto the queue's API or another caller's outcome subject
// (docs/security.md).
func (w *Writer) inboxReply(r string) bool {
	return strings.HasPrefix(r, "_INBOX.") || strings.HasPrefix(r, queue.ClientInboxPrefix(w.storeID)+".")
}

// replyLimit is the most bytes a message the writer sends may take: the
// status service's bound, or less if the server carries less.
func (w *Writer) replyLimit() int {
	limit := int64(queue.MaxReplyBytes)
	if mp := w.cfg.Conn.MaxPayload(); mp > 0 {
		limit = min(limit, mp-1024)
	}
	return int(max(limit, queue.MinFitBytes))
}

// reply encodes a status answer, cut to fit one message (replyLimit):
// an outcome recorded by a version that did not bound it, a listing of
// many outcomes, a report of long strings.
func (w *Writer) reply(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	limit := w.replyLimit()
	if err != nil || len(b) <= limit {
		return b, err
	}
	switch x := v.(type) {
	case *queue.StatusReport:
		x.Fit(limit)
	case queue.DeadLetters:
		x.Fit(limit)
		v = x
	case queue.Lookup:
		x.Fit(limit)
		v = x
	case queue.JobList:
		x.Fit(limit)
		v = x
	}
	return json.Marshal(v)
}

// Queued returns how many jobs wait in the store's stream and in the
// streams of its former paths still to drain. Right after start it waits
// for the sweep of jobs decided before (sweepDecided), for a second at
// most: until then the count may hold some.
func (w *Writer) Queued(ctx context.Context) (uint64, error) {
	if w.swept != nil {
		t := time.NewTimer(time.Second)
		select {
		case <-w.swept:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	n, err := w.queuedOwn(ctx)
	if err != nil {
		return 0, err
	}
	w.mu.Lock()
	former := slices.Clone(w.former)
	w.mu.Unlock()
	w.queueOps.RLock()
	defer w.queueOps.RUnlock()
	for _, f := range former {
		info, err := f.stream.Info(ctx)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // drained and deleted meanwhile
		}
		if err != nil {
			return 0, err
		}
		n += info.State.Msgs
	}
	return n, nil
}

// queuedOwn is how many jobs the store's own stream holds undecided: its
// messages less the jobs decided and not yet purged, counted from a
// stream state read while no purge was in flight (tried again if one
// was), so that a purged job is not taken off twice.
func (w *Writer) queuedOwn(ctx context.Context) (uint64, error) {
	w.queueOps.RLock()
	defer w.queueOps.RUnlock()
	var msgs uint64
	for range 3 {
		w.purging.Lock()
		gen := w.purgeGen
		w.purging.Unlock()
		info, err := w.stream.Info(ctx)
		if err != nil {
			return 0, err
		}
		msgs = info.State.Msgs
		w.purging.Lock()
		decided := uint64(len(w.decided))
		steady := gen%2 == 0 && gen == w.purgeGen
		w.purging.Unlock()
		if steady {
			return msgs - min(msgs, decided), nil // decided: not queued any more
		}
	}
	return msgs, nil // purges kept coming: count high, never low
}

// Report describes the writer and its queue.
func (w *Writer) Report(ctx context.Context) *queue.StatusReport {
	r := &queue.StatusReport{V: queue.Version, PID: os.Getpid(), Version: w.cfg.Version, Started: w.started}
	w.mu.Lock()
	r.Holding, r.Epoch, r.Applied, r.Rejected, r.Waiting = w.session != nil, w.epoch, w.applied, w.rejected, w.waiting
	r.Fault = joinFaults(w.fault, w.queueFault)
	r.Deferred = w.deferred
	if w.running != nil {
		r.Running = w.running.String()
		r.Holding = true // through the hold the command was handed
	}
	w.mu.Unlock()
	r.Store, r.StoreID = w.store, w.storeID
	r.Queued, _ = w.Queued(ctx)
	w.fillReport(r) // the lock, the journal, what is in hand (jobs.go)
	return r
}

// joinFaults joins the faults that are set.
func joinFaults(faults ...string) string {
	return strings.Join(slices.DeleteFunc(faults, func(f string) bool { return f == "" }), "; ")
}
