package lock

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
	return fmt.Sprintf("store is busy: lock %s is held by %s for %s",
		e.Path, DescribeHolder(e.Holder), time.Since(e.Holder.Since).Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// DescribeHolder names a lock holder for a message: its pid, host, mode
// (if it has one: another tool's identity has none) and quoted command.
func DescribeHolder(h *queue.Holder) string {
	if h.Mode == "" {
		return fmt.Sprintf("pid %d on %s (%s)", h.PID, h.Host, quoteCommand(h.Command))
	}
	return fmt.Sprintf("pid %d on %s (%s: %s)", h.PID, h.Host, h.Mode, quoteCommand(h.Command))
}

// maxCommandShown is how many bytes of a holder's command quoteCommand
// keeps.
const maxCommandShown = 80

// quoteCommand is a lock holder's command as error messages show it: Go
// quoted, so that newlines and control characters from the lock file
// (which any program may write) cannot forge lines of output, and cut
// after maxCommandShown bytes ("…" marks the cut).
func quoteCommand(cmd string) string {
	if len(cmd) <= maxCommandShown {
		return strconv.Quote(cmd)
	}
	cut := maxCommandShown
	for cut > 0 && !utf8.RuneStart(cmd[cut]) {
		cut--
	}
	return strconv.Quote(cmd[:cut] + "…")
}
