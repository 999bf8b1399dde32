//go:build !linux

package lock

// LockHolders lists the pids of the processes that hold a lock on the
// file at path where the kernel lists them (/proc/locks, on Linux); ok is
// false here, where it does not.
func LockHolders(path string) (pids []int, ok bool) { return nil, false }
