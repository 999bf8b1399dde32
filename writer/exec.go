package writer

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
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
// started for a fault of the daemon's (runResult.fault): its run record
// is dropped, and the job is tried again after the fault.
type notStarted struct{ err error }

func (e *notStarted) Error() string { return e.err.Error() }
func (e *notStarted) Unwrap() error { return e.err }

// execPlan is an exec job the writer is to run, and the jobs that joined it.
type execPlan struct {
	cmd     *Command
	job     *queue.Job
	args    []string // the command's fixed arguments, then the job's
	dir     string   // absolute working directory
	timeout time.Duration
	// outs are the outcomes to record, as prepared: the job's own first,
	// then those of the jobs that joined it.
	outs    []*queue.Outcome
	lastSeq uint64
	// output is where the command's stdout and stderr go, made by
	// startExec for the run it records and closed once the run is over.
	output [2]*spool
}

// openOutput makes the run's output spools, each keeping what the
// command's max_output allows. Failing is a fault of the daemon's own
// files (the job is retried), never the job's outcome.
func (p *execPlan) openOutput(dir string) error {
	for i := range p.output {
		sp, err := newSpool(dir, newCapture(p.cmd.maxOutput()))
		if err != nil {
			p.closeOutput()
			return err
		}
		p.output[i] = sp
	}
	return nil
}

// closeOutput closes the run's output spools, if they are open.
func (p *execPlan) closeOutput() {
	for i, sp := range p.output {
		if sp != nil {
			sp.close()
			p.output[i] = nil
		}
	}
}

