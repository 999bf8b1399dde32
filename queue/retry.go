package queue

import (
	"context"
	"time"
)

// Backoff is the pause before retry n (from 0) of an operation on the
// queue or the store that failed for now (a publish, a fetch, a connection,
// a busy store): 10 ms, doubling, at most half a second. Clients and the
// daemon pace their retries alike.
func Backoff(n int) time.Duration {
	return min(10*time.Millisecond<<min(n, 6), 500*time.Millisecond)
}

// Sleep waits d, or returns false as soon as ctx ends.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
