package queue

import (
	"fmt"
	"time"
)

// Lookup is the status service's answer about one job ID.
type Lookup struct {
	// Found reports that the journal has the job's outcome.
	Found bool `json:"found"`
	// Outcome is the recorded outcome when Found.
	Outcome *Outcome `json:"outcome,omitempty"`
	// PrunedBefore, when not found, is the journal's prune cutoff: an
	// outcome recorded before it may have existed and been removed.
	PrunedBefore time.Time `json:"pruned_before,omitzero"`
	// Error is set when the journal could not be read (for example while a
	// direct writer holds the store).
	Error string `json:"error,omitempty"`
	// State is where the job stands. An answer to a LocateRequest always
	// has it; a plain look-up only when Found (applied or rejected), since
	// telling queued from unknown means reading the queue.
	State JobState `json:"state,omitempty"`
	// Position is the job's place in the queue (1: the next to be
	// applied) when it is queued or in hand, of Queued jobs in all:
	// "position Position of Queued".
	Position uint64 `json:"position,omitempty"`
	Queued   uint64 `json:"queued,omitempty"`
	// Detail says more about State: why a queued job waits (the writer
	// has it in hand but waits for the store lock), what the writer does
	// with a job in hand (applying it, running its command, deferring
	// it), or, for an unknown job, how much of the queue was searched.
	Detail string `json:"detail,omitempty"`
}

// JobState is where a job stands, as a look-up finds it.
type JobState string

// Job states. applied and rejected are final; the others are not.
const (
	StateApplied  JobState = "applied"  // its outcome is recorded: applied
	StateRejected JobState = "rejected" // its outcome is recorded: rejected
	StateQueued   JobState = "queued"   // it waits in the queue
	StateInHand   JobState = "in_hand"  // the writer is applying it, running its command, or has deferred it
	StateUnknown  JobState = "unknown"  // no outcome, and not found in the queue: never queued, not queued yet, or pruned
)

// Final reports whether s is a recorded outcome's state.
func (s JobState) Final() bool { return s == StateApplied || s == StateRejected }

// StateOf is the state a recorded outcome gives its job.
func StateOf(o *Outcome) JobState {
	if o.Applied() {
		return StateApplied
	}
	return StateRejected
}

// JobState is l.State or, in an answer without one (a plain look-up, or
// an older daemon's), what Found tells: the outcome's state, else
// StateUnknown.
func (l *Lookup) JobState() JobState {
	switch {
	case l.State != "":
		return l.State
	case l.Found && l.Outcome != nil:
		return StateOf(l.Outcome)
	}
	return StateUnknown
}

// LocateRequest prefixes the status request body "!locate ID", which asks
// for the look-up of job ID with the job searched for in the queue too:
// its answer tells queued (with its position) and in hand from unknown.
// Searching reads the queue from its oldest job, at most LocateScanLimit
// jobs, so a plain look-up (the ID alone), which reads only the journal,
// is what a client that only waits for an outcome should ask.
const LocateRequest = "!locate "

// LocateScanLimit bounds the queued jobs one locate or jobs request reads
// (the daemon also gives up after about a second): a job further back is
// answered StateUnknown, its Detail saying how far the search went.
const LocateScanLimit = 10_000

// JobsRequest is the status request body "!jobs", optionally followed by
// a space and a JobsQuery in JSON, which asks for a JobList.
const JobsRequest = "!jobs"

// Jobs listing limits.
const (
	DefaultJobsLimit = 50
	MaxJobsLimit     = LocateScanLimit
)

// JobsQuery selects what a JobList holds.
type JobsQuery struct {
	// State is StateApplied or StateRejected (outcomes of that status
	// only, no queued jobs), StateQueued (queued jobs only, those in
	// hand included), or empty (both).
	State JobState `json:"state,omitempty"`
	// Since keeps the outcomes recorded at or after it (zero: all).
	Since time.Time `json:"since,omitzero"`
	// Limit is the most outcomes, and the most queued jobs, listed;
	// 0 means DefaultJobsLimit, and it is at most MaxJobsLimit.
	Limit int `json:"limit,omitempty"`
}

// Normalize checks q and bounds its limit.
func (q *JobsQuery) Normalize() error {
	switch q.State {
	case "", StateApplied, StateRejected, StateQueued:
	default:
		return fmt.Errorf("state %q: want applied, rejected or queued", q.State)
	}
	if q.Limit < 0 {
		return fmt.Errorf("limit %d: want 0 or more", q.Limit)
	}
	if q.Limit == 0 {
		q.Limit = DefaultJobsLimit
	}
	q.Limit = min(q.Limit, MaxJobsLimit)
	return nil
}

// QueuedJob is a job of the queue, as a JobList lists it.
type QueuedJob struct {
	ID string `json:"id"`
	// Seq is the job's stream sequence.
	Seq uint64 `json:"seq"`
	// Position is its place in the queue, 1 for the next to be applied.
	Position uint64 `json:"position"`
	// State is StateQueued or StateInHand, Detail as in Lookup.
	State  JobState `json:"state"`
	Detail string   `json:"detail,omitempty"`
	// Submitted is when the client built the job, if it said.
	Submitted time.Time `json:"submitted,omitzero"`
	// Ops are the kinds of the job's ops (for an exec job: "exec NAME").
	Ops []string `json:"ops"`
	// Priority is PriorityHigh for a high job, absent for a normal one.
	Priority Priority `json:"priority,omitempty"`
}

