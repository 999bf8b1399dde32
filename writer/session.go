package writer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/internal/fault"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// DefaultMaxFileBytes is the default limit on the size a file may reach
// through put, append or merge.
const DefaultMaxFileBytes = 1 << 30

// Options configures Open and Take: which store lock to take, who takes
// it, how long to wait for it, and how a Session applies jobs.
type Options struct {
	// LockPath is the store lock file; empty means lock.DefaultPath. Set
	// it to share the lock an existing tool already takes.
	LockPath string
	// Mode is queue.ModeDaemon or queue.ModeDirect, recorded in the
	// holder identity and in outcomes. Empty means queue.ModeDirect. A
	// hold in queue.ModeDaemon never joins a hold handed down by a parent
	// process (see lock.Hold).
	Mode queue.Mode
	// Command describes the holder for other processes' error messages.
	Command string
	// Wait is how long to wait for a busy store; 0 means not at all: a
	// busy store returns a *lock.LockedError at once (fail fast). The
	// context bounds the wait too. While it waits it leaves the demand
	// mark a daemon's writer lets go for between batches.
	Wait time.Duration
	// MaxFileBytes limits the size of a file after an op; 0 means
	// DefaultMaxFileBytes.
	MaxFileBytes int64
	// Retention is how long outcomes are kept in the journal; 0 means the
	// retention the daemon last pruned with, or journal.DefaultRetention. A job
	// resubmitted with the ID of a pruned outcome would be applied again:
	// keep it longer than any client retries.
	Retention time.Duration
	// Logger receives recovery messages; nil discards them.
	Logger *slog.Logger
	// Fence, if set, is the daemon's claim on the store (a *claim.Claim):
	// the journal commits nothing once it fails (see journal.Fence).
	Fence journal.Fence
	// SyncDelay, if positive, lets the fsync of a batch's files follow its
	// answer, by up to about this long (see Session.Sync): the journal,
	// synced before any file changes, holds every change not yet synced,
	// and a holder after a power loss redoes them. 0 syncs a batch's files
	// before Apply returns.
	SyncDelay time.Duration
}

