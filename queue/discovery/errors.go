package discovery

import (
	"errors"
	"fmt"
	"time"

	"github.com/scribehq/scribe/queue"
)

var (
	// ErrRunning means another daemon already serves the store. The error
	// is a *RunningError naming it.
	ErrRunning = errors.New("a daemon already serves this store")
	// ErrInsecure means the store's .scribe folder, or a file in it that
	// the daemon trusts, could be changed by another user: see
	// queue.ErrInsecure, of which it is the same value. The error is an
	// *InsecureError naming the path.
	ErrInsecure = queue.ErrInsecure
	// ErrStarting means a daemon holds the store's daemon lock but has not
	// announced itself (no discovery file for this store yet): it is
	// starting, or stopping. Find returns it; ask again a little later.
	ErrStarting = errors.New("a daemon holds the store but has not announced itself")
)

// RunningError names the daemon that holds a store's daemon lock.
type RunningError struct {
	Store string
	// Other is the running daemon's discovery file, nil if unreadable.
	Other *queue.Discovery
}

func (e *RunningError) Error() string {
	if e.Other == nil {
		return fmt.Sprintf("a daemon already serves %s (its discovery file is unreadable)", e.Store)
	}
	return fmt.Sprintf("a daemon already serves %s: pid %d at %s since %s",
		e.Store, e.Other.PID, e.Other.URL, e.Other.Started.Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrRunning) true.
func (e *RunningError) Is(target error) bool { return target == ErrRunning }

// InsecureError says which path made Take refuse a store, and why. It is
// queue.InsecureError: every entrance to a store refuses .scribe by the
// same rules, with the same error.
type InsecureError = queue.InsecureError
