package writer

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/exec"
	"github.com/scribehq/scribe/writer/journal"
)

// An exec job runs a command of the daemon's allowlist in the store's
// turn (docs/exec.md). Unlike file ops it cannot be undone or redone, so
// it is decided in steps, each under the store lock and in the journal:
//
//  1. PlanExec checks the job against the allowlist; a rejection is
//     recorded like any other. Join adds the queued jobs that may stand in
//     for its run (coalescing).
//  2. StartExec probes the command's own lock (deferring the job while it
//     is held) and records a run record: from here on, a holder of a later
//     epoch that finds it knows the writer died while the command ran.
//  3. The writer lets the journal go, keeping the store lock, and runs the
//     command (ExecPlan.Run) with the lock handed down as `scribe lock`
//     hands it, so that scribe commands it runs join the hold and may
//     write.
//  4. FinishExec records the outcomes and drops the run record in one
//     transaction, or, when the command said it was busy, drops the record
//     alone and defers the job.

// DeferError says an exec job cannot run now because something it needs is
// busy: its command's own lock is held, or the command exited with one of
// its busy exit codes. The job is not rejected and the attempt does not
// count: it is tried again later.
type DeferError struct{ Why string }

func (e *DeferError) Error() string { return "deferred: " + e.Why }

// NotStartedError is FinishExec's error for a run whose command could not
// be started for a fault of the daemon's own (exec.Result.Fault): its run
// record is dropped, and the job is to be planned again after the fault.
type NotStartedError struct{ Err error }

func (e *NotStartedError) Error() string { return e.Err.Error() }

// Unwrap returns the fault.
func (e *NotStartedError) Unwrap() error { return e.Err }

// ExecPlan is an exec job a daemon's writer is to run, and the jobs that
// joined it (Join).
type ExecPlan struct {
	cmd *exec.Command
	job *queue.Job
	run *exec.Run
	// outs are the outcomes to record, as prepared: the job's own first,
	// then those of the jobs that joined it.
	outs    []*queue.Outcome
	lastSeq uint64
}

// Job is the exec job whose run the plan is.
func (p *ExecPlan) Job() *queue.Job { return p.job }

// Command is the allowlisted command it runs.
func (p *ExecPlan) Command() *exec.Command { return p.cmd }

// Run is its run: what the writer executes, with the store lock held
// (exec.Run.Exec).
func (p *ExecPlan) Run() *exec.Run { return p.run }

// Jobs are the IDs of the jobs the run decides: the job's own first, then
// those that joined it.
func (p *ExecPlan) Jobs() []string {
	ids := make([]string, len(p.outs))
	for i, o := range p.outs {
		ids[i] = o.ID
	}
	return ids
}

// PlanExec decides an exec job up to its run, against the allowlist cmds
// (exec.Index). A duplicate, an ID conflict or a rejection is decided and
// recorded now, and returned as the Result with a nil plan; else the plan
// to run. An error is a fault to retry after.
func (s *Session) PlanExec(e Entry, cmds map[string]*exec.Command) (Result, *ExecPlan, error) {
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.verify(); err != nil {
		return Result{}, nil, err
	}
	if err := st.recover(); err != nil {
		return Result{}, nil, err
	}
	id, digest := e.Job.ID, e.Job.Digest()
	prev, err := st.journal.Outcome(id)
	if err != nil {
		return Result{}, nil, err
	}
	if prev != nil {
		r := Result{Outcome: prev, Duplicate: true}
		if c := prev.Conflict(digest); c != nil {
			r = Result{Outcome: s.outcome(e, digest), Conflict: true}
			r.Outcome.Status, r.Outcome.Reason, r.Outcome.Detail = queue.StatusRejected, c.Reason, c.Detail
		}
		return r, nil, nil
	}
	out := s.outcome(e, digest)
	plan, err := s.checkExec(e, cmds)
	if err == nil {
		plan.outs = []*queue.Outcome{out}
		return Result{}, plan, nil
	}
	var rej *queue.RejectError
	if !errors.As(err, &rej) {
		return Result{}, nil, err
	}
	out.Status, out.Reason, out.Detail = queue.StatusRejected, rej.Reason, rej.Detail
	if err := st.journal.Commit([]*queue.Outcome{out}, nil, e.Seq); err != nil {
		return Result{}, nil, fmt.Errorf("record outcome: %w", err)
	}
	return Result{Outcome: out}, nil, nil
}

// outcome prepares an applied outcome for entry e of this session.
func (s *Session) outcome(e Entry, digest string) *queue.Outcome {
	return &queue.Outcome{
		V: queue.Version, ID: e.Job.ID, Status: queue.StatusApplied, Epoch: s.epoch, Seq: e.Seq,
		Mode: s.mode, At: time.Now().UTC(), Meta: e.Job.Meta, Digest: digest,
	}
}

