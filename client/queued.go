package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer"
)

// queued is the route through the store's daemon. A local daemon's
// connection is replaced when it is lost, only ever through discovery
// (redial); a remote queue's (remote.go) reconnects by itself.
type queued struct {
	store   string // "" for a store known by ID only (OpenRemote)
	storeID string
	log     *slog.Logger
	// remote is the URL of a remote queue (OpenRemote, WithRemote), ""
	// for a local daemon's; denied tells its calls of permission
	// violations (nil for a local daemon's).
	remote string
	denied *denials
	// auto starts a daemon when none serves the store (WithAutostart);
	// nil without. Discovery is serialized by autoMu.
	auto   *autostarter
	autoMu sync.Mutex
	// connectTimeout bounds how long a lost connection is redialled
	// while a daemon holds the lock but cannot be reached (reconnect).
	connectTimeout time.Duration

	mu     sync.Mutex // guards the connection, replaced when it is lost
	d      *queue.Discovery
	nc     *nats.Conn
	js     jetstream.JetStream
	closed bool // by close: no more redials
}

// openQueued finds and connects to the store's daemon, if one is alive;
// it returns nil, nil when none is. A daemon that holds its lock but
// cannot be reached within o.connectTimeout is ErrUnavailable.
func openQueued(ctx context.Context, store, storeID string, o options) (*queued, error) {
	q := &queued{store: store, storeID: storeID, log: o.log, connectTimeout: o.connectTimeout}
	if o.autostart != nil {
		q.auto = &autostarter{cfg: *o.autostart, store: store}
	}
	ctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		d, err := q.discover(ctx)
		if err != nil || d == nil {
			return nil, err
		}
		if d.Queue == queue.QueueNATS {
			return openDiscoveredRemote(ctx, store, storeID, d, o)
		}
		nc, js, err := dial(ctx, d, q.log)
		if err == nil {
			writer.PausePoint("dialled")
			q.d, q.nc, q.js = d, nc, js
			return q, nil
		}
		q.log.Debug("connect to daemon", "url", d.URL, "err", err)
		if !queue.Sleep(ctx, queue.Backoff(attempt)) {
			return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, unreachable(store, d), err)
		}
	}
}

// redial is the only way back to a daemon once the connection is lost:
// discovery again (the daemon lock held, its discovery file, its pinned
// certificate), whether the daemon restarted or not. It does nothing while
// the connection is up or no daemon serves the store, and reports whether
// it found none; a job is never redone directly.
func (q *queued) redial(ctx context.Context) (noDaemon bool) {
	if q.remote != "" {
		return false // nats.go reconnects to the cluster by itself
	}
	q.mu.Lock()
	lost, closed := q.nc, q.closed
	q.mu.Unlock()
	if closed || lost.IsConnected() {
		return false
	}
	d, err := q.discover(ctx)
	if err != nil || d == nil {
		return err == nil
	}
	nc, js, err := dial(ctx, d, q.log)
	if err != nil {
		q.log.Debug("redial daemon", "url", d.URL, "err", err)
		return false
	}
	q.mu.Lock()
	if q.nc != lost || q.closed { // another call got there first, or close
		q.mu.Unlock()
		nc.Close()
		return false
	}
	q.d, q.nc, q.js = d, nc, js
	q.mu.Unlock()
	lost.Close()
	q.log.Debug("redialled the daemon", "url", d.URL, "pid", d.PID)
	return false
}

// reconnect redials after the connection nc was closed under a request,
// for up to the connect timeout while a daemon holds the lock but cannot
// be reached: one that died a moment ago may hold it still, the kernel
// closing its socket before its lock. It reports whether a connection
// other than nc is up now, or else whether no daemon serves the store.
func (q *queued) reconnect(ctx context.Context, nc *nats.Conn) (redialled, noDaemon bool) {
	ctx, cancel := context.WithTimeout(ctx, q.connectTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		none := q.redial(ctx)
		switch {
		case !q.sameConn(nc):
			return true, false
		case none:
			return false, true
		case q.isClosed() || !queue.Sleep(ctx, queue.Backoff(attempt)):
			return false, false
		}
	}
}

// redialIfLost redials when the current connection is down.
func (q *queued) redialIfLost(ctx context.Context) {
	if nc, _ := q.conn(); !nc.IsConnected() {
		q.redial(ctx)
	}
}

// sameConn reports whether nc is still the current connection.
func (q *queued) sameConn(nc *nats.Conn) bool {
	now, _ := q.conn()
	return now == nc
}

// conn returns the current connection to the daemon.
func (q *queued) conn() (*nats.Conn, jetstream.JetStream) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.nc, q.js
}

