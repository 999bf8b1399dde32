package embednats

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Watch checks the server's queue (CheckQueue) for all the writers of the
// server at once: one check per interval, however many stores it serves.
// A writer given Watch.CheckQueue as its daemon.WriterConfig.CheckQueue waits
// in it for a change instead of polling: an idle daemon of 20 stores
// wakes once per interval for the check, not 20 times.
//
// While the queue is idle (nothing stored or removed since the last check,
// and no fault) the checks are IdleCheckInterval apart: a fault that
// appears then (a publish the full disk refused) is found that much later.
type Watch struct {
	s        *Server
	interval time.Duration
	cancel   context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex
	state   watchState
	changed chan struct{} // closed and replaced at each change of state
}

// IdleCheckInterval is how often Watch checks an idle queue.
const IdleCheckInterval = 5 * time.Second

// watchState is the outcome of the checks so far: gen counts its changes,
// restarts the restarts of JetStream, fault is the fault still present.
type watchState struct {
	gen      uint64
	restarts uint64
	fault    error
}

// Watch starts checking the queue every interval while it is busy, every
// IdleCheckInterval (if longer) while it is idle. Close stops it.
func (s *Server) Watch(interval time.Duration) *Watch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watch{s: s, interval: interval, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	go w.run(ctx)
	return w
}

func (w *Watch) run(ctx context.Context) {
	defer close(w.done)
	t := time.NewTimer(w.interval)
	defer t.Stop()
	last := w.s.activity()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		restarted, err := w.s.CheckQueue(cctx)
		cancel()
		w.update(restarted, err)
		next := max(w.interval, IdleCheckInterval)
		if now := w.s.activity(); now != last || err != nil || restarted {
			next, last = w.interval, now
		}
		t.Reset(next)
	}
}

// activity sums what the served stores' queues have stored and the
// JetStream API requests of their accounts: it changes when jobs are
// queued or acked, or the daemon asks about its queues.
func (s *Server) activity() uint64 {
	var sum uint64
	add := func(acc *server.Account) {
		u := acc.JetStreamUsage()
		sum += u.Store + u.API.Total
	}
	if !s.shared {
		add(s.ns.GlobalAccount())
		return sum
	}
	for _, st := range s.stores {
		if acc, err := s.ns.LookupAccount(AccountName(st.discovery.StoreID)); err == nil {
			add(acc)
		}
	}
	return sum
}

// update records a check's outcome, and wakes the writers waiting for a
// change if it is one.
func (w *Watch) update(restarted bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !restarted && errText(err) == errText(w.state.fault) {
		return
	}
	w.state.gen++
	if restarted {
		w.state.restarts++
	}
	w.state.fault = err
	close(w.changed)
	w.changed = make(chan struct{})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// CheckQueue returns a function for one writer's
// daemon.WriterConfig.CheckQueue, to be called by that writer alone. A call
// returns at once with what changed since its last (whether JetStream was
// restarted, and the fault present); with nothing new it waits for a
// change until ctx ends, then returns the fault present.
func (w *Watch) CheckQueue() func(ctx context.Context) (restarted bool, err error) {
	var seenGen, seenRestarts uint64
	return func(ctx context.Context) (bool, error) {
		for {
			w.mu.Lock()
			st, changed := w.state, w.changed
			w.mu.Unlock()
			if st.gen != seenGen {
				restarted := st.restarts != seenRestarts
				seenGen, seenRestarts = st.gen, st.restarts
				return restarted, st.fault
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return false, st.fault
			}
		}
	}
}

// Close stops the checks and waits for the one in progress.
func (w *Watch) Close() {
	w.cancel()
	<-w.done
}
