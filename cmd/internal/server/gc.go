package server

import (
	"os"
	"runtime/debug"
)

// The daemon's garbage collector, unless GOGC or GOMEMLIMIT set it: a
// collection once the heap has grown to five times what survived the
// last (Go's default is twice), and no growth on that account past 256
// MiB. A daemon's live heap is tens of MiB, and most of what it
// allocates dies within its batch: each journal commit copies the B+tree
// nodes it touches, a job is decoded and its outcome encoded. Collection
// was a tenth of the daemon's CPU; collecting less often saves it 7% per
// job at 1 and at 32 producers, and the daemon of the bench's appends
// grows from 50 MiB resident to 80. The limit keeps a heap that big jobs
// grow below where Go's default would have it.
const (
	daemonGCPercent   = 400
	daemonMemoryLimit = 256 << 20
)

// tuneGC sets the daemon's garbage collector, leaving what the
// environment sets alone.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(daemonGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(daemonMemoryLimit)
	}
}
