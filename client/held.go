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
	find func(ctx context.Context) (*queued, error) // the daemon's route; nil, nil for none

	mu     sync.Mutex
	looked bool
	q      *queued // nil: no daemon, or none reachable; look-ups read the journal
}

// lookups is the route of look-ups: the daemon's, else direct's.
func (h *held) lookups(ctx context.Context) route {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.looked {
		h.looked = true
		if q, err := h.find(ctx); err == nil && q != nil {
			h.q = q
		}
	}
	if h.q != nil {
		return h.q
	}
	return h.direct
}

func (h *held) lookup(ctx context.Context, id string) (*queue.Lookup, error) {
	return h.lookups(ctx).lookup(ctx, id)
}

func (h *held) report(ctx context.Context) (*queue.StatusReport, error) {
	return h.lookups(ctx).report(ctx)
}

func (h *held) cancel(ctx context.Context, id string) (*queue.CancelAnswer, error) {
	return h.lookups(ctx).cancel(ctx, id)
}

func (h *held) deadLetters(ctx context.Context) (*queue.DeadLetters, error) {
	return h.lookups(ctx).deadLetters(ctx)
}

func (h *held) locate(ctx context.Context, id string) (*queue.Lookup, error) {
	return h.lookups(ctx).locate(ctx, id)
}

func (h *held) waitFor(ctx context.Context, id string) (*queue.Lookup, error) {
	return h.lookups(ctx).waitFor(ctx, id)
}

func (h *held) jobs(ctx context.Context, q queue.JobsQuery) (*queue.JobList, error) {
	return h.lookups(ctx).jobs(ctx, q)
}

// daemon is the discovery of the daemon that answers the look-ups, nil for
// none (finding it is bounded by the connect timeout).
func (h *held) daemon() *queue.Discovery {
	return h.lookups(context.Background()).daemon()
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
