// Package client is what programs link to write to a scribe store: hook
// binaries, MCP servers, CLI tools. Open finds the store's daemon through
// its discovery file and queues jobs there (Submit, Apply), or, when no
// daemon serves the store, applies them directly under the store lock,
// failing fast with ErrBusy when the store is busy. Status looks an
// outcome up in the journal; Locate also tells a job that is queued (and
// where) from one that is unknown, Wait waits for an outcome, and Jobs
// lists recent outcomes and queued jobs. Cancel takes a job still
// queued off the queue, through the daemon. Report (or Client.StoreStatus)
// is the status of a store with or without a daemon: the daemon's report,
// or what the journal, the stranded mark and the store lock tell, as
// `scribe status` and the MCP server show it.
//
// In the layout (cmd → client, writer, embednats → queue) it builds on
// queue (the wire format) and writer (the direct route). It does not link
// nats-server, so the programs that use it stay small; a test checks that
// with go list -deps.
//
// The route is chosen once, at Open: RoutePrefer (the daemon if one serves
// the store, else a direct write), RouteRequire (the daemon only) or
// RouteDirect (never the daemon). A job whose fate is unknown (an error
// from Submit or Apply other than a rejection) may still be applied: call
// Apply again with the same job ID, never redo it by another route.
//
// OpenRemote (or Open with WithRemote) reaches a store whose queue is on
// a NATS server or cluster that its operator runs, from any host, by the
// store's ID: jobs are always queued there, never written directly.
//
// How the client retries, its timeouts and its NATS options are described
// in docs/go-client.md; the wire format it speaks is docs/protocol.md.
//
// # Caveats
//
// Network filesystems: direct writes rely on flock(2), which NFS, SMB and
// FUSE filesystems do not reliably honour. Keep stores on a local disk.
//
// The client talks only to the daemon its owner-only discovery file names,
// trusting that file only while the daemon lock is held, over TLS pinned to
// the certificate in the file (ErrUnverified otherwise). It never
// reconnects on its own to a remembered address: a lost connection is
// redialled through discovery. A remote queue's connection (OpenRemote)
// is the exception: it trusts the operator's TLS settings and
// credentials, and reconnects across the cluster's servers by itself.
//
// Direct writes take the same lock as the daemon and scribe lock, and are
// re-entrant within a process. Inside a `scribe lock` command, a direct
// write joins the parent's hold only while that hold stands, and so does a
// prefer-route one, even with a daemon running (queued, its job would
// wait for the command, which may be waiting for it); RouteRequire queues,
// and the daemon applies the job after the command ends. Such a client's
// look-ups, cancels and status still ask a running daemon.
//
// Exec jobs (queue.OpExec) run only in the daemon, which has the
// allowlist of commands: without one, Submit and Apply refuse them with
// ErrExecNeedsDaemon (an ErrNoDaemon) before taking the lock or writing
// anything. WithAutostart starts a daemon for them.
//
// While a daemon that stopped or died may have left jobs queued, the
// prefer route refuses to write directly past them (ErrUnavailable)
// instead of reordering; RouteDirect goes past them.
package client