// defaults fills in o's defaults.
func (o Options) defaults() Options {
	if o.Mode == "" {
		o.Mode = queue.ModeDirect
	}
	if o.MaxFileBytes == 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// lockOptions are the options of o's hold of the store lock.
func (o Options) lockOptions() lock.Options {
	return lock.Options{LockPath: o.LockPath, Mode: o.Mode, Command: o.Command, Wait: o.Wait}
}

// Session is a held store: its lock, its journal and an os.Root on its
// folder. The daemon's Writer and direct writers both apply jobs through a
// Session, so they share one code path and one journal.
//
// Sessions are re-entrant like the lock: a process that opens a second
// Session on a store it holds shares the first one's hold, journal and
// root, and their batches take turns.
type Session struct {
	store     string
	storeID   string
	lock      *lock.Hold
	held      *holdState
	st        *shared
	epoch     uint64
	mode      queue.Mode
	maxFile   int64
	retention time.Duration
	syncDelay time.Duration
}

// opened is this process's registry of what its Sessions share under each
// hold, by the hold's token (nested holds of one process are one hold,
// and share a token: see lock.Hold). An entry lives while a Session under
// its hold is open; the hold keeps its epoch.
var opened = struct {
	sync.Mutex
	m map[string]*holdState
}{m: map[string]*holdState{}}

// holdState is what the Sessions of this process under one hold share.
type holdState struct {
	mu   sync.Mutex // guards st and gone; opening a journal holds it
	st   *shared    // while a Session under the hold is open
	gone bool       // closed by the last Session and out of opened: ask again
}

// heldState returns the registry entry of hold l, locked, making it on
// first use.
func heldState(l *lock.Hold) *holdState {
	for {
		opened.Lock()
		hs := opened.m[l.Token()]
		if hs == nil {
			hs = &holdState{}
			opened.m[l.Token()] = hs
		}
		opened.Unlock()
		hs.mu.Lock()
		if !hs.gone {
			return hs
		}
		hs.mu.Unlock() // the last Session under it closed meanwhile
	}
}

// forget drops the registry entry of hold l, whose last Session closed;
// hs.mu must be locked.
func (hs *holdState) forget(l *lock.Hold) {
	hs.gone = true
	opened.Lock()
	if opened.m[l.Token()] == hs {
		delete(opened.m, l.Token())
	}
	opened.Unlock()
}

// shared is what the Sessions under one hold share: one journal (bbolt
// cannot be opened twice by one process), one root, and the mutex that
// makes their batches take turns.
type shared struct {
	mu       sync.Mutex // one Apply at a time
	journal  *journal.Journal
	tree     *tree
	lockPath string
	// own are the keys of .scribe, the lock file and the journal as this
	// hold opened them (in that order), checked before a batch changes
	// anything: see verify.
	own      [3]fileKey
	sessions int
	log      *slog.Logger
	// epoch is the hold's: a run record of this epoch belongs to a
	// command this hold is running (see recoverRun).
	epoch uint64
	// carry is what batches answered before their files were synced
	// (Options.SyncDelay) left to sync.
	carry carry
}

// Open holds a store for a caller that applies jobs to it: it takes the
// store lock, fail-fast unless o.Wait is set (a busy store returns a
// *lock.LockedError naming the holder; errors.Is(err, lock.ErrLocked)),
// opens the journal, raises the epoch and finishes any batch an earlier
// holder was interrupted in. If that batch cannot be finished, Open fails
// with its *StuckError and holds nothing. Close the Session to let go.
func Open(ctx context.Context, store string, o Options) (_ *Session, err error) {
	real, err := queue.ResolveStore(store)
	if err != nil {
		return nil, err
	}
	o = o.defaults()
	l, err := lock.Acquire(ctx, real, o.lockOptions())
	if err != nil {
		return nil, err
	}
	hs := heldState(l)
	defer hs.mu.Unlock()
	if hs.st == nil {
		if hs.st, err = openShared(real, l, o.Fence, o.Logger); err != nil {
			hs.forget(l)
			l.Unlock()
			return nil, err
		}
	}
	hs.st.sessions++
	return &Session{store: real, storeID: queue.StoreID(real), lock: l, held: hs, st: hs.st, epoch: l.Epoch(), mode: o.Mode, maxFile: o.MaxFileBytes, retention: o.Retention, syncDelay: o.SyncDelay}, nil
}

// openShared opens the journal and root under the hold l, raises the
// epoch if this hold has none yet (an inherited hold has its parent's),
// and redoes an interrupted batch. The hold's registry entry must be
// locked.
func openShared(real string, l *lock.Hold, fence journal.Fence, log *slog.Logger) (_ *shared, err error) {
	st := &shared{log: log}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	if err := (queue.Layout{Root: real}).Make(); err != nil {
		return nil, err
	}
	if st.journal, err = journal.Open(journal.Path(real)); err != nil {
		return nil, err
	}
	fault.Pause("journal")
	st.journal.SetFence(fence)
	if l.Epoch() == 0 {
		epoch, err := st.journal.NextEpoch()
		if err != nil {
			return nil, fmt.Errorf("raise epoch: %w", err)
		}
		if err := l.SetEpoch(epoch); err != nil {
			return nil, err
		}
	}
	st.epoch = l.Epoch()
	if st.tree, err = openTree(real); err != nil {
		return nil, err
	}
	st.lockPath = l.Path()
	fi, err := l.File().Stat() // the file locked, whatever the path names now
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", l.Path(), err)
	}
	st.own[1] = keyOfInfo(fi)
	for i, p := range []string{queue.Layout{Root: real}.Meta(), "", journal.Path(real)} {
		if p == "" {
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, fmt.Errorf("stat %s: %w", p, err)
		}
		st.own[i] = keyOfInfo(fi)
	}
	st.tree.protected = st.own[:]
	if err := st.verify(); err != nil {
		return nil, err
	}
	if err := st.recover(); err != nil {
		return nil, err
	}
	return st, nil
}

