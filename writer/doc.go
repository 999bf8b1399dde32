// Package writer is the one piece of scribe that changes a store: the
// store lock, the journal, the op appliers, and Writer, the loop that owns
// a store for a daemon.
//
// In the layout (cmd → client, writer, embednats → queue) it sits between
// the wire format of package queue, which it decodes and applies, and the
// callers: cmd/scribe runs a Writer per store it serves, and package
// client applies jobs directly through a Session when no daemon serves the
// store. It links bbolt, gofrs/flock and nats.go, never nats-server.
//
// # Holding a store
//
// A store is held through its lock file, by default <store>/.scribe/lock:
// an exclusive flock(2) that only the kernel frees, when its holder dies. A
// busy store is a result, not a fault: the error is a *LockedError naming
// the holder (errors.Is(err, ErrLocked)). Waiting is opt-in and bounded.
//
// There are two ways to hold a store, and both first finish any batch an
// earlier holder was interrupted in and raise the epoch (the fencing token
// every outcome records):
//
//   - Take, for a caller that changes the store's files itself, as
//     `scribe lock` does. It returns a Hold, which can be handed to a child
//     process (Hold.ChildEnv).
//   - OpenSession (OpenSessionWait to wait), for a caller that applies
//     jobs: a Session is the lock, the journal and an os.Root on the store
//     folder. Session.Apply applies jobs as one batch: decided in memory,
//     its outcomes and its intent committed to the journal in one fsynced
//     transaction, then the files written and fsynced; the outcomes show
//     in look-ups only then (docs/recovery.md).
//
// # The daemon's loop
//
// A Writer consumes a store's JetStream queue, takes the store lock only
// while it has work, applies jobs in batches through a Session, records
// their outcomes, purges them from the queue (between batches, many at
// a time, rather than one synced ack each), publishes the outcomes and
// answers the store's status service. It lets go of the store when idle, and between
// batches when a direct writer waits for it, so direct writers are never
// shut out for long.
//
// # Caveats
//
// Network filesystems: flock(2) on NFS, SMB/CIFS, FUSE and the like does
// not reliably exclude writers. NetworkFilesystem detects such a store so
// that callers can warn; nothing here can make one safe. Keep stores on a
// local disk.
//
// The lock file is never unlinked or replaced: unlinking it would split
// contenders across two inodes. Its content, the holder's identity, is for
// error messages only; only the flock decides who holds the store.
//
// Holds are re-entrant within a process: a second hold, from any
// goroutine, nests on the same open file description, and the flock goes
// with the last release. A hold that a `scribe lock` parent handed down
// (Hold.ChildEnv) is joined by a child only while the parent's hold
// stands; once the parent has let go, the child is an ordinary contender.
// A daemon never joins an inherited hold.
//
// Hold a store only through Take or OpenSession, which finish an
// interrupted batch before they hand the store over. A program that takes
// the lock file some other way (flock(1), its own flock) and edits files
// while a batch's intent is pending can see its changes undone when the
// next holder redoes that batch: a put or merge is redone as a
// replacement of the whole file.
//
// The fault-injection hooks the crash tests use (SCRIBE_CRASH_AT,
// SCRIBE_PANIC_ON, SCRIBE_CRASH_ON, SCRIBE_PAUSE_AT) exist only in binaries built with
// -tags scribefault; a normal build ignores those variables.
package writer
