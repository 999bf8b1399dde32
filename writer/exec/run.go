package exec

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/internal/fault"
	"github.com/scribehq/scribe/writer/lock"
)

// Result is what a command's run did.
type Result struct {
	// Exit is the command's exit code: -1 if it died of a signal or never
	// started.
	Exit int
	// Signal is the signal it died of, if it did.
	Signal syscall.Signal
	// TimedOut says it overran its timeout and was killed.
	TimedOut bool
	// SentKill says its group was sent SIGKILL, its grace period over,
	// after the SIGTERM of a timeout or a stop.
	SentKill bool
	// Stopped says stop closed while it ran: it was killed for that.
	Stopped bool
	// StartErr is why the command could not be started (it is gone, not
	// executable): the job's outcome.
	StartErr error
	// Fault is why the command could not be started for want of a
	// resource of the daemon's own (descriptors, memory, processes): it
	// did not run, and its job is retried, not decided.
	Fault error
	// Started and Took are when it started and how long it ran.
	Started time.Time
	Took    time.Duration

	run    *Run
	stdout *capture
	stderr *capture
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

// Busy reports whether the command exited with one of its busy exit
// codes, and if so why, for the deferral: such a run is not an outcome.
func (r *Result) Busy() (string, bool) {
	c := r.run.Command
	if r.Fault != nil || r.StartErr != nil || !slices.Contains(c.BusyExitCodes, r.Exit) {
		return "", false
	}
	return fmt.Sprintf("command %s exited %d, one of its busy exit codes%s", c.Name, r.Exit, lastLine(r.stderr.String())), true
}

// Judge turns a finished run into its job's status, reason and detail.
func (r *Result) Judge() (queue.Status, queue.Reason, string) {
	name := r.run.Command.Name
	switch {
	case r.StartErr != nil:
		return queue.StatusRejected, queue.ReasonExecFailed, fmt.Sprintf("command %s could not start: %v", name, r.StartErr)
	case r.TimedOut:
		detail := fmt.Sprintf("command %s overran its timeout of %s; its process group was sent SIGTERM", name, r.run.Timeout)
		if r.SentKill {
			detail += fmt.Sprintf(", then SIGKILL after %s", r.run.Command.grace())
		}
		return queue.StatusRejected, queue.ReasonTimeout, detail
	case r.Signal != 0:
		return queue.StatusRejected, queue.ReasonExecFailed, fmt.Sprintf("command %s was killed by %s%s", name, unix.SignalName(r.Signal), lastLine(r.stderr.String()))
	case r.Exit != 0:
		return queue.StatusRejected, queue.ReasonExecFailed, fmt.Sprintf("command %s exited %d%s", name, r.Exit, lastLine(r.stderr.String()))
	}
	return queue.StatusApplied, "", ""
}

// Outcome is the run as its job's outcome shows it (queue.Outcome.Exec).
func (r *Result) Outcome() *queue.ExecResult {
	x := &queue.ExecResult{
		Command: r.run.Command.Name, ExitCode: r.Exit, Started: r.Started.UTC(), DurationMS: r.Took.Milliseconds(),
		Stdout: r.stdout.String(), Stderr: r.stderr.String(), StdoutCut: r.stdout.cut(), StderrCut: r.stderr.cut(),
	}
	if r.Signal != 0 {
		x.Signal = unix.SignalName(r.Signal)
	}
	return x
}

// How a command's run ended (Result.Ended), as metrics count it.
const (
	OK          = "ok"           // exited 0
	Failed      = "failed"       // exited non-zero, not a busy exit code
	Busy        = "busy"         // exited with a busy exit code: the job is deferred
	Killed      = "killed"       // died of a signal it was not sent for a timeout
	TimedOut    = "timeout"      // overran its timeout and was killed
	StartFailed = "start_failed" // could not be started
	Stopped     = "stopped"      // killed because the daemon is stopping
)

// Endings are every way a run can end (Result.Ended).
var Endings = []string{OK, Failed, Busy, Killed, TimedOut, StartFailed, Stopped}

// Ended says how the run ended: OK, Failed, Busy, Killed, TimedOut,
// StartFailed or Stopped.
func (r *Result) Ended() string {
	switch {
	case r.Stopped:
		return Stopped
	case r.StartErr != nil, r.Fault != nil:
		return StartFailed
	case r.TimedOut:
		return TimedOut
	case r.Signal != 0:
		return Killed
	case slices.Contains(r.run.Command.BusyExitCodes, r.Exit):
		return Busy
	case r.Exit != 0:
		return Failed
	}
	return OK
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

// A Run is one run of an allowlisted command, as a job asks for it.
type Run struct {
	// Command is the allowlisted command (Index).
	Command *Command
	// Args are all of its arguments: the command's own, then the job's.
	Args []string
	// Dir is its absolute working directory.
	Dir string
	// Timeout bounds it: the command's, or a job's shorter one.
	Timeout time.Duration

	// output is where its stdout and stderr go, from OpenOutput until
	// the run is over.
	output [2]*spool
}

// NewRun is a run of c with the job's arguments after the command's own.
func NewRun(c *Command, jobArgs []string, dir string, timeout time.Duration) *Run {
	return &Run{Command: c, Args: append(slices.Clip(c.Args), jobArgs...), Dir: dir, Timeout: timeout}
}

// Same reports whether q would run exactly what r runs: the same command
// (its program, fixed arguments, environment and limits), the same full
// argument list, the same working directory and the same timeout. Only
// then may a job of q's stand in for r's run and be told its outcome.
func (r *Run) Same(q *Run) bool {
	return r.Command == q.Command && slices.Equal(r.Args, q.Args) && r.Dir == q.Dir && r.Timeout == q.Timeout
}

// OpenOutput makes the files the run's stdout and stderr go to, each
// keeping what the command's max_output allows, spilling to dir where
// the kernel has no memory files. Failing is a fault of the daemon's own
// (the job is retried), never the job's outcome. Exec closes them;
// CloseOutput closes them for a run that does not go ahead.
func (r *Run) OpenOutput(dir string) error {
	for i := range r.output {
		sp, err := newSpool(dir, newCapture(r.Command.maxOutput()))
		if err != nil {
			r.CloseOutput()
			return err
		}
		r.output[i] = sp
	}
	return nil
}

// CloseOutput closes the run's output files, if they are open.
func (r *Run) CloseOutput() {
	for i, sp := range r.output {
		if sp != nil {
			sp.close()
			r.output[i] = nil
		}
	}
}

// waitLate, if set, runs before Wait is called for a started command: a
// test stands in for a daemon that is stopped or starved while its
// command runs, and so learns of its exit late.
var waitLate func()

// Exec runs the command, its output opened (OpenOutput), with hold, the
// store lock, handed down as descriptor 3 (and its variables:
// hold.ChildEnv), in its own process group, in the environment Command.Env
// describes with SCRIBE_COMMAND and env (scribe's own variables of the
// job: SCRIBE_STORE, SCRIBE_JOB_ID), and waits for it: until it exits,
// its timeout (SIGTERM to the group, SIGKILL after the grace period) or
// stop closes (the same, for a daemon that is stopping). Once the command
// is over, whatever it left in its group is killed, and the output is
// closed. started is called with the command's pid once it runs.
func (r *Run) Exec(stop <-chan struct{}, hold *lock.Hold, env []string, started func(pid int)) *Result {
	defer r.CloseOutput()
	cmd := r.Command
	spools := r.output
	res := &Result{Exit: -1, run: r, stdout: spools[0].c, stderr: spools[1].c, Started: time.Now()}
	c := osexec.Command(cmd.Program, r.Args...)
	c.Dir = r.Dir
	c.ExtraFiles = []*os.File{hold.File()}
	c.Env = commandEnv(os.Environ(), cmd.Env)
	c.Env = append(c.Env, env...)
	c.Env = append(c.Env, "SCRIBE_COMMAND="+cmd.Name)
	c.Env = append(c.Env, hold.ChildEnv(3)...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Output goes to files, not pipes: a command that outlives a killed
	// daemon must not die of SIGPIPE at its next line of output.
	c.Stdout, c.Stderr = spools[0].f, spools[1].f
	keepInheritedFromChildren()
	if err := c.Start(); err != nil {
		if resourceFault(err) {
			res.Fault = err
		} else {
			res.StartErr = err
		}
		return res
	}
	pgid := c.Process.Pid
	started(pgid)
	exited := make(chan error, 1)
	go func() {
		if waitLate != nil {
			waitLate()
		}
		exited <- c.Wait()
	}()
	timeout := time.NewTimer(r.Timeout)
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
			waiting = false
			// The timer may fire after the command exited and before Wait
			// says so: the daemon was stopped (SIGSTOP) or starved while
			// the command ran. Such a command did not overrun.
			if hasExited(pgid) {
				werr = <-exited
				break
			}
			res.TimedOut = true
			res.SentKill, werr = killGroup(pgid, cmd.grace(), exited)
		case <-stop:
			waiting = false
			if hasExited(pgid) { // it is over: its own outcome stands
				werr = <-exited
				break
			}
			res.Stopped = true
			res.SentKill, werr = killGroup(pgid, cmd.grace(), exited)
		}
	}
	res.Took = time.Since(res.Started)
	_ = unix.Kill(-pgid, unix.SIGKILL) // what the command left behind in its group
	for _, sp := range spools {
		// What is left, bounded: a process that escaped the group may
		// hold the file and go on writing.
		for i := 0; i < 64 && sp.drain() > 0; i++ {
		}
	}
	var ee *osexec.ExitError
	switch {
	case werr == nil:
		res.Exit = 0
	case errors.As(werr, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			res.Signal = ws.Signal()
		} else {
			res.Exit = ws.ExitStatus()
		}
	default:
		res.StartErr = werr
	}
	return res
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

func newSpool(dir string, c *capture) (*spool, error) {
	if hook := fault.SpoolFault; hook != nil {
		if err := hook(); err != nil {
			return nil, err
		}
	}
	f, err := spoolFile(dir)
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
// exited after grace, SIGKILL; it returns whether SIGKILL was sent, and
// the leader's exit.
func killGroup(pgid int, grace time.Duration, exited <-chan error) (bool, error) {
	_ = unix.Kill(-pgid, unix.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-exited:
		return false, err
	case <-t.C:
	}
	_ = unix.Kill(-pgid, unix.SIGKILL)
	return true, <-exited
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

func truncateArg(a string) string {
	if len(a) > 80 {
		return a[:80] + "…"
	}
	return a
}
