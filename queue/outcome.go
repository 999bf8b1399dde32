package queue

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Status is whether a job took effect: an outcome's "status" field. Statuses
// are part of the wire format.
type Status string

// Outcome statuses.
const (
	StatusApplied  Status = "applied"
	StatusRejected Status = "rejected"
)

// Reason is why a job was rejected. Reasons are part of the wire format.
type Reason string

// Reason codes.
const (
	ReasonBadInput           Reason = "bad_input"           // malformed job or op
	ReasonBadVersion         Reason = "bad_version"         // unknown wire-format version
	ReasonUnknownOp          Reason = "unknown_op"          // op kind not known
	ReasonPathEscapes        Reason = "path_escapes"        // path leaves the store or names .scribe/
	ReasonNotRegular         Reason = "not_regular"         // target is a folder, device, FIFO…
	ReasonNotPermitted       Reason = "not_permitted"       // the writer may not write the target
	ReasonPreconditionFailed Reason = "precondition_failed" // if_match did not hold
	ReasonInvalidJSON        Reason = "invalid_json"        // merge target or patch is not a JSON object
	ReasonTooLarge           Reason = "too_large"           // job, op count or resulting file over a limit
	ReasonWrongStore         Reason = "wrong_store"         // job names another store
	ReasonInternal           Reason = "internal_error"      // the applier failed on this job (a bug)
	ReasonIDConflict         Reason = "id_conflict"         // the ID was already used by a different job
	ReasonAbandoned          Reason = "abandoned"           // an operator gave up an interrupted batch (scribe recover --abandon)
	ReasonNotAllowed         Reason = "not_allowed"         // exec: command not on the allowlist, or arguments it does not allow
	ReasonExecFailed         Reason = "exec_failed"         // exec: the command exited non-zero, died of a signal, or could not start
	ReasonTimeout            Reason = "timeout"             // exec: the command overran its timeout and was killed with its process group
	ReasonInterrupted        Reason = "interrupted"         // exec: the writer died while the command ran, and it is not safe to run again
	ReasonCancelled          Reason = "cancelled"           // a caller cancelled the job while it was queued (scribe cancel); it was never applied
)

