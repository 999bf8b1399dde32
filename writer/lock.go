package writer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gofrs/flock"

	"scribe/queue"
)

// Lock modes, recorded in the holder identity.
const (
	ModeDaemon = "daemon"
	ModeDirect = "direct"
)

// DefaultLockPath is the store lock file of a store: <store>/.scribe/lock.
func DefaultLockPath(store string) string {
	return filepath.Join(store, queue.MetaDir, "lock")
}

// MetaDir returns a store's private folder, creating it (mode 0700) if
// needed.
func MetaDir(store string) (string, error) {
	dir := filepath.Join(store, queue.MetaDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	return dir, nil
}

// Lock is a held store lock: an exclusive flock(2) on the lock file. Only
// the kernel releases it when its holder dies; scribe never breaks a lock
// because it is old and never unlinks the lock file.
type Lock struct {
	path string
	fl   *flock.Flock
}

// TryLock takes the exclusive lock on path without waiting. If it is held,
// the error is a *LockedError (errors.Is(err, ErrLocked)). On success the
// holder identity h is written into the file.
func TryLock(path string, h queue.Holder) (*Lock, error) {
	if err := checkLockFile(path); err != nil {
		return nil, err
	}
	fl := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o600))
	ok, err := fl.TryLock()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !ok {
		return nil, &LockedError{Path: path, Holder: liveHolder(path)}
	}
	l := &Lock{path: path, fl: fl}
	if err := l.SetHolder(h); err != nil {
		_ = fl.Unlock()
		return nil, err
	}
	return l, nil
}

// checkLockFile refuses a lock path that exists and is not a regular file.
func checkLockFile(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("lock %s is a %s: %w", path, describeMode(fi.Mode()), ErrNotLockFile)
	}
	return nil
}

func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "folder"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "non-regular file"
}

// Path is the lock file.
func (l *Lock) Path() string { return l.path }

// SetHolder records h in the lock file. It writes the new identity over the
// old one and only then truncates to its length, so a reader never sees an
// empty file while the lock is held.
func (l *Lock) SetHolder(h queue.Holder) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	f, err := os.OpenFile(l.path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("write holder %s: %w", l.path, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write holder %s: %w", l.path, err)
	}
	if err := f.Truncate(int64(len(b))); err != nil {
		return fmt.Errorf("write holder %s: %w", l.path, err)
	}
	return nil
}

// Unlock releases the lock. It first empties the identity, while still
// holding the lock, so that a later non-scribe holder (flock(1), say) is not
// reported under our name. The file itself is never removed.
func (l *Lock) Unlock() error {
	if f, err := os.OpenFile(l.path, os.O_WRONLY, 0); err == nil {
		_ = f.Truncate(0)
		_ = f.Close()
	}
	if err := l.fl.Unlock(); err != nil {
		return fmt.Errorf("unlock %s: %w", l.path, err)
	}
	return nil
}

// ReadHolder reads the holder identity from a lock file. It returns nil and
// an error when the file holds none or garbage: callers then report an
// unknown holder.
func ReadHolder(path string) (*queue.Holder, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h queue.Holder
	if err := json.Unmarshal(b, &h); err != nil || h.PID == 0 {
		return nil, fmt.Errorf("lock %s holds no scribe identity", path)
	}
	return &h, nil
}

// liveHolder reads the identity in a busy lock file, discarding one that
// names a process of this host that no longer exists: a holder killed before
// it could clear the file, while someone else (without an identity) holds
// the lock now.
func liveHolder(path string) *queue.Holder {
	h, err := ReadHolder(path)
	if err != nil {
		return nil
	}
	if host, _ := os.Hostname(); h.Host == host && errors.Is(syscall.Kill(h.PID, 0), syscall.ESRCH) {
		return nil
	}
	return h
}

// NewHolder describes this process as a lock holder.
func NewHolder(mode, command string) queue.Holder {
	host, _ := os.Hostname()
	return queue.Holder{PID: os.Getpid(), Host: host, Mode: mode, Command: command, Since: time.Now().UTC()}
}
