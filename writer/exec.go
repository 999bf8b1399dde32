package writer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/exec"
	"github.com/scribehq/scribe/writer/internal/fault"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// An exec job runs a command of the daemon's allowlist in the store's
// turn (docs/exec.md). Unlike file ops it cannot be undone or redone, so
// it is decided in steps, each under the store lock and in the journal:
//
//  1. planExec checks the job against the allowlist; a rejection is
//     recorded like any other.
//  2. startExec probes the command's own lock (deferring the job while it
//     is held) and records a run record: from here on, a holder of a later
//     epoch that finds it knows the writer died while the command ran.
//  3. The writer lets the journal go, keeping the store lock, and runs the
//     command with the lock handed down as `scribe lock` hands it, so that
//     scribe commands it runs join the hold and may write.
//  4. finishExec records the outcomes and drops the run record in one
//     transaction, or, when the command said it was busy, drops the record
//     alone and defers the job.

// DeferError says an exec job cannot run now because something it needs is
// busy: its command's own lock is held, or the command exited with one of
// its busy exit codes. The job is not rejected and the attempt does not
// count: it is tried again later.
type DeferError struct{ Why string }

func (e *DeferError) Error() string { return "deferred: " + e.Why }

// notStarted is finishExec's error for a run whose command could not be
// started for a fault of the daemon's (exec.Result.Fault): its run record
// is dropped, and the job is tried again after the fault.
type notStarted struct{ err error }

func (e *notStarted) Error() string { return e.err.Error() }
func (e *notStarted) Unwrap() error { return e.err }

// execPlan is an exec job the writer is to run, and the jobs that joined it.
type execPlan struct {
	cmd *exec.Command
	job *queue.Job
	run *exec.Run
	// outs are the outcomes to record, as prepared: the job's own first,
	// then those of the jobs that joined it.
	outs    []*queue.Outcome
	lastSeq uint64
}