// discover returns the live daemon's discovery, or nil if none holds the
// daemon lock (discovery.Find). A daemon that holds the lock but has not yet
// announced itself is still starting: wait for it until ctx ends.
//
// With autostart, a store that no daemon serves gets one: discover starts
// it and waits for it.
func (q *queued) discover(ctx context.Context) (*queue.Discovery, error) {
	if q.auto != nil {
		q.autoMu.Lock()
		defer q.autoMu.Unlock()
		q.auto.tries = 0
		return q.auto.discover(ctx, q)
	}
	for attempt := 0; ; attempt++ {
		d, err := discovery.Find(q.store)
		if !errors.Is(err, discovery.ErrStarting) {
			return d, err
		}
		if !queue.Sleep(ctx, queue.Backoff(attempt)) {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
}

func (q *queued) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

func (q *queued) daemon() *queue.Discovery {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.d
}

func (q *queued) close() error {
	q.mu.Lock()
	q.closed = true
	nc := q.nc
	q.mu.Unlock()
	nc.Close()
	return nil
}

func (q *queued) submit(ctx context.Context, job *queue.Job, data []byte, chosen bool) error {
	dup, err := q.publish(ctx, job, data)
	if err != nil || (!dup && !chosen) {
		return err
	}
	digest := job.Digest()
	if !dup {
		// Stored, but the journal may already know the ID from a job that
		// left the dedupe window: then the writer will refuse this one.
		// Ask, briefly (the journal can be busy for a moment); not knowing
		// is no reason to fail a job that is queued.
		lctx, cancel := context.WithTimeout(ctx, conflictCheckTimeout)
		defer cancel()
		for attempt := 0; ; attempt++ {
			l, err := q.lookup(lctx, job.ID)
			if err == nil {
				if o, ours := judge(job, digest, l.Outcome, false); l.Found && ours {
					return conflictErr(o, digest)
				}
				return nil
			}
			if !queue.Sleep(lctx, queue.Backoff(attempt)) {
				return nil
			}
		}
	}
	// JetStream swallowed this copy: the job it kept under this ID may be
	// another one. Its outcome says.
	nc, sub, err := q.subscribe(ctx, job.ID)
	if err != nil {
		return fmt.Errorf("job %s: the queue already holds a job with this ID, and whether it is this one is not known yet: %w", job.ID, err)
	}
	o, err := q.await(ctx, job, digest, nc, sub, true, nil)
	if err != nil {
		return fmt.Errorf("job %s: the queue already holds a job with this ID, and whether it is this one is not known yet: %w", job.ID, err)
	}
	return conflictErr(o, digest)
}

// conflictErr is the error Submit returns for outcome o of a job with
// digest: the ID conflict, if o is one, else nil (o is the outcome of
// this same job, queued or decided before).
func conflictErr(o *queue.Outcome, digest string) error {
	if o.Reason == queue.ReasonIDConflict && o.Digest == digest {
		return fmt.Errorf("job %s %w", o.ID, o.Err())
	}
	return nil
}

func (q *queued) apply(ctx context.Context, job *queue.Job, data []byte) (*queue.Outcome, error) {
	// Even an ID this client made can be taken by another submitter that
	// saw it queued (a status listing) and sent its own job under it at a
	// higher priority: only the digest tells this job's outcome from that
	// one's.
	digest := job.Digest()
	// Subscribe before publishing, so the outcome cannot slip past. No
	// Flush (a round trip) is needed in between: both go out on one
	// connection, whose protocol the server handles in order, and it
	// registers a SUB as it reads it, before it reads the PUB.
	nc, sub, err := q.subscribe(ctx, job.ID)
	if err != nil {
		return nil, fmt.Errorf("job %s not queued: %w", job.ID, err)
	}
	if q.remote == "" {
		// The outcome will say the job was stored: skip the ack (a round
		// trip, a third of a small job's cost to the client), and ask for
		// it only if no outcome comes soon (unacked). A remote queue
		// reports a refused subject apart from the publish, and drops what
		// comes while its stream elects a leader: there the ack is asked
		// at once.
		if err := queue.Post(nc, q.storeID, queue.SubjectFor(q.storeID, job.Priority), job.ID, data); err == nil {
			return q.await(ctx, job, digest, nc, sub, false, &unacked{at: confirmAt(ctx), data: data})
		}
	}
	dup, err := q.publish(ctx, job, data)
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return q.await(ctx, job, digest, nc, sub, dup, nil)
}

// unacked is a job sent without asking for the queue's ack (queue.Post):
// whether it was stored is known once its outcome comes. If none has come
// by at, or the connection it went out on is lost, await publishes it again
// with the same ID (its data) and the ack: a duplicate if the first copy
// was stored, else stored now, or refused (a full queue, no stream) with
// the error a publish gets.
type unacked struct {
	at   time.Time
	data []byte
}

// confirmAt is when an unacked job's ack is asked for: after unackedWait,
// or half of what ctx leaves, if less, so that a short wait still ends
// knowing whether the job was queued.
func confirmAt(ctx context.Context) time.Time {
	now := time.Now()
	wait := unackedWait
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(wait, deadline.Sub(now)/2)
	}
	return now.Add(wait)
}

// subscribe listens for a job's outcome on the connection to the daemon,
// redialling a lost one first (until ctx ends).
func (q *queued) subscribe(ctx context.Context, id string) (*nats.Conn, *nats.Subscription, error) {
	for attempt := 0; ; attempt++ {
		q.redialIfLost(ctx)
		nc, _ := q.conn()
		sub, err := nc.SubscribeSync(queue.OutcomeSubject(q.storeID, id))
		if err == nil {
			return nc, sub, nil
		}
		if q.isClosed() || !errors.Is(err, nats.ErrConnectionClosed) {
			return nil, nil, err
		}
		if q.gone(nc) {
			return nil, nil, q.goneErr(nc)
		}
		if !queue.Sleep(ctx, queue.Backoff(attempt)) {
			return nil, nil, fmt.Errorf("%w: no connection to it (%w)", ErrUnavailable, ctx.Err())
		}
	}
}

// await waits for the outcome of a queued job, of digest digest: a
// message on sub (made on nc), or the journal's answer. Outcomes travel on plain NATS: if one is missed
// (the job was a duplicate JetStream dropped, the connection was lost, the
// daemon restarted), the journal still has it, so ask it now and then, and
// at once when lookupNow, or when the connection comes back. A local
// daemon's lost connection is redialled through discovery, never trusted
// on its own; a remote queue's reconnects by itself, and nats.go
// subscribes again there. await unsubscribes whatever subscription it ends
// with. A job sent without the queue's ack (pending, nil for one acked)
// has it asked for in time.
func (q *queued) await(ctx context.Context, job *queue.Job, digest string, nc *nats.Conn, sub *nats.Subscription, lookupNow bool, pending *unacked) (*queue.Outcome, error) {
	defer func() { _ = sub.Unsubscribe() }()
	subject := queue.OutcomeSubject(q.storeID, job.ID)
	fate := func(err error) error {
		if pending != nil {
			return fmt.Errorf("job %s sent, whether it was queued is unknown; retry with the same ID: %w", job.ID, err)
		}
		return fmt.Errorf("job %s queued, outcome not yet known: %w", job.ID, err)
	}
	unknown := func() error { return fate(ctx.Err()) }
	reconnects := nc.Stats().Reconnects
	for down := 0; ; {
		if now, _ := q.conn(); now != nc { // redialled: listen on the new connection
			nc = now
			_ = sub.Unsubscribe()
			var err error
			if sub, err = nc.SubscribeSync(subject); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				return nil, err
			}
			lookupNow = true
			if pending != nil { // it may have been lost with the connection
				pending.at = time.Time{}
			}
		}
		if !nc.IsConnected() {
			q.redial(ctx)
			if now, _ := q.conn(); now == nc { // no daemon to go back to yet, or reconnecting
				if q.isClosed() {
					return nil, fate(nats.ErrConnectionClosed)
				}
				if q.gone(nc) {
					return nil, fate(q.goneErr(nc))
				}
				if !queue.Sleep(ctx, queue.Backoff(down)) {
					return nil, unknown()
				}
				down++
			}
			continue
		}
		// Back from an outage, or reconnected between two looks: the
		// outcome may have been published meanwhile.
		if r := nc.Stats().Reconnects; down > 0 || r != reconnects {
			reconnects, lookupNow = r, true
		}
		down = 0
		poll := outcomePoll
		if pending != nil {
			if wait := time.Until(pending.at); wait > 0 {
				poll = min(poll, wait)
			} else {
				dup, err := q.publish(ctx, job, pending.data)
				if err != nil {
					return nil, err
				}
				// Stored now, or before: by this copy, or by an earlier job
				// with its ID, whose outcome may be gone already.
				pending, lookupNow = nil, lookupNow || dup
			}
		}
		if lookupNow {
			lookupNow = false
			lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
			l, err := q.lookup(lctx, job.ID)
			cancel()
			if err == nil && l.Found {
				if o, ours := judge(job, digest, l.Outcome, false); ours {
					return o, nil
				}
			}
		}
		wait, cancel := context.WithTimeout(ctx, poll)
		m, err := sub.NextMsgWithContext(wait)
		cancel()
		switch {
		case err == nil:
			// Anyone who may submit can make the server publish here (a
			// publish's reply subject is the publisher's choice): only this
			// job's outcome counts; anything else means "ask the journal".
			if o, derr := queue.DecodeOutcome(m.Data); derr == nil {
				if o, ours := judge(job, digest, o, true); ours {
					return o, nil
				}
			}
			lookupNow = true
		case ctx.Err() != nil:
			return nil, unknown()
		case errors.Is(err, context.DeadlineExceeded) && pending != nil && !time.Now().Before(pending.at):
			// Time to ask for the ack, not yet to ask the journal.
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrBadSubscription),
			errors.Is(err, nats.ErrSlowConsumer): // messages dropped: ours among them, perhaps
			lookupNow = true
		default:
			return nil, err
		}
	}
}

