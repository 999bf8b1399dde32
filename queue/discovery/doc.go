// Package discovery owns how a store's daemon is found, whatever carries
// its queue: the daemon lock that makes one process the store's only
// daemon (Take), the discovery file it announces itself to clients in
// (Lock.Announce), and the one answer to "is a daemon serving this store,
// and where" (Find).
// A daemon of several stores takes each store's lock, and the shared
// queue folder that keeps their queues (TakeQueueDir); each store's
// queue-home note (QueueHome) says where its jobs are kept when not in
// the store.
//
// It depends on queue (the Layout of .scribe, the Discovery format, the
// stranded marker) and gofrs/flock. The daemon (writer/daemon) takes the
// lock, then starts the queue's server (embednats) under it; clients only
// call Find.
//
// # Caveats
//
// The discovery file holds the submitters' credentials: Take refuses a
// .scribe folder, or a file in it the daemon trusts, that another user
// could change (ErrInsecure), and a store another daemon already serves
// (ErrRunning). The daemon lock file is never removed.
//
// Find takes the daemon lock for an instant to learn whether it is held.
// Take therefore retries a busy lock for a short while (300 ms) before it
// concludes that another daemon holds it.
package discovery
