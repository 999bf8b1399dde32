package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
)

// maxCancelsWaiting bounds the cancel requests waiting for run; more are
// answered busy at once.
const maxCancelsWaiting = 64

// cancelRequest is a cancel request waiting for run, and when it came.
type cancelRequest struct {
	m  *nats.Msg
	at time.Time
}

// serveCancel subscribes to the store's cancel subject. Requests are
// handed to run, which answers them between batches (see cancelJob).
func (w *Writer) serveCancel() (*nats.Subscription, error) {
	return w.cfg.Conn.Subscribe(queue.CancelSubject(w.storeID), func(m *nats.Msg) {
		if !w.inboxReply(m.Reply) {
			return // nothing is cancelled for a request whose answer could go astray
		}
		select {
		case w.cancels <- cancelRequest{m, time.Now()}:
		default:
			w.respondCancel(m, queue.CancelAnswer{Result: queue.CancelBusy, Detail: "too many cancel requests wait for the writer; try again"})
		}
	})
}

// serveCancels answers the cancel requests waiting, without waiting for
// more. Only run calls it, with no batch in hand or while the batch in
// hand waits (for the store, or a deferred command).
func (w *Writer) serveCancels(ctx context.Context) {
	for {
		select {
		case r := <-w.cancels:
			w.handleCancel(ctx, r)
		default:
			return
		}
	}
}

// refuseCancels answers the cancel requests left waiting once run has
// stopped: busy, nothing changed (a daemon serving the store again
// answers them).
func (w *Writer) refuseCancels() {
	for {
		select {
		case r := <-w.cancels:
			w.respondCancel(r.m, queue.CancelAnswer{Result: queue.CancelBusy, Detail: "the store's writer is stopping"})
		default:
			return
		}
	}
}

// sleepServing is sleep that answers cancel requests meanwhile.
func (w *Writer) sleepServing(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case r := <-w.cancels:
			w.handleCancel(ctx, r)
		}
	}
}

// refuseCancelDuringRun answers a cancel request while an exec job's
// command runs: too late for the jobs of its run, busy for any other.
func (w *Writer) refuseCancelDuringRun(r cancelRequest) {
	var req queue.CancelRequest
	if err := json.Unmarshal(r.m.Data, &req); err != nil {
		w.respondCancel(r.m, queue.CancelAnswer{Error: fmt.Sprintf("cancel request: %v", err)})
		return
	}
	if p := queue.IDProblem(req.ID); p != "" {
		w.respondCancel(r.m, queue.CancelAnswer{Error: p})
		return
	}
	if in, _, detail := w.handState(req.ID); in {
		w.respondCancel(r.m, queue.CancelAnswer{Result: queue.CancelTooLate, State: queue.StateInHand, Detail: "the writer has it in hand: " + detail})
		return
	}
	what := "an exec job's command"
	w.mu.Lock()
	if w.running != nil {
		what = w.running.String()
	}
	w.mu.Unlock()
	w.respondCancel(r.m, queue.CancelAnswer{Result: queue.CancelBusy,
		Detail: "the store's turn is a command's (" + what + "): nothing can be recorded until it ends; cancel again then"})
}

func (w *Writer) handleCancel(ctx context.Context, r cancelRequest) {
	m := r.m
	var req queue.CancelRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		w.respondCancel(m, queue.CancelAnswer{Error: fmt.Sprintf("cancel request: %v", err)})
		return
	}
	if p := queue.IDProblem(req.ID); p != "" {
		w.respondCancel(m, queue.CancelAnswer{Error: p})
		return
	}
	if waited := time.Since(r.at); req.TimeoutMS > 0 && waited >= time.Duration(req.TimeoutMS)*time.Millisecond {
		// Its caller has given up, and was told nothing changed.
		w.log.Info("cancel request dropped: its caller stopped waiting first", "id", req.ID, "waited", waited.Round(time.Millisecond), "timeout_ms", req.TimeoutMS)
		w.respondCancel(m, queue.CancelAnswer{Result: queue.CancelBusy, Detail: fmt.Sprintf("the writer came to the request after %s, past its timeout_ms; nothing changed", waited.Round(time.Millisecond))})
		return
	}
	a := w.cancelJob(ctx, req.ID)
	if a.Result == queue.CancelDone {
		w.log.Info("job cancelled", "id", req.ID)
	}
	w.respondCancel(m, a)
}

