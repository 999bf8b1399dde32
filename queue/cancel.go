package queue

import "fmt"

// CancelRequest is the body of a request on CancelSubject: cancel the job
// ID if it is still queued, not yet decided.
type CancelRequest struct {
	ID string `json:"id"`
	// TimeoutMS is how long, in milliseconds, the caller waits for the
	// answer (0: it does not say). A writer that comes to the request
	// only after that long since it arrived drops it, changing nothing:
	// a caller that gave up must not be cancelled behind its back.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// CancelResult is what a cancel request did.
type CancelResult string

// Cancel results.
const (
	// CancelDone: the job is cancelled. Its outcome, recorded before the
	// answer, is rejected with ReasonCancelled, and it is never applied.
	// Cancelling it again gives the same answer.
	CancelDone CancelResult = "cancelled"
	// CancelTooLate: the job was decided (its outcome is another), or the
	// writer has it in hand (applying it, running or deferring its
	// command): it can no longer be cancelled.
	CancelTooLate CancelResult = "too_late"
	// CancelUnknown: no outcome is recorded for the ID and it is not in
	// the queue: never queued, or its outcome was pruned.
	CancelUnknown CancelResult = "unknown"
	// CancelBusy: the writer could not record the cancellation now,
	// because another process holds the store; nothing was changed.
	// Try again.
	CancelBusy CancelResult = "busy"
)

// CancelAnswer is the daemon's answer to a CancelRequest.
type CancelAnswer struct {
	// Result is what the request did; empty with Error.
	Result CancelResult `json:"result,omitempty"`
	// State is where the job stands now (applied or rejected once
	// decided, in_hand, unknown).
	State JobState `json:"state,omitempty"`
	// Outcome is the job's recorded outcome: the cancellation, or the
	// outcome that made it too late.
	Outcome *Outcome `json:"outcome,omitempty"`
	// Detail says more, for people.
	Detail string `json:"detail,omitempty"`
	// Error is set for a request the daemon could not read (an invalid
	// job ID), or a journal it could not read or write.
	Error string `json:"error,omitempty"`
}

// DecidedCancelAnswer is the answer to a cancel request for a job whose
// outcome o is recorded: done if o is its cancellation, else too late.
func DecidedCancelAnswer(o *Outcome) CancelAnswer {
	if o.Status == StatusRejected && o.Reason == ReasonCancelled {
		return CancelAnswer{Result: CancelDone, State: StateRejected, Outcome: o}
	}
	return CancelAnswer{Result: CancelTooLate, State: StateOf(o), Outcome: o,
		Detail: fmt.Sprintf("the job was already decided: %s", o.Status)}
}
