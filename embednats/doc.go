// Package embednats runs the embedded nats-server with JetStream that a
// scribe daemon serves a store through: file storage under the store's
// .scribe folder, a loopback listener that requires TLS (with a
// certificate made for this start) and credentials, an in-process
// connection for the daemon's own writer, and the Discovery clients find
// it by. It runs under the store's daemon lock (queue/daemon: Take, then
// Start, then Lock.Announce the server's Discovery), which also checks
// the .scribe folder and writes the discovery file: a daemon whose queue
// is an external NATS server takes the same lock without this package.
//
// In the layout (cmd → client, writer, embednats → queue) only cmd/scribe
// imports it; it imports nothing of scribe's but queue (and queue/daemon).
// Programs that submit jobs never link it.
//
// # Caveats
//
// TLS pinning: the daemon makes a self-signed certificate at every start,
// its private key only in memory, and puts it with its SHA-256
// fingerprint into the Discovery, which daemon.Lock.Announce writes to
// the discovery file (mode 0600, in a 0700 folder). Clients must use it
// as their only root and check the fingerprint (queue.Discovery
// TLSConfig), or another local user who binds the port after a restart can
// pass for the daemon. A restarted daemon has a new port, password and
// certificate.
//
// The queue lives on the store's disk, and JetStream reserves the stream's
// byte limit there up front: a store whose disk is short of it does not
// start (queue.ErrNoSpace). After the disk fills up, a stream keeps its
// write error until its JetStream is restarted, which Server.CheckQueue
// does once space is back.
//
// A listener on a non-loopback address is allowed but warned about:
// anyone who can reach it and has the credentials can submit.
package embednats
