package writer

import (
	"context"
	"log/slog"
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/lock"
)

// HoldOptions configures Take.
type HoldOptions struct {
	// LockPath is the lock file; empty means DefaultLockPath(store). Set
	// it to share the lock an existing tool already takes.
	LockPath string
	// Command describes the holder in other processes' error messages.
	Command string
	// Wait is how long to wait for a busy store; 0 means not at all (a
	// busy store returns a *LockedError at once).
	Wait time.Duration
	// Logger receives recovery messages; nil discards them.
	Logger *slog.Logger
}

// Take takes a store for a caller that changes its files itself, as a
// direct writer (queue.ModeDirect): it takes the store lock, fail-fast unless
// o.Wait is set, raises the epoch and finishes any batch an earlier holder
// was interrupted in, and only then returns the hold. A batch redone later
// could otherwise truncate or replace what the caller writes now. If the
// interrupted batch cannot be finished, Take fails with its *StuckError
// and holds nothing. If another process holds the store, the error is a
// *LockedError naming the holder (errors.Is(err, ErrLocked)): contention
// is a result, not a fault. The journal is closed again before Take
// returns, so that processes the hold is handed to (ChildEnv) may open it.
func Take(ctx context.Context, store string, o HoldOptions) (*lock.Hold, error) {
	l, err := lock.Acquire(ctx, store, lock.Options{LockPath: o.LockPath, Mode: queue.ModeDirect, Command: o.Command, Wait: o.Wait})
	if err != nil {
		return nil, err
	}
	// A session nested in the hold raises the epoch and redoes the
	// interrupted batch; closing it closes the journal, keeping the hold.
	s, err := OpenSession(store, SessionOptions{LockPath: o.LockPath, Command: o.Command, Logger: o.Logger})
	if err == nil {
		err = s.Close()
	}
	if err != nil {
		_ = l.Unlock()
		return nil, err
	}
	return l, nil
}
