package client

import (
	"context"
	"sync"

	"github.com/scribehq/scribe/queue"
)

// held is the prefer route of a process handed a standing hold of the
// store (run by `scribe lock`, or by the daemon as an exec command). Its
// jobs are applied directly, under the hold: queued, a job would wait for
// the holder, which may be waiting for it. Its look-ups, cancels and the
// status still go to the store's daemon, if one is alive, since only it
// knows the queue; the daemon is looked for at the first of them, so
// that a write under the hold does not pay for a connection it does not
// use.
type held struct {
	*direct
	// find connects to the store's daemon: nil, nil when none is alive;
	// ErrUnavailable when one is that does not answer.
	find func(ctx context.Context) (*queued, error)

	mu     sync.Mutex
	looked bool
	q      *queued // nil: no daemon; look-ups read the journal
}

// lookups is the route of look-ups: the daemon's, else direct's. A daemon
// that does not answer is an error, as it is to a client that is not
// under a hold (and it is looked for again at the next look-up).
func (h *held) lookups(ctx context.Context) (route, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.looked {
		q, err := h.find(ctx)
		if err != nil {
			return nil, err
		}
		h.q, h.looked = q, true
	}
	if h.q != nil {
		return h.q, nil
	}
	return h.direct, nil
}

// ask runs a look-up on the route of look-ups.
func ask[T any](h *held, ctx context.Context, f func(route) (T, error)) (T, error) {
	r, err := h.lookups(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	return f(r)
}

func (h *held) lookup(ctx context.Context, id string) (*queue.Lookup, error) {
	return ask(h, ctx, func(r route) (*queue.Lookup, error) { return r.lookup(ctx, id) })
}

func (h *held) report(ctx context.Context) (*queue.StatusReport, error) {
	return ask(h, ctx, func(r route) (*queue.StatusReport, error) { return r.report(ctx) })
}

func (h *held) cancel(ctx context.Context, id string) (*queue.CancelAnswer, error) {
	return ask(h, ctx, func(r route) (*queue.CancelAnswer, error) { return r.cancel(ctx, id) })
}

func (h *held) deadLetters(ctx context.Context) (*queue.DeadLetters, error) {
	return ask(h, ctx, func(r route) (*queue.DeadLetters, error) { return r.deadLetters(ctx) })
}

func (h *held) locate(ctx context.Context, id string) (*queue.Lookup, error) {
	return ask(h, ctx, func(r route) (*queue.Lookup, error) { return r.locate(ctx, id) })
}

func (h *held) waitFor(ctx context.Context, id string) (*queue.Lookup, error) {
	return ask(h, ctx, func(r route) (*queue.Lookup, error) { return r.waitFor(ctx, id) })
}

func (h *held) jobs(ctx context.Context, q queue.JobsQuery) (*queue.JobList, error) {
	return ask(h, ctx, func(r route) (*queue.JobList, error) { return r.jobs(ctx, q) })
}

// daemon is the discovery of the daemon that answers the look-ups, nil
// for none, or for one that does not answer (finding it is bounded by the
// connect timeout).
func (h *held) daemon() *queue.Discovery {
	r, err := h.lookups(context.Background())
	if err != nil {
		return nil
	}
	return r.daemon()
}

func (h *held) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.looked = true // no daemon is looked for after Close
	if h.q != nil {
		return h.q.close()
	}
	return nil
}
