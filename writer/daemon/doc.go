// Package daemon is scribe's daemon as a library: Daemon serves one store
// or many, on the embedded queue (package embednats) or on a NATS server
// or cluster that other daemons reach too, standing by while another
// daemon holds a store's claim and taking it over when that one stops. It
// holds each store's daemon lock and announces itself in the store's
// discovery file (package queue/discovery), moves the jobs a store's
// former daemon left queued to the queue it serves from now (written
// once, for every kind of queue), exits when idle if asked (Config.ExitIdle),
// marks the stores whose jobs stay queued when it stops, and serves
// Prometheus metrics (Config.Metrics). Writer is the per-store loop under
// it: it consumes the store's queue, takes the store lock only while it
// has work, applies jobs in batches through a writer.Session, runs exec
// jobs with the lock handed down, purges decided jobs from the queue,
// publishes their outcomes and answers the store's status service and
// its cancel requests. It decides high-priority jobs first, taking one
// batch of normal jobs after queue.MaxHighBatches batches of high ones in
// a row while normal jobs wait, and answers a cancel only between
// decisions, recording the cancellation before the answer, so that a job
// is either cancelled or decided, never both.
//
// A Go program runs a daemon of two stores with
//
//	d, err := daemon.Start(ctx, daemon.Config{Stores: []daemon.Store{{Path: a}, {Path: b}}})
//	if err != nil { … }
//	defer d.Close()
//	err = d.Run(ctx) // until ctx ends
//
// and its callers submit with package client, which finds the daemon
// through the discovery files. cmd/scribe's serve turns its flags and
// config file into a Config and nothing else.
//
// It is the one package of writer that imports embednats (and, through
// it, nats-server) and prometheus: package client, which hooks link,
// imports none of it.
//
// # Caveats
//
// A process runs one daemon per store: the daemon lock is a flock, and
// a second Start for a store this process serves fails like another
// process's would (discovery.ErrRunning).
//
// Start takes the stores' locks and, on a cluster, their claims: it
// blocks, standing by, while another daemon holds one, until ctx ends.
// Close always waits for every writer to finish the batch in hand.
//
// A daemon of several stores on the embedded queue keeps their queues in
// one shared folder (Queue.Dir, by default discovery.DefaultQueueDir)
// that it holds while it runs: two daemons of different stores need
// folders of their own.
//
// An exec command runs with the daemon's user, as the daemon's process's
// child: the allowlist (Config.Commands) is as trusted as the daemon's
// own configuration. Descriptors the daemon's own process inherited are
// kept from commands (they are marked close-on-exec), but the daemon does
// not close them: a program that starts daemons for other processes
// closes what it inherited first (exec.CloseInherited), as scribe serve
// does.
package daemon
