package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/gofrs/flock"

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
func Find(store string) (*queue.Discovery, error) {
	l := queue.Layout{Root: store}
	held, err := lockHeld(l.DaemonLock())
	if err != nil || !held {
		return nil, err
	}
	d, err := queue.ReadDiscovery(store)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: it holds %s (%w)", ErrStarting, l.DaemonLock(), err)
	case d.StoreID != queue.StoreID(store):
		return nil, fmt.Errorf("%w: it holds %s, and %s names store %s %s", ErrStarting, l.DaemonLock(), l.Discovery(), d.StoreID, d.Store)
	}
	return d, nil
}

// lockHeld reports whether some process holds the flock on path. The
// probe holds it for an instant at most, and creates nothing.
func lockHeld(path string) (bool, error) {
	fl := flock.New(path, flock.SetFlag(os.O_RDONLY))
	ok, err := fl.TryLock()
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("probe %s: %w", path, err)
	}
	if ok {
		_ = fl.Unlock()
		return false, nil
	}
	return true, nil
}
