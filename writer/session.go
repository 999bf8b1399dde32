package writer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"scribe/queue"
)

// DefaultMaxFileBytes is the default limit on the size a file may reach
// through put, append or merge.
const DefaultMaxFileBytes = 1 << 30

// SessionOptions configures OpenSession.
type SessionOptions struct {
	// LockPath is the store lock file; empty means DefaultLockPath. Set it
	// to share the lock an existing tool already takes.
	LockPath string
	// Mode is ModeDaemon or ModeDirect, recorded in the holder identity
	// and in outcomes. Empty means ModeDirect.
	Mode string
	// Command describes the holder for other processes' error messages.
	Command string
	// MaxFileBytes limits the size of a file after an op; 0 means
	// DefaultMaxFileBytes.
	MaxFileBytes int64
	// Logger receives recovery messages; nil discards them.
	Logger *slog.Logger
}

// Session is a held store: its lock, its journal and an os.Root on its
// folder. The daemon's Writer and direct writers both apply jobs through a
// Session, so they share one code path and one journal.
type Session struct {
	store   string
	storeID string
	root    *os.Root
	lock    *Lock
	journal *Journal
	epoch   uint64
	mode    string
	maxFile int64
	// protected: see overlay.protected.
	protected []os.FileInfo
}

// OpenSession takes the store lock without waiting (a busy store returns a
// *LockedError), opens the journal, raises the epoch and finishes any batch
// an earlier holder was interrupted in.
func OpenSession(store string, o SessionOptions) (s *Session, err error) {
	real, err := queue.ResolveStore(store)
	if err != nil {
		return nil, err
	}
	if _, err := MetaDir(real); err != nil {
		return nil, err
	}
	if o.LockPath == "" {
		o.LockPath = DefaultLockPath(real)
	}
	if o.Mode == "" {
		o.Mode = ModeDirect
	}
	if o.MaxFileBytes == 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	holder := NewHolder(o.Mode, o.Command)
	lock, err := TryLock(o.LockPath, holder)
	if err != nil {
		return nil, err
	}
	s = &Session{store: real, storeID: queue.StoreID(real), lock: lock, mode: o.Mode, maxFile: o.MaxFileBytes}
	opened := s // "return nil, err" sets s to nil before this defer runs
	defer func() {
		if err != nil {
			opened.Close()
		}
	}()
	if s.journal, err = OpenJournal(JournalPath(real)); err != nil {
		return nil, err
	}
	if s.epoch, err = s.journal.NextEpoch(); err != nil {
		return nil, fmt.Errorf("raise epoch: %w", err)
	}
	holder.Epoch = s.epoch
	if err = lock.SetHolder(holder); err != nil {
		return nil, err
	}
	if s.root, err = os.OpenRoot(real); err != nil {
		return nil, err
	}
	for _, p := range []string{filepath.Join(real, queue.MetaDir), o.LockPath, JournalPath(real)} {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("stat %s: %w", p, err)
		}
		s.protected = append(s.protected, fi)
	}
	if err = s.recover(o.Logger); err != nil {
		return nil, err
	}
	return s, nil
}

// recover redoes a batch whose intent was committed but whose outcomes
// were not: its files may be changed in part, so every change is carried
// out again (each is idempotent) before the outcomes are recorded.
func (s *Session) recover(log *slog.Logger) error {
	in, err := s.journal.pendingIntent()
	if err != nil || in == nil {
		return err
	}
	log.Warn("redoing an interrupted batch", "epoch", in.Epoch, "files", len(in.Changes), "jobs", len(in.Outcomes))
	if err := materialize(s.root, in.Changes); err != nil {
		return fmt.Errorf("recover interrupted batch: %w", err)
	}
	if err := s.journal.commit(in.Outcomes, in.LastSeq); err != nil {
		return fmt.Errorf("recover interrupted batch: %w", err)
	}
	return nil
}

// Epoch is the fencing token of this hold of the store lock.
func (s *Session) Epoch() uint64 { return s.epoch }

// Store is the held store's real path.
func (s *Session) Store() string { return s.store }

// StoreID is the held store's ID.
func (s *Session) StoreID() string { return s.storeID }

// Journal is the store's journal, open while the session is.
func (s *Session) Journal() *Journal { return s.journal }

// Entry is a job to apply. A job that could not be decoded carries the
// decoding error in Err (and whatever ID could be read) and is rejected.
type Entry struct {
	Job *queue.Job
	Err error
	// Seq is the job's stream sequence (0 for direct writes).
	Seq uint64
}

