// Package tests holds scribe's black-box tests: they build the scribe
// binary once (TestMain) and run real daemons, submitters and lock holders
// against each other, as users do, then check the store, the journal and
// the outcomes.
//
// In the layout (cmd → client, writer, embednats → queue) it stands
// outside: it drives the binary through processes, and imports client,
// writer and queue only to act as a library user or to inspect what the
// processes wrote. Nothing imports it.
//
// What they cover: the queued and direct paths, the lock contract and its
// children (lock*_test.go), crashes at every step of the batch pipeline
// and at random instants (crash_test.go, faults_test.go), hostile jobs and
// paths, impostor servers and permissions (hostile_test.go,
// impostor_test.go, security_test.go), full and read-only disks, moved
// stores, and the benchmark against plain locking (bench_test.go).
//
// # Caveats
//
// The crash tests rely on scribe's fault-injection hooks (SCRIBE_CRASH_AT,
// SCRIBE_PANIC_ON, SCRIBE_CRASH_ON), which exist only in a binary built
// with -tags scribefault. Tests that mount a tmpfs or change owners need
// root and skip themselves otherwise. SCRIBE_CRASH_ROUNDS sets how many
// random kills TestSIGKILLRestart makes (default 5).
package tests
