// Package queue is scribe's domain and wire format: jobs, ops, outcomes,
// reason codes, store IDs, subject and stream names, the discovery file,
// the stranded marker, and their JSON encoding; and Layout, the one place
// that names the files of a store's .scribe folder. It is what every other package shares, and it
// depends only on the standard library and nats.go, so that any program
// that submits jobs can link it cheaply.
//
// In the layout (cmd → client, writer, embednats → queue) it is the
// bottom: it imports nothing of scribe's. Its sub-package queue/discovery
// owns the daemon lock, the writing of the discovery file and the question
// "is a daemon serving this store, and where" (discovery.Find).
//
// The wire format is specified in docs/protocol.md, for clients in any
// language; Version guards it. Decode is strict (an unknown field rejects
// the job, so a misspelt precondition cannot be dropped silently), and
// every rejection is a *RejectError carrying a stable Reason.
//
// # Caveats
//
// A store is known by its real path (ResolveStore): moving or renaming its
// folder changes its StoreID, hence its subjects and stream.
//
// CheckPath checks a path lexically only. Whether a path reaches outside
// the store, through a symlink or a hard link, is decided by package
// writer when the job is applied, under the store lock.
//
// A Discovery is to be trusted only while its daemon lock
// (Layout.DaemonLock) is held (discovery.Find checks both), and only through
// Pinned (TLS first, with TLSConfig's pinning of the daemon's
// certificate): a stale file names a port someone else may have bound.
//
// Job IDs are idempotency keys only while the journal keeps their
// outcomes: once an outcome is pruned, a job with its ID is applied
// again.
package queue