// judge decides whether outcome o answers job, of digest digest, and what
// the caller gets. Only an outcome with the job's ID counts. An
// outcome of a different job with this ID makes this job an ID conflict,
// except a conflict notice received for yet another job with this ID
// (received): that one is not ours to take, nor a decision on ours.
func judge(job *queue.Job, digest string, o *queue.Outcome, received bool) (*queue.Outcome, bool) {
	if o == nil || o.ID != job.ID {
		return nil, false
	}
	if received && o.Reason == queue.ReasonIDConflict && o.Digest != digest {
		return nil, false
	}
	if rej := o.Conflict(digest); rej != nil {
		return &queue.Outcome{
			V: queue.Version, ID: job.ID, Status: queue.StatusRejected, Reason: rej.Reason, Detail: rej.Detail,
			Epoch: o.Epoch, Mode: o.Mode, At: time.Now().UTC(), Meta: job.Meta, Digest: digest,
		}, true
	}
	return o, true
}

// publish queues an encoded job. A publish whose fate is unknown is
// retried with the same ID, with backoff, until ctx ends: JetStream and
// the journal drop the duplicate if an earlier copy got through. That is
// every failure but those that say the job was not stored (notQueued):
// a timeout, a lost connection or one being reestablished, no responders
// (no stream leader during a JetStream election, or the stream not yet
// created by its daemon), a JetStream error that may pass.
//
// A high job goes on the high subject; if no stream takes it there, or
// the server refuses it, on the normal one: a stream or a daemon of an
// older version has no high subject, and the job's priority field still
// puts it first among the jobs its writer has taken.
func (q *queued) publish(ctx context.Context, job *queue.Job, data []byte) (dup bool, err error) {
	id, normal := job.ID, queue.JobsSubject(q.storeID)
	subject := queue.SubjectFor(q.storeID, job.Priority)
	for attempt := 0; ; attempt++ {
		nc, js := q.conn()
		wctx, unwatch := q.denied.watch(ctx, subject)
		pctx, cancel := context.WithTimeout(wctx, publishTimeout)
		dup, err = queue.Publish(pctx, js, q.storeID, subject, id, data)
		cancel()
		denied := denial(wctx)
		unwatch()
		switch {
		case err == nil:
			return dup, nil
		case subject != normal && (denied != nil || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)):
			// Not stored: no one took the message, or the server refused it.
			q.log.Debug("the queue takes no high jobs on their subject; queuing on the normal one", "id", id, "err", err)
			subject = normal
			continue
		case denied != nil:
			return false, fmt.Errorf("job %s not queued: %w", id, denied)
		case notQueued(err):
			return false, err
		}
		if attempt == publishWarnAfter {
			q.log.Warn("publish keeps failing; retrying with the same ID", "id", id, "attempts", attempt+1, "err", err)
		} else {
			q.log.Debug("publish retry", "id", id, "err", err)
		}
		if q.isClosed() {
			return false, fmt.Errorf("job %s: whether it was queued is unknown; retry with the same ID: %w", id, err)
		}
		if q.gone(nc) {
			return false, fmt.Errorf("job %s: whether it was queued is unknown; retry with the same ID: %w (%w)", id, q.goneErr(nc), err)
		}
		if !queue.Sleep(ctx, queue.Backoff(attempt)) {
			return false, fmt.Errorf("job %s: whether it was queued is unknown; retry with the same ID: %w (%w)", id, ctx.Err(), err)
		}
		q.redialIfLost(ctx)
	}
}

// publishWarnAfter is the retry of a publish whose failure is logged as
// a warning, not a debug line: a dozen tries, seconds of trying at least.
const publishWarnAfter = 12

// jsErrStreamNotMatch is JetStream's error code for a publish whose
// subject belongs to another stream (the server's JSStreamNotMatchErr),
// which nats.go's jetstream does not export: refused, not stored, as a
// job larger than the stream takes is
// (jetstream.JSErrCodeStreamMessageExceedsMaximum).
const jsErrStreamNotMatch jetstream.ErrorCode = 10060

// notQueued reports whether a publish's error says that the job was not
// stored and that sending it again cannot change that: retrying it would
// only wait for ctx to end.
func notQueued(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrDenied), errors.Is(err, nats.ErrMaxPayload),
		errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrInvalidConnection):
		return true
	case errors.As(err, &apiErr):
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum || apiErr.ErrorCode == jsErrStreamNotMatch
	}
	return false
}
