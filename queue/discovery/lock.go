package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/scribehq/scribe/queue"
)

// lockSettle bounds how long Take retries a busy daemon lock. A client
// probing the lock (Find) holds it for microseconds; a daemon holds it for
// its lifetime. Retrying for this long tells the two apart, so a probe
// never makes a starting daemon fail.
const lockSettle = 300 * time.Millisecond

// tryLockSettled takes the lock file at path (created owner-only, and
// held to .scribe's rules on the descriptor it locks), retrying for
// lockSettle, so that a probe's instant hold never fails a start. It
// returns false if another process holds it for longer.
func tryLockSettled(ctx context.Context, path, what string) (*fileLock, bool, error) {
	f, err := queue.OpenPrivate(path, os.O_CREATE|os.O_RDWR, 0o600)
	if errors.Is(err, queue.ErrInsecure) {
		return nil, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	settle := time.Now().Add(lockSettle)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return &fileLock{f: f}, true, nil
		case !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR):
			f.Close()
			return nil, false, fmt.Errorf("%s: %w", what, err)
		case !time.Now().Before(settle):
			f.Close()
			return nil, false, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, false, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// fileLock is an exclusive flock on an open lock file.
type fileLock struct{ f *os.File }

// Unlock releases the flock and closes the file; the file stays.
func (l *fileLock) Unlock() error {
	err := syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Lock is a daemon's hold on a store: the exclusive flock on
// <store>/.scribe/daemon.lock that makes it the store's only daemon, and
// the discovery file it announces itself to clients in. It serves the
// store whatever carries its queue (an embedded server or an external
// one).
type Lock struct {
	layout    queue.Layout
	fl        *fileLock
	mu        sync.Mutex
	announced bool // the discovery file is ours to remove
	closed    bool
}

// Take takes the daemon lock of store, which must exist. If another
// daemon serves the store it returns a *RunningError (ErrRunning) at
// once. If another user could change the store's .scribe folder or a file
// in it that the daemon trusts, it returns an *InsecureError
// (ErrInsecure), having created at most the .scribe folder and the daemon
// lock file, and changed nothing else (perm.go).
//
// Once the lock is held, a discovery file left behind by a daemon that
// was killed is turned into the stranded marker (queue.MarkStranded) and
// removed. Clients learn of the new daemon only from Announce.
func Take(ctx context.Context, store string, log *slog.Logger) (_ *Lock, err error) {
	real, err := queue.ResolveStore(store)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	l := &Lock{layout: queue.Layout{Root: real}}
	meta := l.layout.Meta()
	// Taking the daemon lock creates a file in .scribe: check the folder
	// first, and what is in it once the lock is ours (perm.go).
	if err := checkMetaDir(l.layout); err != nil {
		return nil, err
	}
	var locked bool
	if l.fl, locked, err = tryLockSettled(ctx, l.layout.DaemonLock(), "daemon lock"); err != nil {
		return nil, err
	}
	if !locked {
		var other *queue.Discovery
		if d, rerr := queue.ReadDiscovery(real); rerr == nil {
			other = d
		}
		return nil, &RunningError{Store: real, Other: other}
	}
	defer func() {
		if err != nil {
			_ = l.fl.Unlock()
		}
	}()
	if err := checkMetaFiles(l.layout); err != nil {
		return nil, err
	}
	if err := tightenMetaDir(meta, log); err != nil {
		return nil, err
	}
	warnSharedStore(real, log)
	// A daemon killed before it could clean up left its discovery file:
	// clients trust it while the lock is held, which is now ours, so it
	// goes before anything else. It is also the evidence that jobs may be
	// stranded in the queue: keep that in the marker, which only a writer
	// that has seen the queue empty removes (so a start that fails here
	// loses nothing).
	if old, err := queue.ReadDiscovery(real); err == nil {
		if err := queue.MarkStranded(real, fmt.Sprintf("daemon pid %d was killed", old.PID)); err != nil {
			return nil, err
		}
	}
	if err := os.Remove(l.layout.Discovery()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove stale discovery: %w", err)
	}
	return l, nil
}

// Layout is the store's layout; its Root is the store's canonical path.
func (l *Lock) Layout() queue.Layout { return l.layout }

// Announce writes the discovery file (mode 0600, replaced atomically), so
// that clients start using the daemon. Call it once the store's stream
// and writer are ready: until then clients see a held daemon lock without
// a discovery file (ErrStarting) and wait.
func (l *Lock) Announce(d *queue.Discovery) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("announce: the daemon lock is released")
	}
	if err := l.moved(); err != nil {
		return fmt.Errorf("announce: %w", err)
	}
	l.announced = true // a half-written file is ours to remove too
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	path, tmp := l.layout.Discovery(), l.layout.DiscoveryTemp()
	if err := queue.WritePrivate(tmp, append(b, '\n')); err != nil {
		return fmt.Errorf("write discovery: %w", err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // WriteFile keeps an existing file's mode
		return fmt.Errorf("write discovery: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write discovery: %w", err)
	}
	return nil
}

// Withdraw removes the discovery file Announce wrote, keeping the lock:
// clients stop coming while the daemon shuts its queue down. It does
// nothing if Announce was not called.
func (l *Lock) Withdraw() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.withdraw()
}

func (l *Lock) withdraw() {
	if l.announced && !l.closed {
		// Only a file we wrote, while the lock is ours: another may name
		// another daemon, or be the evidence that made Take refuse. If the
		// store was moved or removed since, its path may now hold another
		// store, whose daemon's file this is.
		if l.lockAtPath() {
			_ = os.Remove(l.layout.Discovery())
		}
		l.announced = false
	}
}

// ErrMoved means that the store a daemon locked is no longer at the path
// it serves: its folder was moved, removed or replaced since, and the
// path may now hold another store.
var ErrMoved = errors.New("no longer the store this daemon locked (moved, removed or replaced since)")

// Moved returns ErrMoved, naming the store's path, once the daemon lock
// file at that path is no longer the one this Lock holds; nil while it is,
// and once the Lock is closed. A daemon stops serving a store that moved:
// what it would do through the path (take the store lock, write files,
// mark or lift the stranded marker) would reach whatever store is there
// now.
func (l *Lock) Moved() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	return l.moved()
}

func (l *Lock) moved() error {
	if l.lockAtPath() {
		return nil
	}
	return fmt.Errorf("%s: %w", l.layout.Root, ErrMoved)
}

// lockAtPath reports whether the daemon lock file at the store's path is
// still the one this Lock holds.
func (l *Lock) lockAtPath() bool {
	held, err := l.fl.f.Stat()
	if err != nil {
		return false
	}
	at, err := os.Lstat(l.layout.DaemonLock())
	return err == nil && os.SameFile(held, at)
}

// Close withdraws the announcement and releases the daemon lock. The lock
// file is never removed. A second Close does nothing.
func (l *Lock) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.withdraw()
	l.closed = true
	return l.fl.Unlock()
}
