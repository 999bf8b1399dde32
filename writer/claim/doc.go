// Package claim owns the cluster claim: when a store's queue is on a NATS
// server or cluster that several daemons reach, the claim in the
// JetStream key-value bucket Bucket says which one of them applies the
// store's jobs. Acquire waits as a standby while another daemon holds it
// and takes it over when it is released or left unrenewed for its TTL; a
// Claim renews itself until Release, and its revision at the time it was
// won is a fencing token (Token) that every later claim exceeds.
//
// It depends on queue and nats.go's jetstream. A *Claim is the
// journal.Fence of its writer's journal: every batch is committed only
// after a Check of the claim and of the token in the same transaction.
//
// # Caveats
//
// No clocks are compared across machines, but each daemon's own clock is
// trusted to measure a TTL: a holder gives up its claim a fifth of the
// TTL (the margin) before any standby can take it, so clocks that run
// at rates more than that apart can let two writers overlap. Every
// daemon of a store must use the same TTL.
//
// A claim says nothing about the store lock on the disk: a direct writer
// on the daemon's host still takes the store lock, which a daemon on
// another host cannot see. Keep a store a cluster serves on one host's
// disk, or shared only through the queue.
package claim
