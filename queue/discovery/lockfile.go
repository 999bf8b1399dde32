package discovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/scribehq/scribe/queue"
)

// ErrOtherLockFile means a direct writer was given a store lock file other
// than the one the store's live daemon takes: the two would not exclude
// each other, so it must not write. The error is an *OtherLockFileError.
var ErrOtherLockFile = errors.New("not the store lock file the store's daemon takes")

// OtherLockFileError names the lock file a direct writer was given and the
// one the store's daemon takes.
type OtherLockFileError struct {
	Store string
	// Given is the lock file the writer was given; Daemon the one the
	// daemon (pid PID) named in its discovery file.
	Given, Daemon string
	PID           int
}

func (e *OtherLockFileError) Error() string {
	return fmt.Sprintf("%s: the daemon serving it (pid %d) takes the store lock %s, not %s: a direct write under another lock would not exclude it",
		e.Store, e.PID, e.Daemon, e.Given)
}

// Is makes errors.Is(err, ErrOtherLockFile) true.
func (e *OtherLockFileError) Is(target error) bool { return target == ErrOtherLockFile }

// ResolveLockFile is the store lock file of store (its canonical path)
// as the store lock resolves it: <store>/.scribe/lock when lockFile is
// empty, else lockFile made absolute with its folder's symlinks resolved.
// A folder that does not exist is an error naming it: no lock can be
// taken there.
func ResolveLockFile(store, lockFile string) (string, error) {
	if lockFile == "" {
		return queue.Layout{Root: store}.Lock(), nil
	}
	abs, err := filepath.Abs(lockFile)
	if err != nil {
		return "", fmt.Errorf("lock file %s: %w", lockFile, err)
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", fmt.Errorf("lock file %s: its folder %s: %w", lockFile, filepath.Dir(abs), err)
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

// LockFile is the store lock file a direct writer of store (its canonical
// path) must take, given lockFile (empty for none): while a live daemon
// serves the store and its discovery file names its lock file
// (queue.Discovery.LockFile), a writer given none takes the daemon's,
// and one given another gets an *OtherLockFileError (ErrOtherLockFile).
// Without a daemon, or with one too old or too new to say (starting), it
// returns lockFile, or if it is empty configured: the lock_file of the
// store's config file, which a daemon started later takes too. The empty
// string means the default lock file.
func LockFile(store, lockFile, configured string) (string, error) {
	d, err := Find(store)
	if err != nil || d == nil || d.LockFile == "" {
		if lockFile == "" {
			return configured, nil
		}
		return lockFile, nil
	}
	if lockFile == "" {
		if d.LockFile == (queue.Layout{Root: store}).Lock() {
			return "", nil // the default: keep it the default
		}
		return d.LockFile, nil
	}
	given, err := ResolveLockFile(store, lockFile)
	if err != nil {
		return "", err
	}
	if given == d.LockFile || sameFile(given, d.LockFile) {
		return lockFile, nil
	}
	return "", &OtherLockFileError{Store: store, Given: given, Daemon: d.LockFile, PID: d.PID}
}

// sameFile reports whether two existing paths are one file: flock locks
// the file, so a hard link to the daemon's lock file is the same lock.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
