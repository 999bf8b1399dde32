package writer

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/scribehq/scribe/queue"
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
	return fmt.Sprintf("store is busy: lock %s is held by %s for %s",
		e.Path, DescribeHolder(e.Holder), time.Since(e.Holder.Since).Round(time.Millisecond))
}

// DescribeHolder names a lock holder for a message: its pid, host, mode
// (if it has one: another tool's identity has none) and quoted command.
func DescribeHolder(h *queue.Holder) string {
	if h.Mode == "" {
		return fmt.Sprintf("pid %d on %s (%s)", h.PID, h.Host, QuoteCommand(h.Command))
	}
	return fmt.Sprintf("pid %d on %s (%s: %s)", h.PID, h.Host, h.Mode, QuoteCommand(h.Command))
}

// MaxCommandShown is how many bytes of a holder's command QuoteCommand
// keeps.
const MaxCommandShown = 80

// QuoteCommand is a lock holder's command as error messages show it: Go
// quoted, so that newlines and control characters from the lock file
// (which any program may write) cannot forge lines of output, and cut
// after MaxCommandShown bytes ("…" marks the cut).
func QuoteCommand(cmd string) string {
	if len(cmd) <= MaxCommandShown {
		return strconv.Quote(cmd)
	}
	cut := MaxCommandShown
	for cut > 0 && !utf8.RuneStart(cmd[cut]) {
		cut--
	}
	return strconv.Quote(cmd[:cut] + "…")
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }
