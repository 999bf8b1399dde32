package client

import (
	"context"
	"errors"
	"io/fs"
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// StoreStatus is the status of a store, with or without a daemon, as
// `scribe status --json` prints it (docs/cli.md): every key is always
// present, null where it does not apply or is not known.
type StoreStatus struct {
	Store   string        `json:"store"`
	StoreID string        `json:"store_id"`
	Daemon  *DaemonStatus `json:"daemon"`
	Lock    LockStatus    `json:"lock"`
	// Queued, InFlight, Applied, Rejected and DeadLetters are the
	// daemon's (since it started, for Applied and Rejected). Without a
	// daemon, Applied and Rejected are the journal's: the outcomes it
	// keeps.
	Queued      *uint64 `json:"queued"`
	InFlight    *int    `json:"in_flight"`
	Applied     *uint64 `json:"applied"`
	Rejected    *uint64 `json:"rejected"`
	DeadLetters *uint64 `json:"dead_letters"`
	// LastError is what keeps the store from moving on now, if anything:
	// the fault the writer retries on, or why an interrupted batch is
	// stuck.
	LastError *string       `json:"last_error"`
	Waiting   *string       `json:"waiting"`
	Fault     *string       `json:"fault"`
	Running   *string       `json:"running"`
	Deferred  *string       `json:"deferred"`
	Journal   JournalStatus `json:"journal"`
	// Interrupted is a batch a holder was interrupted in and that the
	// next holder must finish first (with why it failed, if it did).
	Interrupted *queue.Interrupted `json:"interrupted"`
	// Stranded says why jobs may wait in a queue no daemon serves.
	Stranded *string `json:"stranded"`

	// Report is the daemon's own report, when one answered.
	Report *queue.StatusReport `json:"-"`
	// Holder is who holds the store lock, as its lock file names the
	// holder the kernel lists (nil when free, or held by a process that
	// wrote no identity), or as the daemon of a remote queue tells it.
	Holder *queue.Holder `json:"-"`
}

// DaemonStatus is the daemon serving the store.
type DaemonStatus struct {
	PID      int       `json:"pid"`
	Version  string    `json:"version"`
	Started  time.Time `json:"started"`
	UptimeMS int64     `json:"uptime_ms"`
	// Holding says the daemon's writer holds the store lock now; Epoch
	// is the epoch of its current or last hold.
	Holding bool   `json:"holding"`
	Epoch   uint64 `json:"epoch"`
}

// LockStatus is the store lock as the kernel tells it (lock.ProbeLock),
// or, for a remote queue, as its daemon does.
type LockStatus struct {
	Path  string `json:"path"`
	State string `json:"state"` // "free" or "held"
	// PID is the holder's pid: from the kernel's lock table, or from
	// the identity when the kernel does not list pids. Null when free,
	// or when held by a process the kernel does not name here.
	PID *int `json:"pid"`
	// Host, Mode, Command, Since and Epoch are the holder's identity
	// (the lock file's), null when the holder wrote none.
	Host    *string     `json:"host"`
	Mode    *queue.Mode `json:"mode"`
	Command *string     `json:"command"`
	Since   *time.Time  `json:"since"`
	Epoch   *uint64     `json:"epoch"`
}

// Lock states.
const (
	LockFree = "free"
	LockHeld = "held"
)

// JournalStatus is the store's journal.
type JournalStatus struct {
	Path     string  `json:"path"`
	Bytes    int64   `json:"bytes"`
	Outcomes int     `json:"outcomes"`
	Applied  uint64  `json:"applied"`
	Rejected uint64  `json:"rejected"`
	Epoch    uint64  `json:"epoch"`
	LastSeq  uint64  `json:"last_seq"`
	Error    *string `json:"error"` // why it could not be read now (the numbers are then 0)
}

// Report is the status of store, with or without a daemon: the daemon's
// report when one serves the store, else what the store's files tell (the
// journal, the stranded mark); and either way the store lock as the kernel
// tells it. It opens a client with opts (the prefer route unless they say
// otherwise; WithLockFile names a lock file other than the daemon's or the
// default) and closes it.
func Report(ctx context.Context, store string, opts ...Option) (*StoreStatus, error) {
	c, err := Open(ctx, store, opts...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.StoreStatus(ctx)
}

// StoreStatus is the status of the client's store (see Report). For a
// store whose queue is remote, the daemon's report is all there is: the
// store lock too is as that daemon tells it, not probed here (the store
// may be on another host).
func (c *Client) StoreStatus(ctx context.Context) (*StoreStatus, error) {
	st := &StoreStatus{Store: c.store, StoreID: c.storeID}
	if h, ok := c.r.(*held); ok {
		// Under a hold the daemon is looked for now: one that does not
		// answer is an error here too, not a store without a daemon.
		if _, err := h.lookups(ctx); err != nil {
			return nil, err
		}
	}
	lockFile := c.lockFile
	switch {
	case c.Queued() && c.Daemon() == nil: // a remote queue's daemon, wherever it runs
		r, err := c.Report(ctx)
		if err != nil {
			return nil, err
		}
		st.fromReport(r)
		st.Store = r.Store
		st.Lock = LockStatus{Path: r.LockFile, State: LockFree}
		if h := r.Holder; h != nil {
			st.Holder = h
			st.Lock = heldBy(r.LockFile, h)
		}
		st.stuck()
		return st, nil
	case c.Daemon() != nil:
		r, err := c.Report(ctx)
		switch {
		case errors.Is(err, ErrNoDaemon): // it went away meanwhile
			if err := st.fromFiles(c.store); err != nil {
				return nil, err
			}
		case err != nil:
			return nil, err
		default:
			st.fromReport(r)
			if lockFile == "" {
				lockFile = r.LockFile
			}
		}
	default:
		if err := st.fromFiles(c.store); err != nil {
			return nil, err
		}
	}
	st.stuck()
	if lockFile == "" {
		lockFile = c.configLockFile
	}
	if lockFile == "" {
		lockFile = queue.Layout{Root: c.store}.Lock()
	}
	st.Lock, st.Holder = probeLock(lockFile)
	return st, nil
}

// fromFiles fills in what the store's files tell without a daemon: the
// journal and the stranded mark.
func (st *StoreStatus) fromFiles(store string) error {
	if s, err := queue.ReadStranded(store); err != nil {
		st.Stranded = ptr(err.Error())
	} else if s != nil {
		st.Stranded = ptr(s.Why)
	}
	var err error
	if st.Journal, st.Interrupted, err = readJournal(journal.Path(store)); err != nil {
		return err
	}
	if st.Journal.Error == nil {
		st.Applied, st.Rejected = &st.Journal.Applied, &st.Journal.Rejected
	}
	return nil
}

// stuck makes an interrupted batch that cannot be finished the last
// error, unless the daemon reports another.
func (st *StoreStatus) stuck() {
	if st.Interrupted != nil && st.Interrupted.Stuck != "" && st.LastError == nil {
		st.LastError = ptr(st.Interrupted.Stuck)
	}
}

// fromReport fills in what the daemon's status report tells.
func (st *StoreStatus) fromReport(r *queue.StatusReport) {
	st.Report = r
	st.Daemon = &DaemonStatus{PID: r.PID, Version: r.Version, Started: r.Started, UptimeMS: time.Since(r.Started).Milliseconds(), Holding: r.Holding, Epoch: r.Epoch}
	st.Queued, st.InFlight, st.Applied, st.Rejected, st.DeadLetters = &r.Queued, &r.InFlight, &r.Applied, &r.Rejected, &r.Dead
	st.Waiting, st.Fault, st.Running, st.Deferred = optional(r.Waiting), optional(r.Fault), optional(r.Running), optional(r.Deferred)
	st.LastError = optional(r.Fault)
	st.Interrupted = r.Interrupted
	if j := r.Journal; j != nil {
		st.Journal = JournalStatus{Path: j.Path, Bytes: j.Bytes, Outcomes: j.Outcomes, Applied: j.Applied, Rejected: j.Rejected, Epoch: j.Epoch, LastSeq: j.LastSeq, Error: optional(j.Error)}
	} else { // a daemon that does not report its journal
		st.Journal = JournalStatus{Path: journal.Path(r.Store), Error: ptr("the daemon does not report its journal")}
	}
}

// readJournal reads the journal without the store lock: its numbers and
// any interrupted batch. A journal that does not exist yet is empty; one
// that is busy or damaged is shown with its error. A journal that fails
// the rules of .scribe is the error.
func readJournal(path string) (JournalStatus, *queue.Interrupted, error) {
	jj := JournalStatus{Path: path}
	j, err := journal.OpenReadOnly(path, time.Second)
	if errors.Is(err, fs.ErrNotExist) {
		return jj, nil, nil // nothing was ever applied to this store
	}
	if errors.Is(err, queue.ErrInsecure) {
		return jj, nil, err // not this user's journal: nothing of it is shown
	}
	if err != nil { // busy (journal.ErrBusy), damaged (journal.ErrDamaged), unreadable
		jj.Error = ptr(err.Error())
		return jj, nil, nil
	}
	defer j.Close()
	info, err := j.Info()
	if err != nil {
		jj.Error = ptr(err.Error())
		return jj, nil, nil
	}
	jj = JournalStatus{Path: path, Bytes: info.Bytes, Outcomes: info.Outcomes, Applied: info.Applied, Rejected: info.Rejected, Epoch: info.Epoch, LastSeq: info.LastSeq}
	in, err := j.Interrupted()
	if err != nil {
		jj.Error = ptr(err.Error())
	}
	return jj, in, nil
}

// probeLock is the store lock at path as the kernel tells it, and its
// holder's identity when the lock file names the process holding it.
func probeLock(path string) (LockStatus, *queue.Holder) {
	l := LockStatus{Path: path, State: LockFree}
	held, pids, h := lock.ProbeLock(path)
	if !held {
		return l, nil
	}
	if h != nil {
		return heldBy(path, h), h
	}
	l.State = LockHeld
	if len(pids) > 0 {
		l.PID = &pids[0]
	}
	return l, h
}

// heldBy is the lock at path held by the process whose identity is h.
// Another tool's identity ("\x00<pid> <argv…>") has no mode and no
// epoch: they are null, not an empty mode and epoch 0.
func heldBy(path string, h *queue.Holder) LockStatus {
	l := LockStatus{Path: path, State: LockHeld, PID: &h.PID, Host: &h.Host, Command: &h.Command, Since: &h.Since}
	if h.Mode != "" {
		l.Mode, l.Epoch = &h.Mode, &h.Epoch
	}
	return l
}

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }

// optional is s, or nil when s is empty.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