// Result is the outcome of one Entry.
type Result struct {
	Outcome *queue.Outcome
	// Duplicate means the journal already had this job ID: Outcome is the
	// outcome recorded then, and nothing was changed now.
	Duplicate bool
}

// Apply applies entries in order as one batch: each job's ops all or
// nothing, the files touched once and fsynced, every outcome recorded in
// one journal transaction. A job ID the journal already has is not applied
// again; its recorded outcome is returned. An error means an I/O fault: the
// batch may be half on disk, and the session must be closed and reopened
// (which completes it) before the entries are retried.
func (s *Session) Apply(entries []Entry) ([]Result, error) {
	if s.journal == nil {
		return nil, ErrClosed
	}
	results := make([]Result, len(entries))
	ov := newOverlay(s.root, s.maxFile)
	ov.protected = s.protected
	var decided []*queue.Outcome
	seen := map[string]int{} // job ID → index of its first entry in this batch
	var lastSeq uint64
	now := time.Now().UTC()
	for i, e := range entries {
		lastSeq = max(lastSeq, e.Seq)
		id := ""
		if e.Job != nil {
			id = e.Job.ID
		}
		if id != "" {
			if first, ok := seen[id]; ok {
				results[i] = Result{Outcome: results[first].Outcome, Duplicate: true}
				continue
			}
			seen[id] = i
			prev, err := s.journal.Outcome(id)
			if err != nil {
				return nil, err
			}
			if prev != nil {
				results[i] = Result{Outcome: prev, Duplicate: true}
				continue
			}
		}
		out := &queue.Outcome{V: queue.Version, ID: id, Status: queue.StatusApplied, Epoch: s.epoch, Seq: e.Seq, Mode: s.mode, At: now}
		if e.Job != nil {
			out.Meta = e.Job.Meta
		}
		err := e.Err
		if err == nil && e.Job.Store != s.storeID {
			err = queue.Reject(queue.ReasonWrongStore, "job is for store %s, this is %s", e.Job.Store, s.storeID)
		}
		if err == nil {
			err = ov.applyJob(e.Job)
		}
		var rej *queue.RejectError
		switch {
		case errors.As(err, &rej):
			out.Status, out.Reason, out.Detail = queue.StatusRejected, rej.Reason, rej.Detail
		case err != nil:
			return nil, err
		}
		results[i] = Result{Outcome: out}
		decided = append(decided, out)
	}
	if len(decided) == 0 {
		return results, nil
	}
	if changes := ov.changes(); len(changes) > 0 {
		in := &intent{Epoch: s.epoch, Changes: changes, Outcomes: decided, LastSeq: lastSeq}
		if err := s.journal.writeIntent(in); err != nil {
			return nil, fmt.Errorf("record intent: %w", err)
		}
		if err := materialize(s.root, changes); err != nil {
			return nil, err
		}
	}
	if err := s.journal.commit(decided, lastSeq); err != nil {
		return nil, fmt.Errorf("record outcomes: %w", err)
	}
	return results, nil
}

// Close releases the session: journal, root, then the store lock. It is
// safe on a partly opened session and on every error path.
func (s *Session) Close() error {
	var errs []error
	if s.root != nil {
		errs = append(errs, s.root.Close())
	}
	if s.journal != nil {
		errs = append(errs, s.journal.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Unlock())
	}
	*s = Session{}
	return errors.Join(errs...)
}

// OpenSessionWait is OpenSession that, while the store is busy, retries
// with jittered backoff for up to wait (0: fail at once) or until ctx ends.
// Only the kernel ever frees the lock: waiting never breaks it.
func OpenSessionWait(ctx context.Context, store string, wait time.Duration, o SessionOptions) (*Session, error) {
	deadline := time.Now().Add(wait)
	for attempt := 0; ; attempt++ {
		s, err := OpenSession(store, o)
		if err == nil || !errors.Is(err, ErrLocked) || !time.Now().Before(deadline) {
			return s, err
		}
		// The deadline may pass between the check above and here: keep d
		// positive, as rand.N panics on a bound <= 0.
		d := max(min(backoff(attempt), time.Until(deadline)), time.Millisecond)
		d = d/2 + rand.N(d/2+1) // jitter, so waiters do not move in step
		if !sleep(ctx, d) {
			return nil, err
		}
	}
}
