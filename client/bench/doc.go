// Package bench measures scribe against the locks it replaces, side by
// side, on the same workloads: `scribe bench` is Run of a Config, and
// the Report it returns is printed as a table (WriteTable), JSON or a
// chart (SVG).
//
// For each round, producer count and workload, every contender runs in
// turn, so that drift on a busy machine hits all alike, each on a fresh
// store: scribe through a real `scribe serve` process with a client per
// producer (Apply, or Submit timed until the queue drains; the daemon's
// queue synced always, or every Relaxed), blocking flock, and fail-fast
// flock that retries FailFastRetries times with backoff and then gives
// the write up, as callers without scribe do. The contenders' producers
// (NewProducer) are the ones the Go benchmarks of the test suite run too.
// What each run left in its files is checked afterwards: lost and
// doubled writes are counted, never assumed. Each ratio to flock is
// paired within its round (the contender's figure over the flock run's
// next to it), and reported as the median over the rounds with the
// lowest and highest, so that a busy machine's drift between rounds
// cancels out and what is left of it shows.
//
// A hook is a process, so each round also times processes, exec to exit
// (Config.Submits, Config.Hooks): `scribe submit --wait` one after
// another through a warm daemon, and many of them at once, each against
// as many flock(1) writers running dd, which appends and fsyncs. The
// report's Targets sum up the headline figures of all of it.
//
// Alongside rates and latencies it reports what does not depend on the
// machine: syncs per job (the daemon's counted under strace, in an
// untimed extra run), CPU time per job (the producers' and the
// daemon's), bytes written per job (/proc/PID/io) and batch sizes (the
// daemon's metrics).
//
// # Caveats
//
// Figures are for people and scripts, never asserted: they depend on the
// machine, its load and its disk. A folder on tmpfs (Config.Dir) makes
// fsync free, and is warned about.
//
// The CPU and I/O counters read /proc, and producer processes
// (Config.Procs) are Config.Scribe re-run with ProducerEnv set, and with
// GOMAXPROCS=1 unless the environment sets it, as the lean scribe binary
// runs: Linux is where every figure is measured; elsewhere some read n/a.
package bench