// JobList is the status service's answer to a JobsRequest: recorded
// outcomes, newest first, and the queued jobs, oldest (next) first.
type JobList struct {
	Outcomes []*Outcome  `json:"outcomes"`
	Queued   []QueuedJob `json:"queued"`
	// QueuedTotal is how many jobs are queued in all, Queued listing the
	// first of them.
	QueuedTotal uint64 `json:"queued_total"`
	// OutcomesCut is how many of the outcomes asked for, the oldest, were
	// left out for the answer to fit one message (see Fit).
	OutcomesCut int `json:"outcomes_cut,omitempty"`
	// Error is set when the journal or the queue could not be read.
	Error string `json:"error,omitempty"`
}

// JournalInfo describes a store's journal, for status reports.
type JournalInfo struct {
	Path     string `json:"path"`
	Bytes    int64  `json:"bytes"`    // the file's size
	Outcomes int    `json:"outcomes"` // outcomes it keeps
	Applied  uint64 `json:"applied"`  // of them, applied
	Rejected uint64 `json:"rejected"` // of them, rejected
	Epoch    uint64 `json:"epoch"`    // the latest epoch
	LastSeq  uint64 `json:"last_seq"` // the last queue sequence applied
	// Error is set when the journal could not be read; the numbers are
	// then zero.
	Error string `json:"error,omitempty"`
}

// Interrupted describes the batch a holder was interrupted in, if any:
// how many jobs and files it has and, if carrying it out failed since,
// why.
type Interrupted struct {
	Jobs  int    `json:"jobs"`
	Files int    `json:"files"`
	Stuck string `json:"stuck,omitempty"`
}

// Mode is how a store lock is held, and so who applied a job: by the daemon's
// writer or by a direct writer. It is recorded in the lock file's identity
// and in outcomes, and is part of the wire format.
type Mode string

// Lock modes.
const (
	ModeDaemon Mode = "daemon" // the daemon's writer, applying queued jobs
	ModeDirect Mode = "direct" // a direct writer (fail-fast, or scribe lock)
)

// Holder is who holds a store lock, as written into the lock file after
// acquiring. It is informational: only the kernel's flock decides.
type Holder struct {
	PID     int       `json:"pid"`
	Host    string    `json:"host"`
	Mode    Mode      `json:"mode"` // ModeDaemon or ModeDirect
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
	Epoch   uint64    `json:"epoch,omitempty"`
	// Token names this hold of the lock (random, new for each
	// acquisition). A child handed the hold joins it only while the lock
	// file still names it; its holder withdraws it before letting go.
	Token string `json:"token,omitempty"`
	// Start is when the process PID started, in clock ticks after boot
	// (Linux, /proc/PID/stat field 22; 0 where unknown): a later process
	// given the same pid is not the holder.
	Start uint64 `json:"start,omitempty"`
}

// StatusReport is the daemon's answer to an empty status request.
type StatusReport struct {
	V        int       `json:"v"`
	Store    string    `json:"store"`
	StoreID  string    `json:"store_id"`
	PID      int       `json:"pid"`
	Version  string    `json:"version"`
	Started  time.Time `json:"started"`
	Queued   uint64    `json:"queued"`             // jobs waiting in the stream
	Applied  uint64    `json:"applied"`            // jobs applied since start
	Rejected uint64    `json:"rejected"`           // jobs rejected since start
	Holding  bool      `json:"holding"`            // the writer holds the store lock now
	Epoch    uint64    `json:"epoch"`              // epoch of the writer's current or last hold
	Holder   *Holder   `json:"holder,omitempty"`   // who holds the store lock, if anyone
	Waiting  string    `json:"waiting,omitempty"`  // why the writer is waiting, if it is
	Fault    string    `json:"fault,omitempty"`    // the I/O fault the writer is retrying on, if any
	Running  string    `json:"running,omitempty"`  // the exec job whose command runs now, if any
	Deferred string    `json:"deferred,omitempty"` // why the next job is deferred (exec: its lock is held, or it exited busy), if it is
	Dead     uint64    `json:"dead_letters"`       // dead letters kept in the journal
	// InFlight is how many jobs the writer has in hand: the batch it
	// applies or waits to apply, or the exec run with the jobs that
	// joined it.
	InFlight int `json:"in_flight"`
	// LockFile is the store lock file the daemon takes.
	LockFile string `json:"lock_file,omitempty"`
	// Journal describes the store's journal; Interrupted is the batch a
	// holder was interrupted in, still to be finished, if any.
	Journal     *JournalInfo `json:"journal,omitempty"`
	Interrupted *Interrupted `json:"interrupted,omitempty"`
}

// DeadLetter is a message that reached a store's queue but carried no
// readable job ID, so no outcome could be recorded for anyone to find: it
// is acked (it never blocks the queue) and kept here for inspection.
type DeadLetter struct {
	Seq    uint64    `json:"seq"`
	At     time.Time `json:"at"`
	Reason Reason    `json:"reason"`
	Detail string    `json:"detail"`
	// Data is the start of the message (at most DeadLetterBytes).
	Data []byte `json:"data"`
}

// DeadLetters is the status service's answer to DeadLettersRequest.
type DeadLetters struct {
	Total   int          `json:"total"`   // how many the journal keeps
	Letters []DeadLetter `json:"letters"` // the most recent, newest first
	Error   string       `json:"error,omitempty"`
}

// DeadLetterBytes is how much of a dead letter's message is kept.
const DeadLetterBytes = 4096

// DeadLettersRequest is the status request body that asks for the most
// recent dead letters instead of a job ID (which can never start with !).
const DeadLettersRequest = "!dead"
