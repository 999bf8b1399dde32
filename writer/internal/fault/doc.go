// Package fault holds scribe's fault-injection hooks, for the crash and
// race tests: dying at a step of the batch pipeline (Crash), panicking or
// dying on an op (Op), standing still at a step (Pause), all read from
// the environment (SCRIBE_CRASH_AT, SCRIBE_PANIC_ON, SCRIBE_CRASH_ON,
// SCRIBE_PAUSE_AT) only in binaries built with -tags scribefault, and
// failing the spools of commands' output (SpoolFault) for the tests of
// package writer and below.
//
// # Caveats
//
// A normal build ignores those variables: the hooks compile to nothing,
// so a stray one cannot kill a user's hook or daemon. SpoolFault is nil
// in every binary but a test's.
package fault

// SpoolFault, if set, is called before the file a command's output goes
// to is made, and an error it returns fails that, as a daemon out of
// descriptors would see. Tests set it before they start a writer and
// reset it once it is closed; nil otherwise.
var SpoolFault func() error