// planExec decides an exec job up to its run. A duplicate, an ID
// conflict or a rejection is decided and recorded now, and returned as
// the Result with a nil plan; else the plan to run.
func (s *Session) planExec(e Entry, cmds map[string]*Command) (Result, *execPlan, error) {
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
func (s *Session) checkExec(e Entry, cmds map[string]*Command) (*execPlan, error) {
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
	if a, ok := cmd.allowed(op.Args); !ok {
		return nil, queue.Reject(queue.ReasonNotAllowed, "command %s does not allow the argument %q", cmd.Name, truncateArg(a))
	}
	timeout := cmd.Timeout
	if op.Timeout > 0 {
		if op.Timeout > cmd.Timeout {
			return nil, queue.Reject(queue.ReasonNotAllowed, "timeout %s is longer than command %s allows (%s)", op.Timeout, cmd.Name, cmd.Timeout)
		}
		timeout = op.Timeout
	}
	dir, err := s.execDir(cmp.Or(op.Dir, cmd.Dir))
	if err != nil {
		return nil, err
	}
	return &execPlan{
		cmd: cmd, job: job, args: append(slices.Clip(cmd.Args), op.Args...), dir: dir,
		timeout: timeout, lastSeq: e.Seq,
	}, nil
}

func truncateArg(a string) string {
	if len(a) > 80 {
		return a[:80] + "…"
	}
	return a
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
// (sameRun), whose ID has no outcome yet and is not in the run already.
// A job it does not join keeps its place in the queue.
func (s *Session) join(plan *execPlan, e Entry, cmds map[string]*Command) (bool, error) {
	if plan.job.Coalesce == "" || e.Err != nil || e.Job.Coalesce != plan.job.Coalesce {
		return false, nil
	}
	alone, err := s.checkExec(e, cmds)
	if err != nil || !plan.sameRun(alone) {
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

// sameRun reports whether plan q would run exactly what p runs: the same
// command (its program, fixed arguments, environment and limits), the
// same full argument list, the same working directory, symlinks
// resolved, and the same timeout. Only then may a job of q's stand in
// for p's run and be told its outcome.
func (p *execPlan) sameRun(q *execPlan) bool {
	return p.cmd == q.cmd && slices.Equal(p.args, q.args) && p.dir == q.dir && p.timeout == q.timeout
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
	if why := lockBusy(plan.cmd.LockFile); why != "" {
		return &DeferError{Why: why}
	}
	if err := plan.openOutput(queue.Layout{Root: s.store}.Meta()); err != nil {
		return fmt.Errorf("job %s: %w", plan.job.ID, err)
	}
	err := st.journal.StartRun(&journal.Run{
		Epoch: s.epoch, Command: plan.cmd.Name, RerunSafe: plan.cmd.RerunSafe,
		Started: time.Now().UTC(), Outcomes: plan.outs, LastSeq: plan.lastSeq,
	})
	if err != nil {
		plan.closeOutput()
		return fmt.Errorf("job %s: record its run: %w", plan.job.ID, err)
	}
	return nil
}

// finishExec records a run's outcomes. A run whose command exited with a
// busy exit code is not an outcome: its record is dropped and the job
// deferred (a *DeferError).
func (s *Session) finishExec(plan *execPlan, r *runResult) ([]Result, error) {
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.verify(); err != nil {
		return nil, err
	}
	if r.fault != nil {
		// Nothing ran: the record goes, and the job is tried again.
		if err := st.journal.EndRun(nil, 0); err != nil {
			return nil, err
		}
		return nil, &notStarted{err: fmt.Errorf("job %s: start command %s: %w", plan.job.ID, plan.cmd.Name, r.fault)}
	}
	if slices.Contains(plan.cmd.BusyExitCodes, r.exit) {
		if err := st.journal.EndRun(nil, 0); err != nil {
			return nil, err
		}
		return nil, &DeferError{Why: fmt.Sprintf("command %s exited %d, one of its busy exit codes%s", plan.cmd.Name, r.exit, lastLine(r.stderr.String()))}
	}
	status, reason, detail := r.judge(plan)
	res := make([]Result, len(plan.outs))
	now := time.Now().UTC()
	for i, o := range plan.outs {
		o.Status, o.Reason, o.Detail, o.At, o.Exec = status, reason, detail, now, r.result(plan.cmd)
		res[i] = Result{Outcome: o}
	}
	if err := st.journal.EndRun(plan.outs, plan.lastSeq); err != nil {
		return nil, fmt.Errorf("record outcomes: %w", err)
	}
	return res, nil
}

// lockBusy says why a command's own lock file is busy, or "" if it is
// free (or there is none), as lock.Holders tells it, without reading the
// file: it is the tool's, not scribe's.
func lockBusy(path string) string {
	if path == "" {
		return ""
	}
	held, pids := lock.Holders(path)
	switch {
	case !held:
		return ""
	case pids == nil:
		return fmt.Sprintf("its lock %s is held by another process", path)
	}
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return fmt.Sprintf("its lock %s is held by pid %s", path, strings.Join(s, ", "))
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

// runResult is what a command's run did.
type runResult struct {
	exit     int // -1 if it died of a signal or never started
	signal   syscall.Signal
	timedOut bool
	stopped  bool // stop closed while it ran: it was killed for that
	startErr error
	// fault is why the command could not be started for want of a
	// resource of the daemon's own (descriptors, memory, processes): it
	// did not run, and its job is retried, not decided.
	fault   error
	stdout  *capture
	stderr  *capture
	started time.Time
	took    time.Duration
}

// resourceFault reports whether err, from starting a command, says that
// the daemon ran short of something of its own, which comes back, rather
// than that the command cannot be run.
func resourceFault(err error) bool {
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.ENOMEM, unix.EAGAIN, unix.ENOSPC, unix.EIO} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// judge turns a finished run into the outcome's status, reason and detail.
func (r *runResult) judge(plan *execPlan) (queue.Status, queue.Reason, string) {
	name := plan.cmd.Name
	switch {
	case r.startErr != nil:
		return queue.StatusRejected, queue.ReasonExecFailed, fmt.Sprintf("command %s could not start: %v", name, r.startErr)
	case r.timedOut:
		return queue.StatusRejected, queue.ReasonTimeout, fmt.Sprintf("command %s overran its timeout of %s; its process group was sent SIGTERM, then SIGKILL after %s", name, plan.timeout, plan.cmd.grace())
	case r.signal != 0:
		return queue.StatusRejected, queue.ReasonExecFailed, fmt.Sprintf("command %s was killed by %s%s", name, unix.SignalName(r.signal), lastLine(r.stderr.String()))
	case r.exit != 0:
		return queue.StatusRejected, queue.ReasonExecFailed, fmt.Sprintf("command %s exited %d%s", name, r.exit, lastLine(r.stderr.String()))
	}
	return queue.StatusApplied, "", ""
}

// result is the run as the outcome shows it.
func (r *runResult) result(cmd *Command) *queue.ExecResult {
	x := &queue.ExecResult{
		Command: cmd.Name, ExitCode: r.exit, Started: r.started.UTC(), DurationMS: r.took.Milliseconds(),
		Stdout: r.stdout.String(), Stderr: r.stderr.String(), StdoutCut: r.stdout.cut(), StderrCut: r.stderr.cut(),
	}
	if r.signal != 0 {
		x.Signal = unix.SignalName(r.signal)
	}
	return x
}

// lastLine is ": " and the last non-empty line of a command's stderr, for a
// rejection's detail, or "".
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n\r\t ")
	if s == "" {
		return ""
	}
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return ": " + truncateArg(s)
}

func (c *Command) grace() time.Duration {
	if c.Grace > 0 {
		return c.Grace
	}
	return DefaultCommandGrace
}

func (c *Command) maxOutput() int {
	if c.MaxOutput > 0 {
		return c.MaxOutput
	}
	return DefaultMaxOutput
}

// spoolEvery is how often the output of a running command is read, and
// spoolHurry how soon again after a read of at least spoolBusy bytes: a
// command that writes fast is kept up with, so that what it wrote and
// was not read yet (in memory, or on disk) stays small.
const (
	spoolEvery = 50 * time.Millisecond
	spoolHurry = time.Millisecond
	spoolBusy  = 1 << 20
	spoolChunk = 16 << 20
)

// runCommand runs a plan's command with hold, the store lock, handed down
// as descriptor 3, in its own process group, its output into the plan's
// spools (which it closes), and waits for it: until it exits, its timeout
// (SIGTERM to the group, SIGKILL after the grace period) or stop closes
// (the same, for a daemon that is stopping). Once the command is over,
// whatever it left in its group is killed. started is called with the
// command's pid once it runs.
func runCommand(stop <-chan struct{}, plan *execPlan, hold *lock.Hold, store string, started func(pid int)) *runResult {
	defer plan.closeOutput()
	cmd := plan.cmd
	spools := plan.output
	r := &runResult{exit: -1, stdout: spools[0].c, stderr: spools[1].c, started: time.Now()}
	c := exec.Command(cmd.Program, plan.args...)
	c.Dir = plan.dir
	c.ExtraFiles = []*os.File{hold.File()}
	c.Env = commandEnv(os.Environ(), cmd.Env)
	c.Env = append(c.Env, "SCRIBE_STORE="+store, "SCRIBE_JOB_ID="+plan.job.ID, "SCRIBE_COMMAND="+cmd.Name)
	c.Env = append(c.Env, hold.ChildEnv(3)...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Output goes to files, not pipes: a command that outlives a killed
	// daemon must not die of SIGPIPE at its next line of output.
	c.Stdout, c.Stderr = spools[0].f, spools[1].f
	keepInheritedFromChildren()
	if err := c.Start(); err != nil {
		if resourceFault(err) {
			r.fault = err
		} else {
			r.startErr = err
		}
		return r
	}
	pgid := c.Process.Pid
	started(pgid)
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	timeout := time.NewTimer(plan.timeout)
	defer timeout.Stop()
	tick := time.NewTimer(spoolEvery)
	defer tick.Stop()
	var werr error
	for waiting := true; waiting; {
		select {
		case werr = <-exited:
			waiting = false
		case <-tick.C:
			next := spoolEvery
			if spools[0].drain()+spools[1].drain() >= spoolBusy {
				next = spoolHurry
			}
			tick.Reset(next)
		case <-timeout.C:
			r.timedOut = true
			werr = killGroup(pgid, cmd.grace(), exited)
			waiting = false
		case <-stop:
			r.stopped = true
			werr = killGroup(pgid, cmd.grace(), exited)
			waiting = false
		}
	}
	r.took = time.Since(r.started)
	_ = unix.Kill(-pgid, unix.SIGKILL) // what the command left behind in its group
	for _, sp := range spools {
		// What is left, bounded: a process that escaped the group may
		// hold the file and go on writing.
		for i := 0; i < 64 && sp.drain() > 0; i++ {
		}
	}
	var ee *exec.ExitError
	switch {
	case werr == nil:
		r.exit = 0
	case errors.As(werr, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			r.signal = ws.Signal()
		} else {
			r.exit = ws.ExitStatus()
		}
	default:
		r.startErr = werr
	}
	return r
}

// spool is a file a command writes its output to (spoolFile: a memfd on
// Linux, else an unlinked file): it goes when the last process that has
// it open does, is drained into a capture as it grows, and what was
// drained is punched out, so that what the command writes takes no more
// room than what was not drained yet (where the file can punch holes).
type spool struct {
	f   *os.File
	off int64
	c   *capture
	buf []byte
}

// makeSpoolFile is spoolFile; tests make it fail.
var makeSpoolFile = spoolFile

func newSpool(dir string, c *capture) (*spool, error) {
	f, err := makeSpoolFile(dir)
	if err != nil {
		return nil, err
	}
	return &spool{f: f, c: c, buf: make([]byte, 64<<10)}, nil
}

// diskSpool makes an unlinked file in dir for a command's output.
func diskSpool(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "exec-*.out")
	if err != nil {
		return nil, fmt.Errorf("command output: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("command output: %w", err)
	}
	return f, nil
}

// drain reads what the command wrote since the last drain, at most
// spoolChunk bytes, punches it out, and returns how many bytes that was.
// Once the capture has its start, what lies before the last bytes it
// keeps of the end is not read at all, only counted: a command that
// writes faster than the daemon reads costs neither time nor room.
func (s *spool) drain() int64 {
	from := s.off
	if s.c.headFull() {
		if fi, err := s.f.Stat(); err == nil {
			if skip := fi.Size() - int64(s.c.tailMax()) - s.off; skip > 0 {
				s.c.skip(skip)
				s.off += skip
			}
		}
	}
	for s.off-from < spoolChunk {
		n, err := s.f.ReadAt(s.buf, s.off)
		_, _ = s.c.Write(s.buf[:n])
		s.off += int64(n)
		if err != nil || n == 0 {
			break
		}
	}
	if s.off > from {
		punchHole(s.f, from, s.off-from)
	}
	return s.off - from
}

func (s *spool) close() { s.f.Close() }

// killGroup sends SIGTERM to a process group and, if its leader has not
// exited after grace, SIGKILL; it returns the leader's exit.
func killGroup(pgid int, grace time.Duration, exited <-chan error) error {
	_ = unix.Kill(-pgid, unix.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-exited:
		return err
	case <-t.C:
	}
	_ = unix.Kill(-pgid, unix.SIGKILL)
	return <-exited
}

// capture keeps the start and the end of a stream, max bytes in all, and
// counts what it cut from the middle: memory stays flat whatever the
// command writes.
type capture struct {
	head  []byte
	tail  []byte // a ring once full; next is where the oldest byte is
	next  int
	max   int
	total int64
}

func newCapture(max int) *capture { return &capture{max: max} }

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	if room := c.max/2 - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	tailMax := c.max - c.max/2
	for len(p) > 0 && tailMax > 0 {
		if len(c.tail) < tailMax {
			k := min(tailMax-len(c.tail), len(p))
			c.tail = append(c.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(c.tail[c.next:], p)
		c.next = (c.next + k) % tailMax
		p = p[k:]
	}
	return n, nil
}

func (c *capture) headFull() bool { return len(c.head) >= c.max/2 }

func (c *capture) tailMax() int { return c.max - c.max/2 }

// skip counts n bytes written after the head and not read: they and the
// end kept so far are cut, since what comes after them is the new end.
func (c *capture) skip(n int64) {
	c.total += n
	c.tail, c.next = c.tail[:0], 0
}

// String is what was kept, in order, as valid UTF-8.
func (c *capture) String() string {
	var b bytes.Buffer
	b.Write(c.head)
	b.Write(c.tail[c.next:])
	b.Write(c.tail[:c.next])
	return strings.ToValidUTF8(b.String(), "\uFFFD")
}

// cut is how many bytes were dropped from the middle.
func (c *capture) cut() int64 { return c.total - int64(len(c.head)+len(c.tail)) }

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

// checkCommands checks the allowlist and indexes it by name. A command's
// own lock may not be the store lock: the command would find it held by
// its own daemon.
func checkCommands(cmds []Command, storeLock string) (map[string]*Command, error) {
	byName := make(map[string]*Command, len(cmds))
	for i := range cmds {
		c := cmds[i]
		if err := c.Check(); err != nil {
			return nil, fmt.Errorf("exec command %s: %w", c.Name, err)
		}
		if byName[c.Name] != nil {
			return nil, fmt.Errorf("exec command %s is listed twice", c.Name)
		}
		if c.LockFile != "" && sameFile(c.LockFile, storeLock) {
			return nil, fmt.Errorf("exec command %s: its lock_file %s is the store lock; the command would find it held by its own daemon: keep the tool's lock and the store lock apart (docs/exec.md)", c.Name, c.LockFile)
		}
		c.Args, c.AllowArgs, c.BusyExitCodes, c.Env = slices.Clone(c.Args), slices.Clone(c.AllowArgs), slices.Clone(c.BusyExitCodes), slices.Clone(c.Env)
		byName[c.Name] = &c
	}
	return byName, nil
}

// sameFile reports whether two paths name one file: the same path, or the
// same device and inode.
func sameFile(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
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
	crashPoint("fetched")
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
		crashPoint("ran")
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
			crashPoint("commit")
			w.answer(msgs, entries, results)
			crashPoint("published")
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
func (w *Writer) runHeld(ctx context.Context, plan *execPlan, msgs []jetstream.Msg) (*runResult, bool) {
	// A nested hold keeps the flock while the session, and with it the
	// journal, is closed.
	hold, err := lock.Acquire(ctx, w.store, lock.Options{LockPath: w.cfg.LockPath, Mode: queue.ModeDaemon, Command: w.cfg.Command})
	if err != nil {
		plan.closeOutput()
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
	r := runCommand(ctx.Done(), plan, hold, w.store, func(pid int) {
		w.mu.Lock()
		w.running = &running{plan: plan, pid: pid, since: since}
		w.mu.Unlock()
	})
	w.mu.Lock()
	w.running = nil
	w.mu.Unlock()
	w.observeRun(plan, r)
	if r.stopped {
		return nil, false
	}
	// Take the journal back before the nested hold goes: the run record
	// is this hold's only while the hold stands.
	if err := w.acquire(ctx, msgs); err != nil {
		return nil, false
	}
	return r, true
}
