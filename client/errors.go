package client

import (
	"errors"
	"fmt"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer/lock"
)

var (
	// ErrNoDaemon means no daemon serves the store and the route requires
	// one.
	ErrNoDaemon = errors.New("no daemon serves this store")
	// ErrExecNeedsDaemon means an exec job (queue.OpExec) met no daemon
	// to run it: exec jobs run only in the store's daemon, whose
	// configuration has the allowlist of commands, never directly. Start
	// the daemon, or open the client WithAutostart. It matches
	// ErrNoDaemon.
	ErrExecNeedsDaemon = fmt.Errorf("%w: exec jobs run in the daemon, which has the allowlist", ErrNoDaemon)
	// ErrBusy means a direct write found the store lock held. The error
	// is a *BusyError naming the holder. ErrBusy is lock.ErrLocked, so
	// it matches the store lock's busy errors from anywhere in scribe.
	ErrBusy = lock.ErrLocked
	// ErrQueueFull means the daemon's queue for the store is at its
	// limits; the job was not queued.
	ErrQueueFull = queue.ErrQueueFull
	// ErrRejected matches a job's rejection (a *queue.RejectError).
	ErrRejected = queue.ErrRejected
	// ErrUnavailable means a daemon holds the store but does not answer,
	// or none runs while jobs may still wait in its queue (ErrStranded).
	ErrUnavailable = errors.New("the store's daemon does not answer")
	// ErrStranded means no daemon serves the store while jobs may still
	// wait in its queue (a daemon stopped or died with jobs queued): the
	// prefer route does not write directly past them, which would overtake
	// (or race) them. Start the daemon to apply them, or use RouteDirect
	// to go past them. It matches ErrUnavailable too.
	ErrStranded error = strandedError{}
	// ErrOtherLockFile means a direct write was given a store lock file
	// (WithLockFile) other than the one the store's live daemon takes: it
	// would not exclude the daemon, so the client refuses to write. Give
	// the daemon's lock file, or none to take it by itself.
	ErrOtherLockFile = discovery.ErrOtherLockFile
	// ErrUnverified means the server at the discovery file's address did
	// not prove it is the daemon the file names (no TLS, or not the pinned
	// certificate): the client sent it nothing. Open fails with it wrapped
	// in ErrUnavailable once the connect timeout runs out.
	ErrUnverified = queue.ErrUnverified
	// ErrTooLate means Cancel came too late: the job was decided, or the
	// writer has it in hand (applying it, running or deferring its
	// command). The error is a *TooLateError with the job's state.
	ErrTooLate = errors.New("too late to cancel")
	// ErrDaemonRefused means a daemon started on demand (WithAutostart)
	// exited at once without serving the store, as the next would: it
	// refused its settings (the store's config file has a problem), could
	// not start (a port in use, a metrics address it cannot bind, a full
	// disk), or died as it started. The error is a *DaemonRefusedError, which quotes what the
	// daemon wrote to its log. With RoutePrefer, Open then writes directly,
	// and FellBack says why.
	ErrDaemonRefused = errors.New("the daemon started on demand could not start")
	// ErrUnknownJob means Cancel found no such job: no outcome is
	// recorded for the ID and it is not in the queue (never queued, or
	// its outcome was pruned).
	ErrUnknownJob = errors.New("no such job")
)

// TooLateError reports that a job could no longer be cancelled, and why.
// errors.Is(err, ErrTooLate) is true for it.
type TooLateError struct {
	// ID is the job's ID.
	ID string
	// State is where the job stands: applied, rejected or in_hand.
	State queue.JobState
	// Outcome is the job's recorded outcome; nil while it is in hand.
	Outcome *queue.Outcome
	// Detail says more, for people.
	Detail string
}

func (e *TooLateError) Error() string {
	if e.Outcome != nil {
		return fmt.Sprintf("too late to cancel job %s: it was already %s", e.ID, describeOutcome(e.Outcome))
	}
	return fmt.Sprintf("too late to cancel job %s: %s", e.ID, e.Detail)
}

// Is makes errors.Is(err, ErrTooLate) true.
func (e *TooLateError) Is(target error) bool { return target == ErrTooLate }

func describeOutcome(o *queue.Outcome) string {
	if o.Applied() {
		return "applied"
	}
	return fmt.Sprintf("rejected (%s)", o.Reason)
}

// BusyError reports that a direct write found the store lock held, and
// who holds it. errors.Is(err, ErrBusy) is true for it; errors.As gives
// the holder without importing writer.
type BusyError struct {
	// Lock is the lock file.
	Lock string
	// Holder is the identity the holder wrote into the lock file (pid,
	// host, mode, command, since, epoch), or nil if it wrote none (a
	// program that is not scribe, or a holder that has not written it
	// yet).
	Holder *queue.Holder

	err error // the *lock.LockedError this reports, with its context
}

func (e *BusyError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	if e.Holder == nil {
		return fmt.Sprintf("store is busy: lock %s is held by an unknown process", e.Lock)
	}
	// The command comes from the lock file, which any program may write:
	// quoted and cut, it cannot forge lines of output.
	return fmt.Sprintf("store is busy: lock %s is held by %s", e.Lock, lock.DescribeHolder(e.Holder))
}

// Unwrap returns the store lock's own error.
func (e *BusyError) Unwrap() error { return e.err }

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// busyError turns the store lock's busy error in err into a *BusyError,
// and returns any other error as it is.
func busyError(err error) error {
	var le *lock.LockedError
	if !errors.As(err, &le) {
		return err
	}
	return &BusyError{Lock: le.Path, Holder: le.Holder, err: err}
}

// strandedError is ErrStranded: it matches ErrUnavailable without saying
// that a daemon does not answer, since none runs.
type strandedError struct{}

func (strandedError) Error() string {
	return "no daemon serves the store, but jobs may still be queued"
}

func (strandedError) Is(target error) bool { return target == ErrUnavailable }

// DaemonRefusedError is a daemon started on demand that exited at once
// (ErrDaemonRefused): its exit code, and what it wrote to the daemon log.
type DaemonRefusedError struct {
	// Code is the daemon's exit code: 2 for settings it refused, 1 for a
	// start that failed, -1 for a death by signal.
	Code int
	// Said is what it wrote to its log, in one line, and the log's path.
	Said string
}

func (e *DaemonRefusedError) Error() string {
	what := fmt.Sprintf("could not start (exit %d)", e.Code)
	switch e.Code {
	case exitUsage:
		what = "refused its settings (exit 2)"
	case -1:
		what = "died of a signal as it started"
	}
	return fmt.Sprintf("the daemon started on demand %s: %s", what, e.Said)
}

// Is makes errors.Is(err, ErrDaemonRefused) true.
func (e *DaemonRefusedError) Is(target error) bool { return target == ErrDaemonRefused }

// The codes `scribe serve` exits with when its settings (its flags, its
// environment, the store's config file) have a problem, and when another
// daemon serves the store.
const (
	exitUsage = 2
	exitBusy  = 75
)
