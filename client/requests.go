package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scribehq/scribe/queue"
)

// askUntilClosed asks the status service on nc again while nobody
// answers there, for up to the connect timeout: a local daemon takes its
// services down as it shuts down, a moment before it closes its
// connections. It returns the answer, or the error that ended the wait:
// the connection closed (reconnect then), or still nobody.
func (q *queued) askUntilClosed(ctx context.Context, nc *nats.Conn, subject string, body func() []byte) (*nats.Msg, error) {
	wctx, cancel := context.WithTimeout(ctx, q.connectTimeout)
	defer cancel()
	for attempt := 0; queue.Sleep(wctx, queue.Backoff(attempt)); attempt++ {
		m, err := nc.RequestWithContext(wctx, subject, body())
		if !errors.Is(err, nats.ErrNoResponders) && (wctx.Err() == nil || ctx.Err() != nil) {
			return m, err
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, nats.ErrNoResponders
}

// lookup asks the daemon's status service for a job's outcome.
func (q *queued) lookup(ctx context.Context, id string) (*queue.Lookup, error) {
	var l queue.Lookup
	if err := q.request(ctx, []byte(id), &l); err != nil {
		if d := q.fromJournal(err); d != nil {
			return d.lookup(ctx, id)
		}
		return nil, err
	}
	if l.Error != "" {
		return nil, fmt.Errorf("look up %s: %s", id, l.Error)
	}
	return &l, nil
}

func (q *queued) report(ctx context.Context) (*queue.StatusReport, error) {
	var r queue.StatusReport
	return &r, q.request(ctx, nil, &r)
}

func (q *queued) deadLetters(ctx context.Context) (*queue.DeadLetters, error) {
	var d queue.DeadLetters
	if err := q.request(ctx, []byte(queue.DeadLettersRequest), &d); err != nil {
		return nil, err
	}
	if d.Error != "" {
		return nil, errors.New(d.Error)
	}
	return &d, nil
}

// fromJournal is the direct route to ask instead when a request failed
// because the daemon went away and none serves the store now, else nil:
// the journal, which no daemon holds open then, answers as it does
// without a daemon. Not for a remote queue, whose daemon's journal may
// be on another host.
func (q *queued) fromJournal(err error) *direct {
	if q.remote != "" || q.store == "" || !errors.Is(err, ErrNoDaemon) {
		return nil
	}
	return &direct{store: q.store}
}

// request asks the daemon's status service, redialling a lost connection
// first, and decodes the reply into v. A connection the daemon closes
// while the request waits (it cut its submitters off, on its way out or
// to refuse them, or it died) is redialled through discovery once more;
// when no daemon serves the store then, the error is ErrNoDaemon, and a
// question the journal can answer is asked of it (fromJournal).
func (q *queued) request(ctx context.Context, body []byte, v any) error {
	return q.requestOn(ctx, queue.StatusSubject(q.storeID), func() []byte { return body }, v)
}

// cancel asks the store's writer to cancel a queued job.
func (q *queued) cancel(ctx context.Context, id string) (*queue.CancelAnswer, error) {
	body := func() []byte { // for each send: a redial takes time
		req := queue.CancelRequest{ID: id}
		if deadline, ok := ctx.Deadline(); ok {
			// The writer drops a request it cannot come to in time. It is
			// told less than the time left, so that a cancellation it
			// begins has a quarter of that (at most 2 s) to be recorded
			// and answered.
			left := time.Until(deadline)
			req.TimeoutMS = max((left - min(left/4, 2*time.Second)).Milliseconds(), 1)
		}
		b, _ := json.Marshal(req)
		return b
	}
	var a queue.CancelAnswer
	if err := q.requestOn(ctx, queue.CancelSubject(q.storeID), body, &a); err != nil {
		if d := q.fromJournal(err); d != nil {
			// The daemon records a cancellation before it answers: the
			// journal may hold it, or the outcome that made it too late.
			// Without either, an interrupted batch may still hold it.
			if l, lerr := d.lookup(ctx, id); lerr == nil && l.Found {
				a := queue.DecidedCancelAnswer(l.Outcome)
				return &a, nil
			}
			return nil, fmt.Errorf("cancel %s: the daemon went away before it answered; whether it was cancelled is not known until a daemon or a direct writer takes the store (its status tells then): %w", id, err)
		}
		if errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, ErrNoDaemon) {
			// The daemon's status service answers, so it runs: its
			// writer for the store is not ready (or predates cancel).
			return nil, fmt.Errorf("cancel %s: %w: the store's writer does not answer cancel requests (%w)", id, ErrUnavailable, err)
		}
		return nil, err
	}
	return &a, nil
}

// requestOn is request on subject, its body made for each send.
func (q *queued) requestOn(ctx context.Context, subject string, body func() []byte, v any) error {
	label := "status request"
	if subject == queue.CancelSubject(q.storeID) {
		label = "cancel request"
	}
	q.redialIfLost(ctx)
	nc, _ := q.conn()
	wctx, unwatch := q.denied.watch(ctx, subject)
	m, err := nc.RequestWithContext(wctx, subject, body())
	denied := denial(wctx)
	unwatch()
	status := q.remote == "" && subject == queue.StatusSubject(q.storeID)
	if status && errors.Is(err, nats.ErrNoResponders) {
		m, err = q.askUntilClosed(ctx, nc, subject, body)
	}
	if err != nil && denied == nil && q.remote == "" && !q.isClosed() {
		unavailable := func() error {
			d := q.daemon()
			return fmt.Errorf("%s: %w: %s: %w", label, ErrUnavailable, unreachable(q.store, d), err)
		}
		switch {
		case errors.Is(err, nats.ErrConnectionClosed):
			redialled, noDaemon := q.reconnect(ctx, nc)
			switch {
			case redialled:
				return q.requestOn(ctx, subject, body, v)
			case noDaemon:
				return fmt.Errorf("%s: %w now: %w", label, ErrNoDaemon, err)
			case !q.isClosed():
				return unavailable()
			}
		case status && errors.Is(err, nats.ErrNoResponders):
			return unavailable()
		}
	}
	switch {
	case denied != nil:
		return fmt.Errorf("%s: %w", label, denied)
	case err != nil && q.remote != "" && errors.Is(err, nats.ErrNoResponders):
		// On a remote queue, nobody answering means no daemon serves
		// the store now (wherever it would run).
		return fmt.Errorf("%s on %s at %s: %w (%w)", label, subject, q.remote, ErrNoDaemon, err)
	case err != nil:
		return fmt.Errorf("%s: %w", label, err)
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		return fmt.Errorf("%s reply: %w", label, err)
	}
	return nil
}
