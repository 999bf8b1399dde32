// Package writer owns the Session: holding a store and changing it. A
// Session is the store lock (package writer/lock), the journal (package
// writer/journal) and a descriptor on the store folder; Session.Apply
// decides a batch of jobs in memory (each job's ops all or nothing, over
// an overlay of the files), records its outcomes and its intent in the
// journal in one fsynced transaction, then writes and fsyncs the files,
// and redoes an earlier holder's interrupted batch before anything else.
// A big file written whole is staged first (written and synced beside the
// file), and the intent names it instead of holding a copy of its data.
// It also plans exec jobs against the allowlist (package writer/exec) for
// the daemon, whose loop runs them (package writer/daemon).
//
// There is one way to hold a store, and two shapes of it, both of which
// first finish any batch an earlier holder was interrupted in and raise
// the epoch (the fencing token every outcome records):
//
//   - Open, for a caller that applies jobs: a Session.
//   - Take, for a caller that changes the store's files itself, as `scribe
//     lock` does: a lock.Hold, which can be handed to a child process
//     (lock.Hold.ChildEnv).
//
// Both take writer.Options: fail fast by default (a busy store is a
// *lock.LockedError naming the holder, errors.Is(err, lock.ErrLocked)),
// waiting only up to Options.Wait and while ctx lasts.
//
// In the layout (cmd → client, writer, embednats → queue) it sits between
// the wire format of package queue, which it decodes and applies, and its
// callers: package client applies jobs directly through a Session when no
// daemon serves the store, and each store's daemon.Writer applies its
// queue's batches through one. It links bbolt, gofrs/flock and nats.go's
// wire types, never nats-server, micro or a metrics library.
//
// # Caveats
//
// Hold a store only through Open or Take, which finish an interrupted
// batch before they hand the store over. A program that takes the lock
// file some other way (flock(1), its own flock, a bare lock.Acquire) and
// edits files while a batch's intent is pending can see its changes
// undone when the next holder redoes that batch: a put or merge is redone
// as a replacement of the whole file (a staged one only while its temp
// file is there).
//
// Sessions are re-entrant like the lock: a second Session a process opens
// on a store it holds shares the first one's hold, journal and folder, and
// their batches take turns.
//
// A job reaches only the store's own files: paths are walked one name at
// a time without following a symlink, and scribe's own .scribe folder,
// its lock file and journal are out of reach whatever their names (a hard
// link, a custom lock file inside the store). A file is written only if
// it has one name.
//
// An error from Apply is an I/O fault, not a rejection: nothing of the
// batch is recorded as applied, though part of it may be on disk; the
// next Apply, or the next holder, completes it. A batch that cannot be
// completed is a *StuckError until an operator fixes what it names, or
// gives it up (Abandon).
//
// The fault-injection hooks the crash tests use (SCRIBE_CRASH_AT,
// SCRIBE_PANIC_ON, SCRIBE_CRASH_ON, SCRIBE_PAUSE_AT) exist only in binaries
// built with -tags scribefault; a normal build ignores those variables.
package writer
