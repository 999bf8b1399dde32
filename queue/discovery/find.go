package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/scribehq/scribe/queue"
)

// Find answers "is a daemon serving this store, and where": the
// discovery of the live daemon of store (its canonical path), or nil, nil
// when none holds the store's daemon lock. A daemon that holds the lock
// but has no discovery file for this store (starting, stopping, or a file
// of another store copied along) is ErrStarting, with why.
//
// The discovery file is trusted only while the lock is held. Find learns
// that by taking the lock for an instant; a daemon starting at that
// instant retries for a while rather than fail (see Take).
//
// What it reads is held to the rules of .scribe (queue.CheckPrivate): a
// folder or file another user could change is an *InsecureError.
func Find(store string) (*queue.Discovery, error) {
	l := queue.Layout{Root: store}
	if err := l.Check(); err != nil {
		return nil, err
	}
	held, err := LockHeld(l.DaemonLock())
	if err != nil || !held {
		return nil, err
	}
	d, err := l.ReadDiscovery()
	switch {
	case errors.Is(err, ErrInsecure):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: it holds %s (%w)", ErrStarting, l.DaemonLock(), err)
	case d.StoreID != queue.StoreID(store):
		return nil, fmt.Errorf("%w: it holds %s, and %s names store %s %s", ErrStarting, l.DaemonLock(), l.Discovery(), d.StoreID, d.Store)
	}
	return d, nil
}

// LockHeld reports whether some process holds the flock on path. The
// probe holds it for an instant at most, and creates nothing. The file is
// held to .scribe's rules: a FIFO there cannot block the probe, and one
// another user could change is refused (ErrInsecure).
func LockHeld(path string) (bool, error) {
	f, err := queue.OpenPrivate(path, os.O_RDONLY, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case errors.Is(err, queue.ErrInsecure):
		return false, err
	case err != nil:
		return false, fmt.Errorf("probe %s: %w", path, err)
	}
	defer f.Close()
	for {
		switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
		case err == nil:
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			return false, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return true, nil
		case !errors.Is(err, syscall.EINTR):
			return false, fmt.Errorf("probe %s: %w", path, err)
		}
	}
}
