// Package embednats runs the embedded nats-server with JetStream that a
// scribe daemon serves its stores through: file storage under the store's
// .scribe folder (Start), or for a daemon of several stores in a shared
// queue folder with an account per store (StartShared); a loopback
// listener that requires TLS (with a certificate made for this start) and
// credentials, an in-process connection per store for the daemon's
// writers, and the Discovery clients find it by. It runs under the
// stores' daemon locks (queue/discovery: Take, then Start, then
// Lock.Announce the server's Discovery), which also check the .scribe
// folders and write the discovery files: a daemon whose queue is an
// external NATS server takes the same locks without this package.
//
// A store's queued jobs follow it from daemon to daemon: TakeOver moves
// them from where the previous daemon kept them (discovery.QueueHome)
// into this server before the store's writer starts, and TakeOverInto
// into any JetStream, such as a cluster the store moves to; a
// TakeOverConfig says what moves where. Watch checks the server's health once for
// all the writers.
//
// StartNode runs a node of a NATS cluster from a nats-server config file
// (serve --nats-config, docs/cluster.md): the operator's accounts, routes
// and TLS, no credentials or discovery of its own; the daemon connects to
// it as to any NATS server.
//
// In the layout (cmd → client, writer, embednats → queue) only the
// daemon, writer/daemon, imports it; it imports nothing of scribe's but
// queue (and queue/discovery). Programs that submit jobs never link it.
//
// # Caveats
//
// TLS pinning: the daemon makes a self-signed certificate at every start,
// its private key only in memory, and puts it with its SHA-256
// fingerprint into the Discovery, which discovery.Lock.Announce writes to
// the discovery file (mode 0600, in a 0700 folder). Clients must use it
// as their only root and check the fingerprint (queue.Discovery
// TLSConfig), or another local user who binds the port after a restart can
// pass for the daemon. The listener takes clients that begin with TLS
// only (nats-server's handshake_first, no fallback; queue.Discovery
// Pinned), so that nothing is read or sent in clear. A restarted daemon has a new port, password and
// certificate.
//
// The queue lives on the store's disk (on the shared queue folder's, for
// several stores), and JetStream reserves each stream's byte limit there
// up front: a store whose disk is short of it does not start
// (queue.ErrNoSpace). After the disk fills up, a stream keeps its
// write error until its JetStream is restarted, which Server.CheckQueue
// does once space is back.
//
// A listener on a non-loopback address is allowed but warned about:
// anyone who can reach it and has the credentials can submit.
//
// The server wakes the process about ten times a second whatever it
// serves (nats-server's access-time clock ticks every 100 ms while any
// file store exists), and with a sync interval (Config.SyncInterval)
// once per interval per stream: an idle daemon is never quite asleep.
package embednats
