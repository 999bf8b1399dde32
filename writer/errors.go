package writer

import (
	"errors"
	"fmt"
	"time"

	"scribe/queue"
)

var (
	// ErrLocked means the store lock is held by someone else. The error is
	// a *LockedError naming the holder when one could be read.
	ErrLocked = errors.New("store is busy")
	// ErrNotLockFile means the lock path exists but is not a regular file
	// (a folder, FIFO, device or symlink), so scribe will not lock it.
	ErrNotLockFile = errors.New("not a lock file")
	// ErrClosed is returned by a Writer or Session used after Close.
	ErrClosed = errors.New("writer closed")
)

// LockedError reports a busy store lock and, when its content could be
// read, who holds it.
type LockedError struct {
	// Path is the lock file.
	Path string
	// Holder is the identity the holder wrote into the lock file, or nil if
	// the file held none (a non-scribe flock user, or a holder that has not
	// written it yet).
	Holder *queue.Holder
}

func (e *LockedError) Error() string {
	if e.Holder == nil {
		return fmt.Sprintf("store is busy: lock %s is held by an unknown process", e.Path)
	}
	h := e.Holder
	return fmt.Sprintf("store is busy: lock %s is held by pid %d on %s (%s: %s) for %s",
		e.Path, h.PID, h.Host, h.Mode, h.Command, time.Since(h.Since).Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }
