package daemon

import (
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
)

// Observer is told what a Writer does, for metrics (WriterConfig.Observer).
// A Daemon feeds Prometheus's metrics with it (Config.Metrics,
// NewPrometheus).
//
// The writer calls it from its own goroutine, between the steps of a
// batch: each method must return at once, and must be safe to call while
// other goroutines (a metrics scrape) read what it records. Embed
// NopObserver to implement only some methods, and to keep compiling when
// methods are added.
type Observer interface {
	// BatchApplied says that a batch of size file jobs was applied and
	// its outcomes recorded: took is how long writer.Session.Apply took, files
	// and journal fsynced. Duplicates and rejections count in size; exec
	// jobs, which run alone, are not batches (ExecRan).
	BatchApplied(size int, took time.Duration)
	// Outcome says that a job's outcome was decided and is being
	// published: applied, or rejected with o.Reason. dup means the job
	// ID already had this outcome (a redelivery or a retried submit), so
	// nothing was decided now. submitted is the job's
	// queue.Job.Submitted, zero when the client set none or the job
	// could not be decoded.
	Outcome(o *queue.Outcome, submitted time.Time, dup bool)
	// LockWaited says how long the writer waited for the store lock
	// before it could apply the batch in hand: 0 or nearly when the store
	// was free, longer while a direct writer or another tool held it.
	LockWaited(d time.Duration)
	// LockHeld says how long a hold of the store lock lasted, when the
	// writer lets it go (idle, handing the store to a direct writer, a
	// deferred exec job, shutdown).
	LockHeld(d time.Duration)
	// Deferred says that an exec job of command was deferred: its lock
	// was held, or it exited with one of its busy exit codes.
	Deferred(command string)
	// ExecRan says that an exec job's command ran and how it ended
	// (exec.OK, exec.Failed, exec.Killed, exec.TimedOut, exec.Busy,
	// exec.StartFailed, exec.Stopped), and for how long.
	ExecRan(command, result string, took time.Duration)
}

// NopObserver observes nothing. It is the Observer of a Writer whose
// WriterConfig has none; embed it to implement part of Observer.
type NopObserver struct{}

// BatchApplied does nothing.
func (NopObserver) BatchApplied(int, time.Duration) {}

// Outcome does nothing.
func (NopObserver) Outcome(*queue.Outcome, time.Time, bool) {}

// LockWaited does nothing.
func (NopObserver) LockWaited(time.Duration) {}

// LockHeld does nothing.
func (NopObserver) LockHeld(time.Duration) {}

// Deferred does nothing.
func (NopObserver) Deferred(string) {}

// ExecRan does nothing.
func (NopObserver) ExecRan(string, string, time.Duration) {}

// observeState is what the writer keeps to observe holds. Only run's
// goroutine touches it, as it does the session.
type observeState struct {
	// heldSince is when the current hold of the store began; zero while
	// the writer does not hold it.
	heldSince time.Time
	// keep says that the session is being let go while the store lock
	// stays held (runHeld's nested hold): not the end of a hold.
	keep bool
}

// observer is the configured Observer, or NopObserver.
func (w *Writer) observer() Observer {
	if w.cfg.Observer == nil {
		return NopObserver{}
	}
	return w.cfg.Observer
}

// observeAcquired is called when acquire has opened a session after
// waiting since start. Re-opening the session under a hold that never
// ended (after an exec run) is no new hold.
func (w *Writer) observeAcquired(start time.Time) {
	if !w.obs.heldSince.IsZero() {
		return
	}
	now := time.Now()
	w.obs.heldSince = now
	w.observer().LockWaited(now.Sub(start))
}

// observeReleased is called when release closes the session.
func (w *Writer) observeReleased() {
	if w.obs.keep || w.obs.heldSince.IsZero() {
		return
	}
	w.observer().LockHeld(time.Since(w.obs.heldSince))
	w.obs.heldSince = time.Time{}
}

// releaseKeeping closes the session while the caller keeps the store
// lock through a hold of its own: the hold goes on.
func (w *Writer) releaseKeeping() {
	w.obs.keep = true
	defer func() { w.obs.keep = false }()
	w.release()
}

// observeOutcome tells the observer, and the debug log, of a job's
// outcome as answer publishes it.
func (w *Writer) observeOutcome(e writer.Entry, r writer.Result) {
	o := r.Outcome
	if o == nil {
		return
	}
	var submitted time.Time
	if e.Job != nil {
		submitted = e.Job.Submitted
	}
	w.observer().Outcome(o, submitted, r.Duplicate)
	w.log.Debug("job outcome", "id", o.ID, "status", o.Status, "reason", o.Reason, "seq", e.Seq, "duplicate", r.Duplicate)
}