// planExec decides an exec job up to its run. A duplicate, an ID
// conflict or a rejection is decided and recorded now, and returned as
// the Result with a nil plan; else the plan to run.
func (s *Session) planExec(e Entry, cmds map[string]*exec.Command) (Result, *execPlan, error) {
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
// one decision: the job that runs (planExec) and every job that would
// join its run (join) pass it, so that no job is told the outcome of a
// run it could not have had alone.
func (s *Session) checkExec(e Entry, cmds map[string]*exec.Command) (*execPlan, error) {
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
	return &execPlan{cmd: cmd, job: job, run: exec.NewRun(cmd, op.Args, dir, timeout), lastSeq: e.Seq}, nil
}

// execDir resolves a working directory relative to the store: it must be
// an existing folder whose real path stays inside the store and outside
// .scribe.
func (s *Session) execDir(rel string) (string, error) {
	if rel == "" {
		return s.store, nil
	}
	real, err := filepath.EvalSymlinks(filepath.Join(s.store, filepath.FromSlash(rel)))
	if err != nil {
		return "", queue.Reject(queue.ReasonBadInput, "dir %s: %v", rel, unwrapPath(err))
	}
	inside, err := filepath.Rel(s.store, real)
	if err != nil || inside == ".." || strings.HasPrefix(inside, ".."+string(filepath.Separator)) || queue.CheckPath(filepath.ToSlash(inside)) != nil && inside != "." {
		return "", queue.Reject(queue.ReasonPathEscapes, "dir %s leads to %s, outside the store or into .scribe", rel, real)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", queue.Reject(queue.ReasonBadInput, "dir %s is not a folder", rel)
	}
	return real, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// join adds entry e to the plan's run if it may stand in for it: a job
// with the plan's coalescing key that checkExec, deciding it as its own
// job, lets run (so one the allowlist or the store refuses is left to be
// rejected in its own turn), whose run would be the plan's exactly
// (exec.Run.Same), whose ID has no outcome yet and is not in the run
// already.
// A job it does not join keeps its place in the queue.
func (s *Session) join(plan *execPlan, e Entry, cmds map[string]*exec.Command) (bool, error) {
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

// startExec checks that the command's own lock is free (else the job is
// deferred: a *DeferError), makes the run's output spools and records the
// run before it starts. Any other error is a fault to retry after: what
// failed is the daemon's, not the job's, and nothing ran.
func (s *Session) startExec(plan *execPlan) error {
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.verify(); err != nil {
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

// finishExec records a run's outcomes. A run whose command exited with a
// busy exit code is not an outcome: its record is dropped and the job
// deferred (a *DeferError).
func (s *Session) finishExec(plan *execPlan, r *exec.Result) ([]Result, error) {
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
		return nil, &notStarted{err: fmt.Errorf("job %s: start command %s: %w", plan.job.ID, plan.cmd.Name, r.Fault)}
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

// running is the exec run in progress, for the status report.
type running struct {
	plan  *execPlan
	pid   int
	since time.Time
}

func (r *running) String() string {
	joined := ""
	if n := len(r.plan.outs) - 1; n > 0 {
		joined = " (and " + strconv.Itoa(n) + " jobs that joined it)"
	}
	return fmt.Sprintf("job %s%s: command %s, pid %d, for %s", r.plan.job.ID, joined, r.plan.cmd.Name, r.pid, time.Since(r.since).Round(time.Millisecond))
}

// Deferral backoff: an exec job whose command is busy is tried again after
// minDeferral, doubling to maxDeferral.
const (
	minDeferral = 100 * time.Millisecond
	maxDeferral = 5 * time.Second
)

// processExec runs an exec job and those that join it, acks them and
// publishes their outcomes. While the command's own lock is held, or the
// command says it is busy, the job is deferred: the store is let go for
// direct writers, the jobs behind it wait (order), and it is tried again
// with backoff, never rejected for it. It returns false if ctx ended
// first: the job stays unacked in the queue (if its command was running,
// it was stopped, and the next holder of the store settles its run
// record).
func (w *Writer) processExec(ctx context.Context, lead item) bool {
	fault.Crash("fetched")
	var joined []item // the jobs that joined the lead, kept across deferrals
	defer w.setDeferred("")
	var lastFaultLog, deferredSince, lastDeferLog time.Time
	deferrals := 0
	for attempt := 0; ; {
		items := append([]item{lead}, joined...)
		msgs, _ := split(items)
		if err := w.acquire(ctx, msgs); err != nil {
			return false
		}
		res, plan, err := w.session.planExec(lead.e, w.commands)
		if err != nil {
			if !w.retryAfterFault(ctx, err, attempt, msgs, &lastFaultLog) {
				return false
			}
			attempt++
			continue
		}
		if plan == nil { // decided without a run
			w.putBack(joined)
			w.count([]Result{res})
			w.answer(msgs[:1], []Entry{lead.e}, []Result{res})
			return true
		}
		if joined, err = w.gather(plan, joined); err != nil {
			if !w.retryAfterFault(ctx, err, attempt, msgs, &lastFaultLog) {
				return false
			}
			attempt++
			continue
		}
		items = append([]item{lead}, joined...)
		msgs, entries := split(items)
		err = w.session.startExec(plan)
		var de *DeferError
		if errors.As(err, &de) {
			if !w.deferExec(ctx, plan, msgs, de, &deferrals, &deferredSince, &lastDeferLog) {
				return false
			}
			continue
		}
		if err != nil {
			if !w.retryAfterFault(ctx, err, attempt, msgs, &lastFaultLog) {
				return false
			}
			attempt++
			continue
		}
		w.setDeferred("")
		r, ok := w.runHeld(ctx, plan, msgs)
		if !ok {
			return false
		}
		fault.Crash("ran")
		for {
			if err := w.acquire(ctx, msgs); err != nil {
				return false
			}
			results, err := w.session.finishExec(plan, r)
			if errors.As(err, &de) {
				if !w.deferExec(ctx, plan, msgs, de, &deferrals, &deferredSince, &lastDeferLog) {
					return false
				}
				break // plan again: more jobs may join
			}
			var ns *notStarted
			if errors.As(err, &ns) {
				if !w.retryAfterFault(ctx, ns.err, attempt, msgs, &lastFaultLog) {
					return false
				}
				attempt++
				break // plan again
			}
			if err != nil {
				if !w.retryAfterFault(ctx, err, attempt, msgs, &lastFaultLog) {
					return false
				}
				attempt++
				continue
			}
			if w.cautious > 0 {
				w.cautious--
			}
			w.setFault("")
			w.count(results)
			fault.Crash("commit")
			w.answer(msgs, entries, results)
			fault.Crash("published")
			return true
		}
	}
}

// gather re-joins the jobs that joined the run before (the plan is made
// anew on each attempt) and adds those of ahead that may join it now.
// A job that can no longer join goes back to ahead, in its place.
func (w *Writer) gather(plan *execPlan, joined []item) ([]item, error) {
	var keep, back []item
	for _, it := range joined {
		ok, err := w.session.join(plan, it.e, w.commands)
		if err != nil {
			return joined, err
		}
		if ok {
			keep = append(keep, it)
		} else {
			back = append(back, it)
		}
	}
	w.putBack(back)
	if plan.job.Coalesce == "" {
		return keep, nil
	}
	w.fill()
	rest := w.ahead[:0:0]
	for i, it := range w.ahead {
		ok, err := w.session.join(plan, it.e, w.commands)
		if err != nil {
			w.ahead = append(rest, w.ahead[i:]...)
			return keep, err
		}
		if ok {
			keep = append(keep, it)
		} else {
			rest = append(rest, it)
		}
	}
	w.ahead = rest
	return keep, nil
}

// putBack returns items to ahead, each in its place by the order taken.
func (w *Writer) putBack(items []item) {
	if len(items) == 0 {
		return
	}
	w.ahead = append(w.ahead, items...)
	slices.SortStableFunc(w.ahead, func(a, b item) int { return cmpUint(a.n, b.n) })
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// deferExec lets the store go, says why the job waits (status and, now and
// then, the log), keeps its messages from being redelivered and waits the
// deferral's backoff. It returns false if ctx ended.
func (w *Writer) deferExec(ctx context.Context, plan *execPlan, msgs []jetstream.Msg, de *DeferError, n *int, since, lastLog *time.Time) bool {
	w.release()
	w.observer().Deferred(plan.cmd.Name)
	if *n == 0 {
		*since = time.Now()
	}
	wait := min(minDeferral<<min(*n, 10), maxDeferral)
	*n++
	w.setDeferred(fmt.Sprintf("job %s (command %s), waiting since %s (tries: %d): %s; next try in %s",
		plan.job.ID, plan.cmd.Name, since.Format(time.RFC3339), *n, de.Why, wait))
	if time.Since(*lastLog) >= w.cfg.WaitLog {
		*lastLog = time.Now()
		w.log.Info("exec job deferred", "id", plan.job.ID, "command", plan.cmd.Name, "why", de.Why, "times", *n)
	}
	for _, m := range msgs {
		_ = m.InProgress()
	}
	return sleep(ctx, wait)
}

// setDeferred records why the job in hand is deferred ("" when it is not).
func (w *Writer) setDeferred(why string) {
	w.mu.Lock()
	w.deferred = why
	w.mu.Unlock()
}

// runHeld runs the plan's command with the store lock held and handed
// down to it, the journal closed so that scribe commands it runs may
// open it, and the messages kept from redelivery while it runs; then it
// opens the session again, under the same hold. It returns false if ctx
// ended, leaving the run record for the next holder.
func (w *Writer) runHeld(ctx context.Context, plan *execPlan, msgs []jetstream.Msg) (*exec.Result, bool) {
	// A nested hold keeps the flock while the session, and with it the
	// journal, is closed.
	hold, err := lock.Acquire(ctx, w.store, lock.Options{LockPath: w.cfg.LockPath, Mode: queue.ModeDaemon, Command: w.cfg.Command})
	if err != nil {
		plan.run.CloseOutput()
		w.log.Error("keep the store for a command", "err", err)
		return nil, false
	}
	defer hold.Unlock()
	w.releaseKeeping()
	since := time.Now()
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(queue.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, m := range msgs {
					_ = m.InProgress()
				}
			}
		}
	}()
	w.log.Debug("running command", "id", plan.job.ID, "command", plan.cmd.Name, "jobs", len(plan.outs))
	env := []string{"SCRIBE_STORE=" + w.store, "SCRIBE_JOB_ID=" + plan.job.ID}
	r := plan.run.Exec(ctx.Done(), hold, env, func(pid int) {
		w.mu.Lock()
		w.running = &running{plan: plan, pid: pid, since: since}
		w.mu.Unlock()
	})
	w.mu.Lock()
	w.running = nil
	w.mu.Unlock()
	w.observer().ExecRan(plan.cmd.Name, r.Ended(), r.Took)
	if r.Stopped {
		return nil, false
	}
	// Take the journal back before the nested hold goes: the run record
	// is this hold's only while the hold stands.
	if err := w.acquire(ctx, msgs); err != nil {
		return nil, false
	}
	return r, true
}
