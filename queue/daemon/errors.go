package daemon

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
	// ErrInsecure means the store's .scribe folder, or a file in it that the
	// daemon trusts (the discovery file with the credentials, the daemon
	// lock, the queue's folder), could be changed by another user: it is
	// group- or world-writable, owned by another user, or not the kind of
	// file expected. The error is an *InsecureError naming the path.
	ErrInsecure = errors.New("insecure store metadata")
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

// InsecureError says which path made Take refuse a store, and why.
type InsecureError struct {
	// Path is the offending folder or file.
	Path string
	// Problem says what is wrong with it, e.g. "is world-writable (mode
	// drwxrwxrwx)".
	Problem string
	// Fix is a suggested remedy, empty if there is no simple one.
	Fix string
}

func (e *InsecureError) Error() string {
	msg := fmt.Sprintf("refusing to serve: %s %s; other users could read or replace the daemon's credentials or its queue", e.Path, e.Problem)
	if e.Fix != "" {
		msg += " (fix: " + e.Fix + ")"
	}
	return msg
}

// Is makes errors.Is(err, ErrInsecure) true.
func (e *InsecureError) Is(target error) bool { return target == ErrInsecure }