// Sync makes the files of the batches Apply answered durable, if it left
// their fsync for later (Options.SyncDelay): Apply does it once the
// oldest of them is SyncDelay old, or they pass a bound, before an exec
// job's command runs, and Close before it lets go of the store. A writer
// that stays idle calls it when SyncBy says. If it fails, those batches
// are redone (the journal has them) before the next one.
func (s *Session) Sync() error {
	if s.st == nil {
		return ErrClosed
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return s.st.sync()
}

// SyncBy returns when the files of the batches Apply answered without
// syncing them are due to be synced (Sync), or the zero time if there
// are none.
func (s *Session) SyncBy() time.Time {
	if s.st == nil {
		return time.Time{}
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if len(s.st.carry.changes) == 0 {
		return time.Time{}
	}
	return s.st.carry.since.Add(s.syncDelay)
}

// sync fsyncs the carried files and folders, then settles the standing
// intent for good. If a file cannot be synced, the intent is unsettled:
// recover redoes it.
func (st *shared) sync() error {
	c := st.carry
	if len(c.changes) == 0 {
		return nil
	}
	st.carry = carry{}
	if err := syncChanges(st.tree, c.changes); err != nil {
		st.journal.Unsettle()
		return err
	}
	return st.journal.Settle(c.token)
}

// MaybePrune drops outcomes older than the retention period whose stream
// sequence is at most maxSeq (journal.MaybePrune), at most once per
// journal.PruneEvery across all processes, so the journal stays bounded
// under continuous load. A failure only delays it. The daemon's writer
// calls it with the sequences its queue can no longer redeliver; direct
// sessions prune direct writes (sequence 0), with the retention the
// daemon last used.
func (s *Session) MaybePrune(maxSeq uint64) {
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	n, retention, err := st.journal.MaybePrune(maxSeq, s.retention)
	switch {
	case err != nil:
		st.log.Warn("prune journal", "err", err)
	case n > 0:
		st.log.Info("pruned old outcomes from the journal", "outcomes", n, "retention", retention)
	}
}

func (st *shared) close() error {
	var errs []error
	if st.tree != nil {
		errs = append(errs, st.tree.Close())
	}
	if st.journal != nil {
		errs = append(errs, st.journal.Close())
	}
	return errors.Join(errs...)
}

// verify checks that scribe's own folder, the lock file and the journal
// are still the files this hold opened. If another program replaced one
// (a rename, a symlink swap), the flock may no longer exclude other
// writers, or outcomes would go to a file nobody reads: stop before
// changing anything.
func (s *shared) verify() error {
	for i, p := range []string{queue.Layout{Root: s.tree.Name()}.Meta(), s.lockPath, journal.Path(s.tree.Name())} {
		fi, err := os.Lstat(p)
		if err != nil || keyOfInfo(fi) != s.own[i] {
			return fmt.Errorf("%s is no longer the file this writer opened (replaced or removed by another program: %v): %w", p, err, ErrStoreChanged)
		}
	}
	return nil
}

// recover redoes a batch whose intent stands and was not carried out by
// this process: its files may be changed in part, so every change is
// carried out again (see materialize) before the intent is dropped. A
// failure is kept in the journal, for status, until a redo succeeds.
func (s *shared) recover() error {
	in, err := s.journal.Pending()
	if err != nil {
		return err
	}
	if in == nil {
		return s.recoverRun()
	}
	files := len(in.Paths())
	s.log.Warn("redoing an interrupted batch", "epoch", in.Epoch, "files", files)
	s.carry = carry{} // the intent holds it: redone and synced with it
	if err := materialize(s.tree, in.Changes, true, true); err != nil {
		stuck := &StuckError{Files: files, Err: err}
		if n, jerr := s.journal.Interrupted(); jerr == nil && n != nil {
			stuck.Jobs = n.Jobs
		}
		if jerr := s.journal.SetStuck(stuck.Error()); jerr != nil {
			s.log.Warn("record stuck batch", "err", jerr)
		}
		return stuck
	}
	// Outcomes an intent of an earlier version carries are recorded now.
	if err := s.journal.Commit(in.Outcomes, nil, in.LastSeq); err != nil {
		return fmt.Errorf("recover interrupted batch: %w", err)
	}
	return s.recoverRun()
}

// recoverRun settles a run record left by a holder of another epoch: the
// writer died, or lost the store, while the command ran, and the command
// is over (it held the store lock through the descriptor it inherited).
// A command safe to run again is simply forgotten, so that its job, still
// queued, runs again; any other gets the outcome interrupted. A record of
// this hold's own epoch is a command this hold is running (a scribe
// command it started joined the hold): left alone.
func (st *shared) recoverRun() error {
	r, err := st.journal.Running()
	if err != nil || r == nil || r.Epoch == st.epoch {
		return err
	}
	if r.RerunSafe {
		st.log.Warn("a command was interrupted; it is safe to run again, and its job will be", "command", r.Command, "started", r.Started, "epoch", r.Epoch)
		return st.journal.EndRun(nil, 0)
	}
	st.log.Warn("a command was interrupted; it is not safe to run again: recording its jobs as interrupted", "command", r.Command, "started", r.Started, "epoch", r.Epoch, "jobs", len(r.Outcomes))
	now := time.Now().UTC()
	for _, o := range r.Outcomes {
		o.Status, o.Reason, o.At = queue.StatusRejected, queue.ReasonInterrupted, now
		o.Detail = fmt.Sprintf("the writer died or lost the store while command %s ran (started %s, epoch %d); it is not marked rerun_safe, so it was not run again: it may have done all, part or none of its work",
			r.Command, r.Started.Format(time.RFC3339), r.Epoch)
		o.Exec = &queue.ExecResult{Command: r.Command, ExitCode: -1, Started: r.Started}
	}
	if err := st.journal.EndRun(r.Outcomes, r.LastSeq); err != nil {
		return fmt.Errorf("record interrupted run: %w", err)
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
func (s *Session) Journal() *journal.Journal { return s.st.journal }

// Entry is a job to apply. A job that could not be decoded carries the
// decoding error in Err (and whatever ID could be read) and is rejected.
type Entry struct {
	Job *queue.Job
	Err error
	// Seq is the job's stream sequence (0 for direct writes).
	Seq uint64
	// Raw is the job as received, kept as a dead letter if no ID can be
	// read from it.
	Raw []byte
}

// Result is the outcome of one Entry.
type Result struct {
	Outcome *queue.Outcome
	// Duplicate means the journal already had this job ID: Outcome is the
	// outcome recorded then, and nothing was changed now.
	Duplicate bool
	// Conflict means the journal already had this job ID for a different
	// job: Outcome is this job's id_conflict rejection, which is not
	// recorded (the ID keeps its first outcome), and nothing was changed.
	Conflict bool
}

// Apply applies entries in order as one batch: each job's ops all or
// nothing, the files touched once and fsynced (or, with
// Options.SyncDelay, synced later: see Sync), every outcome recorded in
// one journal transaction. A job ID the journal already has is not applied
// again; its recorded outcome is returned. An error means an I/O fault:
// nothing of the batch is recorded as applied, though it may be half on
// disk; the next Apply (or the next holder of the store) first completes
// it, so the entries can simply be retried.
func (s *Session) Apply(entries []Entry) ([]Result, error) {
	if s.st == nil {
		return nil, ErrClosed
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	// A batch that failed half way (an I/O fault) left its intent: carry
	// it out first, so nothing of it is redone twice or lost.
	if err := s.st.verify(); err != nil {
		return nil, err
	}
	if err := s.st.recover(); err != nil {
		return nil, err
	}
	jn, t := s.st.journal, s.st.tree
	results := make([]Result, len(entries))
	ov := newOverlay(t, s.maxFile)
	var decided []*queue.Outcome
	seen := map[string]int{} // job ID → index of its first entry in this batch
	var lastSeq uint64
	now := time.Now().UTC()
	for i, e := range entries {
		lastSeq = max(lastSeq, e.Seq)
		id, digest := "", ""
		if e.Job != nil {
			id = e.Job.ID
		}
		// A job that decoded but is invalid has a digest too, so that its
		// retry and another job under its ID are told apart; bytes that
		// did not decode (only their ID read) have none.
		if e.Job != nil && (e.Err == nil || e.Job.Ops != nil) {
			digest = e.Job.Digest()
		}
		if id != "" {
			prev, err := jn.Outcome(id)
			if err != nil {
				return nil, err
			}
			if first, ok := seen[id]; ok {
				prev = results[first].Outcome
			}
			if prev != nil {
				results[i] = Result{Outcome: prev, Duplicate: true}
				if c := prev.Conflict(digest); c != nil {
					results[i] = Result{Outcome: &queue.Outcome{
						V: queue.Version, ID: id, Status: queue.StatusRejected, Reason: c.Reason, Detail: c.Detail,
						Epoch: s.epoch, Seq: e.Seq, Mode: s.mode, At: now, Digest: digest,
					}, Conflict: true}
				}
				continue
			}
			seen[id] = i
		}
		out := &queue.Outcome{V: queue.Version, ID: id, Status: queue.StatusApplied, Epoch: s.epoch, Seq: e.Seq, Mode: s.mode, At: now, Digest: digest}
		if e.Job != nil {
			out.Meta = e.Job.Meta
		}
		err := e.Err
		if err == nil {
			err = e.Job.Validate() // a library caller's job may not have been encoded
		}
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
	// One synced journal write: the outcomes with the intent. They stand
	// once the files are on disk; a crash before that leaves the intent,
	// which the next holder redoes. A big file written whole is staged
	// first, synced beside the file, and the intent names it instead of
	// holding its data. The changes of batches answered before their
	// files were synced are carried in it again, else synced first: the
	// journal always holds (or names, synced) what is not synced.
	changes := ov.changes()
	if err := stage(t, changes); err != nil {
		return nil, err
	}
	fault.Crash("staged")
	intent, carried := changes, []string(nil)
	var folded folding
	if c := &s.st.carry; len(c.changes) > 0 {
		f, ok := c.fold(changes)
		if ok && s.syncDelay > 0 && time.Since(c.since) < s.syncDelay && c.fits(f, len(c.ids)+len(decided)) {
			intent, carried, folded = c.joined(f), c.ids, f
		} else if err := s.st.sync(); err != nil {
			return nil, err
		}
	}
	var in *journal.Intent
	if len(intent) > 0 {
		in = &journal.Intent{Epoch: s.epoch, Changes: intent, LastSeq: lastSeq, Carried: carried}
	}
	token, err := jn.Record(in, decided, deadLetters(entries, results), lastSeq)
	if err != nil {
		return nil, fmt.Errorf("record batch: %w", err)
	}
	if in == nil {
		return results, nil
	}
	fault.Crash("intent")
	if err := materialize(t, changes, false, s.syncDelay == 0); err != nil {
		return nil, err
	}
	fault.Crash("files")
	if err := s.st.verify(); err != nil {
		return nil, err
	}
	if s.syncDelay == 0 {
		if err := jn.Settle(token); err != nil {
			return nil, err
		}
		return results, nil
	}
	jn.SettleWritten(token)
	for _, o := range decided {
		if o.ID != "" {
			carried = append(carried, o.ID)
		}
	}
	s.st.carry.take(intent, folded.added, token, carried)
	return results, nil
}

// deadLetters are the entries decided without a readable ID: nobody can
// ask for their outcome, so the journal keeps them for inspection.
func deadLetters(entries []Entry, results []Result) []queue.DeadLetter {
	var dead []queue.DeadLetter
	for i, r := range results {
		if o := r.Outcome; o.ID == "" {
			raw := entries[i].Raw
			dead = append(dead, queue.DeadLetter{
				Seq: entries[i].Seq, At: o.At, Reason: o.Reason, Detail: o.Detail,
				Data: raw[:min(len(raw), queue.DeadLetterBytes)],
			})
		}
	}
	return dead
}

// Close releases the session: journal, root, then the store lock. It is
// safe on a partly opened session and on every error path.
func (s *Session) Close() error {
	if s.st == nil {
		return nil
	}
	// The next holder must find the files durable.
	errs := []error{s.Sync()}
	s.held.mu.Lock()
	if s.st.sessions--; s.st.sessions == 0 {
		errs = append(errs, s.st.close())
		s.held.st = nil
		s.held.forget(s.lock)
	}
	s.held.mu.Unlock()
	errs = append(errs, s.lock.Unlock())
	*s = Session{}
	return errors.Join(errs...)
}

// Abandon gives up the batch an earlier holder was interrupted in when it
// cannot be finished (a *StuckError): the operator's way out. It takes the
// store lock, records each of the batch's jobs as rejected
// with ReasonAbandoned, naming the files that may hold part of the batch,
// and drops the intent, so that the store takes writes again. It returns
// the batch it gave up, or nil if there was none. Nothing on disk is
// changed or rolled back: the files stay as the interrupted attempts left
// them. It takes the lock as a direct writer, as Open does (o.Wait).
func Abandon(ctx context.Context, store string, o Options) (*queue.Interrupted, error) {
	real, err := queue.ResolveStore(store)
	if err != nil {
		return nil, err
	}
	o.Mode = queue.ModeDirect
	l, err := lock.Acquire(ctx, real, o.lockOptions())
	if err != nil {
		return nil, err
	}
	defer l.Unlock()
	j, err := journal.Open(journal.Path(real))
	if err != nil {
		return nil, err
	}
	defer j.Close()
	summary, err := j.Interrupted()
	if err != nil || summary == nil {
		return nil, err
	}
	in, err := j.Pending()
	if err != nil {
		return nil, err
	}
	files := in.Paths()
	detail := fmt.Sprintf("the batch this job was in was interrupted and could not be finished (%s); an operator gave it up: these files may hold part of it: %s",
		cmp.Or(summary.Stuck, "no reason recorded"), strings.Join(files, ", "))
	outs, err := j.PendingOutcomes(in)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	for _, out := range outs {
		if out.Applied() {
			out.Status, out.Reason, out.Detail, out.At = queue.StatusRejected, queue.ReasonAbandoned, detail, now
		}
	}
	if err := j.Abandon(outs); err != nil {
		return nil, fmt.Errorf("abandon interrupted batch: %w", err)
	}
	return summary, nil
}
