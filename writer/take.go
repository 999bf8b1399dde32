package writer

import (
	"context"

	"github.com/scribehq/scribe/writer/lock"
)

// Take takes a store for a caller that changes its files itself, as
// `scribe lock` does: it takes the store lock as Open does (fail-fast
// unless o.Wait is set; o.Mode, empty for queue.ModeDirect), raises the
// epoch and finishes any batch an earlier holder was interrupted in, and
// only then returns the hold. A batch redone later
// could otherwise truncate or replace what the caller writes now. If the
// interrupted batch cannot be finished, Take fails with its *StuckError
// and holds nothing. If another process holds the store, the error is a
// *LockedError naming the holder (errors.Is(err, ErrLocked)): contention
// is a result, not a fault. The journal is closed again before Take
// returns, so that processes the hold is handed to (ChildEnv) may open it.
func Take(ctx context.Context, store string, o Options) (*lock.Hold, error) {
	o = o.defaults()
	l, err := lock.Acquire(ctx, store, o.lockOptions())
	if err != nil {
		return nil, err
	}
	// A session nested in the hold raises the epoch and redoes the
	// interrupted batch; closing it closes the journal, keeping the hold.
	o.Wait = 0
	s, err := Open(ctx, store, o)
	if err == nil {
		err = s.Close()
	}
	if err != nil {
		_ = l.Unlock()
		return nil, err
	}
	return l, nil
}
