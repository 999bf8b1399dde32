package queue

import "time"

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
