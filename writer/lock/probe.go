package lock

import (
	"errors"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
)

// ProbeLock reports what the kernel says about a store lock file, not
// what the file remembers: a holder killed with SIGKILL loses its flock at
// once but leaves its identity in the file.
//
// held says whether any process holds a lock on the file. pids are the
// holders' pids where the kernel lists them (/proc/locks on Linux; nil
// elsewhere, or when the file is held by a process of another pid
// namespace or host). holder is the identity in the file, only when it
// belongs to a live holder: its pid is among pids (or, where pids are
// unknown, a process of this host that still exists), or it names another
// host, which this one cannot check. A held lock with a
// nil holder is held by a process that wrote no identity (a program that
// is not scribe, flock(1), or a scribe holder still writing it).
//
// Where /proc/locks cannot be read, ProbeLock takes and at once releases
// a non-blocking flock on the file, which a contender's own non-blocking
// attempt could find held for that instant; with /proc/locks it never
// touches the lock. A missing lock file is free.
func ProbeLock(path string) (held bool, pids []int, holder *queue.Holder) {
	held, pids = Holders(path)
	switch {
	case !held:
		return false, nil, nil
	case pids == nil:
		return true, nil, liveHolder(path)
	}
	// The kernel lists this host's holders: another host's identity is
	// taken as it reads (liveHolder), as where pids are unknown.
	if h := liveHolder(path); h != nil && (slices.Contains(pids, h.PID) || !onThisHost(h)) {
		holder = h
	}
	return true, pids, holder
}

// Holders reports whether any process holds a lock on the file at path,
// as ProbeLock does, without reading the file: for a lock that is another
// tool's, not scribe's. pids are the holders' where the kernel lists them
// (nil elsewhere).
func Holders(path string) (held bool, pids []int) {
	if pids, ok := LockHolders(path); ok {
		return len(pids) > 0, pids
	}
	return flockBusy(path), nil
}

// flockBusy reports whether a non-blocking exclusive flock on path fails
// because another open file holds one; it releases the one it gets at
// once. A file it cannot open counts as free.
func flockBusy(path string) bool {
	f, err := openLockFile(path, os.O_RDONLY)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
