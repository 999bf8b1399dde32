//go:build !scribefault

package fault

// The normal build has no fault injection: these stubs read no
// environment and compile to nothing. The crash tests build with
// -tags scribefault to get the real hooks (fault.go).

// Op would run the op-level fault hooks.
func Op(string) {}

// Crash would die at a configured step of the batch pipeline.
func Crash(string) {}

// Pause would stand still at a step of the process, for the tests
// (SCRIBE_PAUSE_AT, fault.go); in the normal build it does nothing.
func Pause(string) {}
