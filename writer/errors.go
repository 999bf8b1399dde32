package writer

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by a Writer or Session used after Close.
	ErrClosed = errors.New("writer closed")
	// ErrStoreChanged means scribe's own folder, lock file or journal was
	// replaced under a holder by another program: the holder stops before
	// changing anything, and must let go of the store and take it anew.
	ErrStoreChanged = errors.New("the store's lock file or journal was replaced")
	// ErrStuck matches a *StuckError.
	ErrStuck = errors.New("an interrupted batch cannot be finished")
)

// StuckError reports a batch that was interrupted after its intent was
// recorded and that cannot be carried out now. Until it is, the store
// takes no other write: its jobs were decided, and the files may hold part
// of it. Err says why; an I/O fault (a full or read-only disk) clears by
// itself, anything else needs the operator (docs/recovery.md), who fixes
// what Err names or gives the batch up (Abandon).
type StuckError struct {
	// Jobs and Files count the batch's jobs and the files it changes.
	Jobs, Files int
	// Err is why the last attempt failed.
	Err error
}

func (e *StuckError) Error() string {
	return fmt.Sprintf("an interrupted batch of %d jobs (%d files) cannot be finished: %v", e.Jobs, e.Files, e.Err)
}

// Unwrap returns the cause.
func (e *StuckError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrStuck) true.
func (e *StuckError) Is(target error) bool { return target == ErrStuck }