// Outcome is the recorded, final result of a job. Once recorded in a store's
// journal it never changes.
type Outcome struct {
	// V is the wire-format version.
	V int `json:"v"`
	// ID is the job ID.
	ID string `json:"id"`
	// Status is StatusApplied or StatusRejected.
	Status Status `json:"status"`
	// Reason and Detail say why a job was rejected.
	Reason Reason `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Epoch is the store-lock epoch (fencing token) under which the job was
	// decided.
	Epoch uint64 `json:"epoch"`
	// Seq is the queue's stream sequence of the job, 0 for direct writes.
	Seq uint64 `json:"seq,omitempty"`
	// Mode is ModeDaemon or ModeDirect: who applied the job.
	Mode Mode `json:"mode"`
	// At is when the outcome was recorded.
	At time.Time `json:"at"`
	// Meta is the job's caller metadata.
	Meta map[string]string `json:"meta,omitempty"`
	// MetaCut is how many entries of the job's Meta were left out, the
	// largest first, for the outcome to fit MaxOutcomeBytes (see Fit);
	// a value cut from its middle to fit says so where the cut is.
	MetaCut int `json:"meta_cut,omitempty"`
	// Digest is the Digest of the job this outcome belongs to. A caller
	// whose job has the same ID but another digest was not this job: its
	// submission is an ID conflict. Empty in outcomes recorded before
	// digests were kept, and for jobs that could not be decoded.
	Digest string `json:"digest,omitempty"`
	// Exec is the run of an exec job's command: its exit status and
	// bounded output. Nil for file jobs, and for exec jobs rejected before
	// their command ran.
	Exec *ExecResult `json:"exec,omitempty"`
	// CoalescedInto is the ID of the job whose run this job joined (see
	// Job.Coalesce): this job did not run on its own, and its outcome is
	// that run's.
	CoalescedInto string `json:"coalesced_into,omitempty"`
}

// ExecResult is what an exec job's command did.
type ExecResult struct {
	// Command is the command's name on the allowlist.
	Command string `json:"command"`
	// ExitCode is the command's exit status, or -1 if it died of a signal
	// (Signal) or never started.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that ended the command, if one did.
	Signal string `json:"signal,omitempty"`
	// Stdout and Stderr are the command's output, at most the allowlist's
	// output cap each: its start and its end, with the middle cut when it
	// wrote more (StdoutCut, StderrCut bytes). Each run of bytes that are
	// not UTF-8 is replaced with one U+FFFD. An outcome whose encoding would be over
	// MaxOutcomeBytes (control bytes take six each) has more cut from the
	// middle, a line "[... N bytes cut to fit the outcome ...]" standing
	// where the cut is and the bytes counted in StdoutCut and StderrCut.
	Stdout    string `json:"stdout,omitempty"`
	Stderr    string `json:"stderr,omitempty"`
	StdoutCut int64  `json:"stdout_cut,omitempty"`
	StderrCut int64  `json:"stderr_cut,omitempty"`
	// Started is when the command started; DurationMS how long it ran.
	Started    time.Time `json:"started"`
	DurationMS int64     `json:"duration_ms"`
}

// Conflict returns the rejection a caller gets when its job, of digest
// digest, reused the ID of the different job this outcome records, or nil
// if the outcome is its own (or predates digests).
func (o *Outcome) Conflict(digest string) *RejectError {
	if o.Digest == "" || digest == "" || o.Digest == digest {
		return nil
	}
	return Reject(ReasonIDConflict, "job id %s was already used by a different job (recorded %s, status %s); give this job a new ID", o.ID, o.At.Format(time.RFC3339), o.Status)
}

// Applied reports whether the job's ops took effect.
func (o *Outcome) Applied() bool { return o.Status == StatusApplied }

// Err returns nil for an applied job and a *RejectError for a rejected one.
func (o *Outcome) Err() error {
	if o.Applied() {
		return nil
	}
	return &RejectError{Reason: o.Reason, Detail: o.Detail}
}

// EncodeOutcome returns the outcome's wire form, of the current Version.
// It does not change o, which others may be reading.
func EncodeOutcome(o *Outcome) ([]byte, error) {
	c := *o
	c.V = Version
	return c.appendJSON(make([]byte, 0, 256))
}

// DecodeOutcome parses an outcome's wire form.
func DecodeOutcome(b []byte) (*Outcome, error) {
	o, ok := decodeOutcomeFast(b)
	if !ok {
		o = new(Outcome)
		if err := json.Unmarshal(b, o); err != nil {
			return nil, fmt.Errorf("decode outcome: %w", err)
		}
	}
	if o.V != Version {
		return nil, fmt.Errorf("decode outcome: version %d, want %d", o.V, Version)
	}
	return o, nil
}

// RejectError is a job's rejection: a reason code and a human-readable
// detail. errors.Is(err, ErrRejected) holds for every RejectError.
type RejectError struct {
	Reason Reason
	Detail string
}

// Reject builds a *RejectError with a formatted detail.
func Reject(r Reason, format string, args ...any) *RejectError {
	return &RejectError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

func (e *RejectError) Error() string { return fmt.Sprintf("rejected (%s): %s", e.Reason, e.Detail) }

// Is makes errors.Is(err, ErrRejected) true.
func (e *RejectError) Is(target error) bool { return target == ErrRejected }

// ContentHash returns the if_match form of a content hash: "sha256:<hex>".
func ContentHash(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func validHash(s string) bool {
	const prefix = "sha256:"
	if len(s) != len(prefix)+64 || s[:len(prefix)] != prefix {
		return false
	}
	for _, c := range s[len(prefix):] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false // ContentHash is lower case; anything else could never match
		}
	}
	return true
}