// checkExec decides an exec job as its own job, against the allowlist and
// the store: a command it names, arguments it allows, a timeout no longer
// than its own, and a working directory that is a folder inside the store.
// The error is a *queue.RejectError for a job that may not run. It is the
// one decision: the job that runs (PlanExec) and every job that would
// join its run (Join) pass it, so that no job is told the outcome of a
// run it could not have had alone.
func (s *Session) checkExec(e Entry, cmds map[string]*exec.Command) (*ExecPlan, error) {
	if e.Err != nil {
		return nil, e.Err
	}
	job := e.Job
	if err := job.Validate(); err != nil {
		return nil, err
	}
	if job.Store != s.storeID {
		return nil, queue.Reject(queue.ReasonWrongStore, "job is for store %s, this is %s", job.Store, s.storeID)
	}
	op := job.Ops[0]
	cmd := cmds[op.Name]
	if cmd == nil {
		return nil, queue.Reject(queue.ReasonNotAllowed, "no command %q on this daemon's exec allowlist", op.Name)
	}
	timeout, err := cmd.Admit(op)
	if err != nil {
		return nil, err
	}
	dir, err := s.execDir(cmp.Or(op.Dir, cmd.Dir))
	if err != nil {
		return nil, err
	}
	return &ExecPlan{cmd: cmd, job: job, run: exec.NewRun(cmd, op.Args, dir, timeout), lastSeq: e.Seq}, nil
}

// execDir resolves a working directory relative to the store
// (queue.StoreDir): one that leads outside it is path_escapes, one that
// is no folder bad_input.
func (s *Session) execDir(rel string) (string, error) {
	real, err := queue.StoreDir(s.store, rel)
	switch {
	case errors.Is(err, queue.ErrDirEscapes):
		return "", queue.Reject(queue.ReasonPathEscapes, "%v", err)
	case err != nil:
		return "", queue.Reject(queue.ReasonBadInput, "%v", err)
	}
	return real, nil
}

// Join adds entry e to the plan's run if it may stand in for it: a job
// with the plan's coalescing key that checkExec, deciding it as its own
// job, lets run (so one the allowlist or the store refuses is left to be
// rejected in its own turn), whose run would be the plan's exactly
// (exec.Run.Same), whose ID has no outcome yet and is not in the run
// already.
// A job it does not join keeps its place in the queue.
func (s *Session) Join(plan *ExecPlan, e Entry, cmds map[string]*exec.Command) (bool, error) {
	if plan.job.Coalesce == "" || e.Err != nil || e.Job.Coalesce != plan.job.Coalesce {
		return false, nil
	}
	alone, err := s.checkExec(e, cmds)
	if err != nil || !plan.run.Same(alone.run) {
		return false, nil // rejected, or run on its own, in its turn
	}
	if slices.ContainsFunc(plan.outs, func(o *queue.Outcome) bool { return o.ID == e.Job.ID }) {
		return false, nil
	}
	s.st.mu.Lock()
	prev, err := s.st.journal.Outcome(e.Job.ID)
	s.st.mu.Unlock()
	if err != nil || prev != nil {
		return false, err
	}
	out := s.outcome(e, e.Job.Digest())
	out.CoalescedInto = plan.job.ID
	plan.outs = append(plan.outs, out)
	plan.lastSeq = max(plan.lastSeq, e.Seq)
	return true, nil
}

// StartExec checks that the command's own lock is free (else the job is
// deferred: a *DeferError), makes the run's output spools and records the
// run before it starts. Any other error is a fault to retry after: what
// failed is the daemon's, not the job's, and nothing ran.
func (s *Session) StartExec(plan *ExecPlan) error {
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.verify(); err != nil {
		return err
	}
	// The command may change the files: no redo may overwrite what it did.
	if err := st.sync(); err != nil {
		return err
	}
	if why := plan.cmd.LockBusy(); why != "" {
		return &DeferError{Why: why}
	}
	if err := plan.run.OpenOutput(queue.Layout{Root: s.store}.Meta()); err != nil {
		return fmt.Errorf("job %s: %w", plan.job.ID, err)
	}
	err := st.journal.StartRun(&journal.Run{
		Epoch: s.epoch, Command: plan.cmd.Name, RerunSafe: plan.cmd.RerunSafe,
		Started: time.Now().UTC(), Outcomes: plan.outs, LastSeq: plan.lastSeq,
	})
	if err != nil {
		plan.run.CloseOutput()
		return fmt.Errorf("job %s: record its run: %w", plan.job.ID, err)
	}
	return nil
}

// FinishExec records a run's outcomes and returns them. A run whose
// command exited with a busy exit code is not an outcome: its record is
// dropped and the job deferred (a *DeferError); one that could not start
// for a fault of the daemon's is a *NotStartedError.
func (s *Session) FinishExec(plan *ExecPlan, r *exec.Result) ([]Result, error) {
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.verify(); err != nil {
		return nil, err
	}
	if r.Fault != nil {
		// Nothing ran: the record goes, and the job is tried again.
		if err := st.journal.EndRun(nil, 0); err != nil {
			return nil, err
		}
		return nil, &NotStartedError{Err: fmt.Errorf("job %s: start command %s: %w", plan.job.ID, plan.cmd.Name, r.Fault)}
	}
	if why, busy := r.Busy(); busy {
		if err := st.journal.EndRun(nil, 0); err != nil {
			return nil, err
		}
		return nil, &DeferError{Why: why}
	}
	status, reason, detail := r.Judge()
	res := make([]Result, len(plan.outs))
	now := time.Now().UTC()
	for i, o := range plan.outs {
		o.Status, o.Reason, o.Detail, o.At, o.Exec = status, reason, detail, now, r.Outcome()
		res[i] = Result{Outcome: o}
	}
	if err := st.journal.EndRun(plan.outs, plan.lastSeq); err != nil {
		return nil, fmt.Errorf("record outcomes: %w", err)
	}
	return res, nil
}
