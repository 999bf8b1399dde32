package cli

import (
	"errors"
	"fmt"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// Exit codes: a contract with scripts (docs/cli.md).
const (
	ExitOK       = 0
	ExitRejected = 1 // the job was rejected, or the command failed
	ExitUsage    = 2
	ExitNoDaemon = 69 // EX_UNAVAILABLE: --route require and no daemon
	ExitBusy     = 75 // EX_TEMPFAIL: store lock held, queue full, or wait timed out
	// ExitInterrupted is a shell's code for SIGINT (128+2): submit --wait
	// interrupted, its job perhaps queued still.
	ExitInterrupted = 130
)

// ErrWaitTimeout means a --wait or --timeout ran out (exit 75).
var ErrWaitTimeout = errors.New("wait timed out")

// ExitError is an error with the exit code it ends the command with. A
// nil Err says nothing more: the command said what it had to (help asked
// for, or the code of a command scribe ran).
type ExitError struct {
	Code int
	Err  error
	// usage: Usagef made it, and the command line is what is wrong.
	usage bool
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

// Unwrap returns the error the code is for.
func (e *ExitError) Unwrap() error { return e.Err }

// Exit is an error that ends the command with code; err may be nil.
func Exit(code int, err error) error { return &ExitError{Code: code, Err: err} }

// Usagef is a usage error (exit 2): the command line is wrong.
func Usagef(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...), usage: true}
}

// ExitCode is the exit code err ends a command with.
func ExitCode(err error) int {
	var ex *ExitError
	var refused *client.DaemonRefusedError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ex):
		return ex.Code
	case errors.Is(err, queue.ErrInsecure):
		// Before the others: a .scribe another user could change fails
		// every command the same way, serve's, however it was reached
		// (an autostart, a fallback, a look-up); retrying changes nothing.
		return ExitRejected
	case errors.Is(err, client.ErrNoDaemon):
		return ExitNoDaemon
	case errors.As(err, &refused):
		if refused.Code == ExitUsage {
			return ExitUsage // its settings: retrying will not help
		}
		return ExitNoDaemon // none could be started: --route require
	case errors.Is(err, client.ErrOtherLockFile), errors.Is(err, lock.ErrNotLockFile):
		return ExitUsage // the flag (or its absence) is wrong; retrying will not help
	case errors.Is(err, client.ErrBusy), errors.Is(err, client.ErrQueueFull), errors.Is(err, ErrWaitTimeout),
		errors.Is(err, client.ErrUnavailable), errors.Is(err, discovery.ErrRunning), errors.Is(err, journal.ErrBusy):
		return ExitBusy
	}
	return ExitRejected // a rejection (queue.ErrRejected), or any other failure
}

// hintedError adds a second line to an error's message: what to do about
// it, in the command line's words (flags, commands), which the library's
// errors never use.
type hintedError struct {
	err  error
	hint string
}

func (e *hintedError) Error() string { return e.err.Error() }
func (e *hintedError) Unwrap() error { return e.err }

// WithHint wraps err with a hint line; an empty hint leaves err as it is.
func WithHint(err error, hint string) error {
	if err == nil || hint == "" {
		return err
	}
	return &hintedError{err: err, hint: hint}
}

// hints are the lines the command line adds under err's: the hint it was
// given (WithHint), and what to do about a batch that cannot be finished.
func hints(err error) []string {
	var hints []string
	if h := StuckHint(err); h != "" {
		hints = append(hints, h)
	}
	var h *hintedError
	if errors.As(err, &h) {
		hints = append(hints, h.hint)
	}
	return hints
}

// hint is the hint WithHint gave err, if any.
func hint(err error) string {
	var h *hintedError
	if errors.As(err, &h) {
		return h.hint
	}
	return ""
}

// StuckHint is what the command line adds to an error that says an
// interrupted batch cannot be finished ("" for any other error).
func StuckHint(err error) string {
	if !errors.Is(err, writer.ErrStuck) {
		return ""
	}
	return "the store takes no write until that batch is finished: fix what the error names and run `scribe recover --store DIR`, or give the batch up with `scribe recover --store DIR --abandon` (docs/recovery.md)"
}
