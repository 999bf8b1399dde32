// Package lock owns the store lock: an exclusive flock(2) on a store's
// lock file (by default <store>/.scribe/lock), the holder's identity
// written into it, holds nested within a process and handed down to child
// processes (Hold.ChildEnv, InheritedHold), the demand mark of a direct
// writer waiting for a daemon to let go (Demanded), and what the kernel
// says about a lock without taking it (ProbeLock, Holders, LockHolders).
// It is also scribe's one reader of /proc: the locks a file has, and when
// a process started (an identity's start).
//
// It depends on queue (the Layout of .scribe, the Holder identity) and
// golang.org/x/sys. Package writer takes a Hold for every Session; a
// program that only needs to know who holds a store calls ProbeLock.
//
// A busy store is a result, not a fault: Acquire returns a *LockedError
// naming the holder (errors.Is(err, ErrLocked)). Waiting is opt-in
// (Options.Wait) and bounded.
//
// # Caveats
//
// The lock file is never unlinked or replaced: unlinking it would split
// contenders across two inodes. Its content, the holder's identity, is for
// error messages only; only the flock decides who holds the store, and
// no lock is ever broken because it is old.
//
// A bare Hold finishes no batch an earlier holder was interrupted in.
// Hold a store you change through writer.Open or writer.Take, which do:
// a batch redone later could otherwise replace what was written under the
// bare hold.
//
// Holds are re-entrant within a process: a second hold, from any
// goroutine, nests on the same open file description, and the flock goes
// with the last release. A hold that a `scribe lock` parent handed down
// (Hold.ChildEnv) is joined by a child only while the parent's hold
// stands; once the parent has let go, the child is an ordinary contender.
// A hold in daemon mode never joins an inherited hold.
//
// Network filesystems: flock(2) on NFS, SMB/CIFS, FUSE and the like does
// not reliably exclude writers. NetworkFilesystem detects such a store so
// that callers can warn; nothing here can make one safe.
//
// LockHolders reads /proc, which only Linux has:
// elsewhere LockHolders reports that it cannot tell, and ProbeLock falls
// back on taking the lock for an instant.
package lock
