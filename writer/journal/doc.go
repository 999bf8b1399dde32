// Package journal owns a store's bbolt journal, <store>/.scribe/journal.db:
// the outcome of every job by ID, the epoch counter, the last applied
// queue sequence, the intent of the batch whose files may not be on disk
// yet (Intent, Record, Settle, Pending), the run record of an exec
// command in progress (Run), dead letters, the attempts of a job that may
// kill its writer, the tally of outcomes, retention (Prune, MaybePrune)
// and the read-only look-ups a status report or a client makes without
// the store lock (OpenReadOnly, Lookup, Recent, Info, Interrupted). A
// daemon's writer whose queue other daemons reach commits only under its
// claim (Fence).
//
// It depends on queue (outcomes, dead letters, the Layout and the rule of
// private files) and bbolt. Package writer opens it for writing under the
// store lock; anyone may open it read-only.
//
// A batch costs one synced transaction: its outcomes are recorded with its
// intent, before any file changes. Until the files are written and synced
// (Settle), or only written (SettleWritten: the next batch's intent then
// carries the changes again, and its transaction writes only its own
// changes beside theirs), those outcomes are provisional: look-ups
// do not show them, and a holder that finds the intent standing, after a
// crash, redoes it. The settled mark, <store>/.scribe/settled, tells
// every other process that the intent was carried out.
//
// # Caveats
//
// Open for writing only under the store lock: the journal is opened by
// one process at a time, and bbolt's own file lock makes a second opener
// (a read-only one too) wait, for at most its timeout.
//
// The journal, its folder and the settled mark are held to the rules of
// .scribe (queue.OpenPrivate, queue.Layout.Check): one another user could
// have written is refused (an *queue.InsecureError), and nothing of it is
// read.
//
// A job ID is an idempotency key only while the journal keeps its
// outcome: Prune removes outcomes older than the retention, except those
// the queue could still redeliver (maxSeq). Keep the retention longer
// than any client retries.
//
// The settled mark is written with one pwrite and no fsync: a power loss
// may lose it, and then the intent looks interrupted and is redone, which
// is harmless. A synced mark never names an intent whose files were not
// durable; a written one (SettleWritten) names one whose files are only
// written, for look-ups in the same boot of the machine (read from
// /proc/sys/kernel/random/boot_id; where there is none, it is not
// written), and no holder trusts it.
package journal
