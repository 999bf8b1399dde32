package writer

import "github.com/scribehq/scribe/writer/internal/fault"

// PausePoint stands still at step for as long as SCRIBE_PAUSE_AT says,
// in a binary built with -tags scribefault, so that a test can hit a
// window between two steps of scribe's processes; in a normal build it
// does nothing.
func PausePoint(step string) { fault.Pause(step) }