func (w *Writer) respondCancel(m *nats.Msg, a queue.CancelAnswer) {
	b, err := json.Marshal(a)
	if err != nil {
		return
	}
	if err := m.Respond(b); err != nil {
		w.log.Warn("answer cancel request", "err", err)
	}
}

// cancelJob cancels job id if it is queued and not yet decided: it
// records the job's outcome, rejected with queue.ReasonCancelled, before
// it answers, so that when the writer takes the job from the queue it
// finds the outcome and applies nothing (as for any job decided before),
// even after a crash. run calls it only between decisions, so the answer
// is exact: a job is either cancelled or decided, never both.
func (w *Writer) cancelJob(ctx context.Context, id string) queue.CancelAnswer {
	if w.session == nil {
		if err := w.open(); err != nil {
			return queue.CancelAnswer{Result: queue.CancelBusy, Detail: fmt.Sprintf("the writer cannot record the cancellation now: %v", err)}
		}
		// Taken for this request only: the store goes back to direct
		// writers as it was.
		defer w.release()
	}
	prev, err := w.session.Journal().Outcome(id)
	if err != nil {
		return queue.CancelAnswer{Error: fmt.Sprintf("look up %s: %v", id, err)}
	}
	if prev != nil {
		return queue.DecidedCancelAnswer(prev)
	}
	if in, _, detail := w.handState(id); in {
		return queue.CancelAnswer{Result: queue.CancelTooLate, State: queue.StateInHand, Detail: "the writer has it in hand: " + detail}
	}
	sctx, cancel := context.WithTimeout(ctx, locateTimeout)
	defer cancel()
	var found *queuedMsg
	scanned, complete, err := w.scan(sctx, scanLimit, func(m queuedMsg) bool {
		if m.id != id {
			return true
		}
		found = &m
		return false
	})
	switch {
	case err != nil:
		return queue.CancelAnswer{Error: fmt.Sprintf("search the queue: %v", err)}
	case found == nil && !complete:
		return queue.CancelAnswer{Result: queue.CancelBusy, Detail: fmt.Sprintf("not among the %d oldest queued jobs searched; try again", scanned)}
	case found == nil:
		return queue.CancelAnswer{Result: queue.CancelUnknown, State: queue.StateUnknown, Detail: "no outcome recorded, and not in the queue"}
	}
	job, derr := queue.DecodeLimit(found.data, w.cfg.Limits.JobBytes())
	if derr != nil || job == nil || job.ID != id {
		job = &queue.Job{ID: id} // recorded under its ID; the undecodable message is acked as decided
	}
	e := writer.Entry{Job: job, Seq: found.seq, Raw: found.data,
		Err: queue.Reject(queue.ReasonCancelled, "cancelled by a caller while it was queued")}
	results, err := w.session.Apply([]writer.Entry{e})
	if err != nil {
		return queue.CancelAnswer{Result: queue.CancelBusy, Detail: fmt.Sprintf("record the cancellation: %v", err)}
	}
	r := results[0]
	if r.Duplicate || r.Conflict {
		return queue.DecidedCancelAnswer(r.Outcome)
	}
	if found.own {
		w.decide(found.seq, len(found.data)) // not queued any more: Queued and scan leave it out
	}
	w.count(results)
	w.observeOutcome(e, r)
	w.publishOutcome(r.Outcome) // its submitter may be waiting
	return queue.CancelAnswer{Result: queue.CancelDone, State: queue.StateRejected, Outcome: r.Outcome}
}
