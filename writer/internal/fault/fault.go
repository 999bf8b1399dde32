//go:build scribefault

package fault

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The fault-injection hooks of the crash tests, compiled in only with
// -tags scribefault: the normal build (nofault.go) ignores these variables,
// so a stray one cannot kill a user's hook or daemon.
//
// envCrashAt: SCRIBE_CRASH_AT=<step>[:<n>] makes the process kill itself
// with SIGKILL the n-th time (default 1st) it reaches that step of the
// batch pipeline. The steps, in order (docs/recovery.md): fetched, staged,
// intent, file (after each file written), files, commit, ack (after the
// first ack), acked, published; for exec jobs, ran (after the command,
// before its outcome is recorded). Unset, it costs one comparison per
// step.
const envCrashAt = "SCRIBE_CRASH_AT"

// envPanicOn makes the applier panic on an op whose path is its value, to
// test that a panicking job is isolated; envCrashOn makes it kill the
// process instead, to test that such poison is bounded.
const (
	envPanicOn = "SCRIBE_PANIC_ON"
	envCrashOn = "SCRIBE_CRASH_ON"
)

// envPauseAt: SCRIBE_PAUSE_AT=<step>:<duration>[,<step>:<duration>…]
// makes the process stand still that long each time it reaches one of
// those steps (Pause), so that a test can hit a window that is
// otherwise microseconds wide. The steps: dialled (a client has
// connected to the daemon it discovered, before it sends anything),
// withdrawn (serve, idle, has withdrawn its discovery files, before it
// refuses submitters and looks at its queues again), unserved (serve
// has stopped its writers on its way out, their status services with
// them, before it cuts its clients off), stopped (serve has
// stopped its writers on its way out; its queue's server still runs),
// journal (a holder taking a store has opened its journal, before its
// session is ready), sweep (a starting writer, before it sweeps its queue
// for jobs decided before the start).
const envPauseAt = "SCRIBE_PAUSE_AT"

var (
	pauses            = parsePauseAt(os.Getenv(envPauseAt))
	crashStep, crashN = parseCrashAt(os.Getenv(envCrashAt))
	crashCount        atomic.Int64
	panicOn           = os.Getenv(envPanicOn)
	crashOn           = os.Getenv(envCrashOn)
)

func parseCrashAt(s string) (string, int64) {
	step, n, _ := strings.Cut(s, ":")
	count, err := strconv.ParseInt(n, 10, 64)
	if err != nil || count < 1 {
		count = 1
	}
	return step, count
}

func parsePauseAt(s string) map[string]time.Duration {
	m := map[string]time.Duration{}
	for _, p := range strings.Split(s, ",") {
		step, d, _ := strings.Cut(p, ":")
		if dur, err := time.ParseDuration(d); err == nil && dur > 0 {
			m[step] = dur
		}
	}
	return m
}

// Pause stands still at step for as long as SCRIBE_PAUSE_AT says.
func Pause(step string) {
	if d := pauses[step]; d > 0 {
		time.Sleep(d)
	}
}

// Op runs the op-level fault hooks on an op of path.
func Op(path string) {
	switch {
	case panicOn != "" && path == panicOn:
		panic(envPanicOn + ": " + path)
	case crashOn != "" && path == crashOn:
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// Crash dies hard at the configured step, as SIGKILL would at that
// instant: no deferred function runs, nothing is flushed.
func Crash(step string) {
	if crashStep != step || crashCount.Add(1) != crashN {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
