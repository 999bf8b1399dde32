package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// StatusCommand shows a store's daemon and lock, or one job's outcome.
type StatusCommand struct{ *Main }

// Run parses flags and prints the status. With --json, stdout holds JSON
// whatever happens (see guardJSON).
func (c *StatusCommand) Run(ctx context.Context, args []string) error {
	return c.guardJSON(args, func(m *Main) error { return (&StatusCommand{m}).run(ctx, args) })
}

func (c *StatusCommand) run(ctx context.Context, args []string) error {
	fs := c.newFlagSet("status", "--store DIR [--json] [JOB_ID]\n"+
		"       scribe status --nats-url URL --store-id ID [--json] [JOB_ID]\n\n"+remoteUsage)
	store := storeFlag(fs)
	var nf natsFlags
	nf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON (the same keys with and without a daemon; docs/cli.md)")
	lockFile := fs.String("lock-file", "", "store lock `file` (default: the daemon's, else <store>/.scribe/lock)")
	dead := fs.Bool("dead", false, "list the dead letters: queued messages without a readable job ID")
	if err := parse(fs, args); err != nil {
		return err
	}
	t, err := nf.resolve(*store)
	if err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usageError("want at most one JOB_ID")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := t.open(ctx, client.WithLockFile(*lockFile))
	if err != nil {
		return err
	}
	defer cl.Close()
	if *dead {
		return c.deadLetters(ctx, cl, *asJSON)
	}
	if fs.NArg() == 1 {
		return c.job(ctx, cl, fs.Arg(0), *asJSON)
	}
	if t.remote != nil && cl.Queued() {
		return c.remoteStore(ctx, cl, *asJSON)
	}
	return c.store(ctx, cl, *store, *lockFile, *asJSON)
}

// remoteStore prints the status of a store whose queue is remote, as its
// daemon reports it, wherever it runs: the store lock too is as the
// daemon tells it, not probed here (the store may be on another host).
func (c *StatusCommand) remoteStore(ctx context.Context, cl *client.Client, asJSON bool) error {
	r, err := cl.Report(ctx)
	if err != nil {
		return err
	}
	st := storeStatus{Store: r.Store, StoreID: cl.StoreID()}
	st.fromReport(r)
	st.Lock = lockJSON{Path: r.LockFile, State: "free"}
	if h := r.Holder; h != nil {
		st.Lock = lockJSON{Path: r.LockFile, State: "held", PID: &h.PID, Host: &h.Host, Mode: &h.Mode, Command: &h.Command, Since: &h.Since, Epoch: &h.Epoch}
	}
	if st.Interrupted != nil && st.Interrupted.Stuck != "" && st.LastError == nil {
		st.LastError = ptr(st.Interrupted.Stuck)
	}
	if asJSON {
		return writeJSON(c.Stdout, st)
	}
	c.printStatus(&st)
	return nil
}

// lookupJSON is a job's look-up as status and wait print it with --json
// when the job has no outcome (yet).
type lookupJSON struct {
	ID string `json:"id"`
	*queue.Lookup
	// Error is why the command failed (a wait that ran out); it hides
	// the look-up's own, which is never set in a look-up that answered.
	Error string `json:"error,omitempty"`
}

func (c *StatusCommand) job(ctx context.Context, cl *client.Client, id string, asJSON bool) error {
	l, err := cl.Locate(ctx, id)
	if err != nil {
		return err
	}
	if out := l.Outcome; l.Found && out != nil {
		if asJSON {
			return writeJSON(c.Stdout, out)
		}
		printOutcome(c.Stdout, out)
		return nil
	}
	err = fmt.Errorf("job %s: %s", id, describeLookup(l))
	if asJSON {
		_ = writeJSON(c.Stdout, lookupJSON{ID: id, Lookup: l, Error: err.Error()})
	}
	return err
}

// printOutcome prints a recorded outcome for people.
func printOutcome(w io.Writer, out *queue.Outcome) {
	fmt.Fprintf(w, "job %s: %s", out.ID, out.Status)
	if !out.Applied() {
		fmt.Fprintf(w, " (%s): %s", out.Reason, out.Detail)
	}
	fmt.Fprintf(w, "\n  by %s, epoch %d, seq %d, at %s\n", out.Mode, out.Epoch, out.Seq, out.At.Format(time.RFC3339Nano))
	if out.CoalescedInto != "" {
		fmt.Fprintf(w, "  joined the run of job %s\n", out.CoalescedInto)
	}
	if x := out.Exec; x != nil {
		fmt.Fprintf(w, "  command %s: exit %d", x.Command, x.ExitCode)
		if x.Signal != "" {
			fmt.Fprintf(w, " (%s)", x.Signal)
		}
		fmt.Fprintf(w, ", started %s, ran %s; --json for its output\n", x.Started.Format(time.RFC3339), time.Duration(x.DurationMS)*time.Millisecond)
	}
}

// describeLookup says where a job without an outcome stands.
func describeLookup(l *queue.Lookup) string {
	var s string
	switch l.JobState() {
	case queue.StateQueued:
		s = fmt.Sprintf("queued (position %d of %d), no outcome yet", l.Position, l.Queued)
	case queue.StateInHand:
		s = fmt.Sprintf("in hand (position %d of %d), no outcome yet", l.Position, l.Queued)
	default:
		s = "unknown: no outcome recorded, and not queued as far as scribe can tell"
		if l.Detail != "" {
			s = "unknown: " + l.Detail
		}
		if !l.PrunedBefore.IsZero() {
			s += fmt.Sprintf("; outcomes recorded before %s may have been pruned", l.PrunedBefore.Format(time.RFC3339))
		}
		return s
	}
	if l.Detail != "" {
		s += ": " + l.Detail
	}
	return s
}

func (c *StatusCommand) deadLetters(ctx context.Context, cl *client.Client, asJSON bool) error {
	d, err := cl.DeadLetters(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(c.Stdout, d)
	}
	fmt.Fprintf(c.Stdout, "%d dead letters", d.Total)
	if len(d.Letters) < d.Total {
		fmt.Fprintf(c.Stdout, " (the newest %d)", len(d.Letters))
	}
	fmt.Fprintln(c.Stdout)
	for _, l := range d.Letters {
		fmt.Fprintf(c.Stdout, "  seq %d at %s: %s: %s\n    %q\n", l.Seq, l.At.Format(time.RFC3339), l.Reason, l.Detail, truncateBytes(l.Data, 120))
	}
	return nil
}

func truncateBytes(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// storeStatus is what `status --json` prints, with and without a daemon:
// every key is always present, null where it does not apply or is not
// known (docs/cli.md documents it).
type storeStatus struct {
	Store   string      `json:"store"`
	StoreID string      `json:"store_id"`
	Daemon  *daemonJSON `json:"daemon"`
	Lock    lockJSON    `json:"lock"`
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
	LastError *string     `json:"last_error"`
	Waiting   *string     `json:"waiting"`
	Fault     *string     `json:"fault"`
	Running   *string     `json:"running"`
	Deferred  *string     `json:"deferred"`
	Journal   journalJSON `json:"journal"`
	// Interrupted is a batch a holder was interrupted in and that the
	// next holder must finish first (with why it failed, if it did).
	Interrupted *queue.Interrupted `json:"interrupted"`
	// Stranded says why jobs may wait in a queue no daemon serves.
	Stranded *string `json:"stranded"`
}

// daemonJSON is the daemon serving the store.
type daemonJSON struct {
	PID      int       `json:"pid"`
	Version  string    `json:"version"`
	Started  time.Time `json:"started"`
	UptimeMS int64     `json:"uptime_ms"`
	// Holding says the daemon's writer holds the store lock now; Epoch
	// is the epoch of its current or last hold.
	Holding bool   `json:"holding"`
	Epoch   uint64 `json:"epoch"`
}

// lockJSON is the store lock as the kernel tells it (lock.ProbeLock).
type lockJSON struct {
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

// journalJSON is the store's journal.
type journalJSON struct {
	Path     string  `json:"path"`
	Bytes    int64   `json:"bytes"`
	Outcomes int     `json:"outcomes"`
	Applied  uint64  `json:"applied"`
	Rejected uint64  `json:"rejected"`
	Epoch    uint64  `json:"epoch"`
	LastSeq  uint64  `json:"last_seq"`
	Error    *string `json:"error"` // why it could not be read now (the numbers are then 0)
}

func (c *StatusCommand) store(ctx context.Context, cl *client.Client, store, lockFile string, asJSON bool) error {
	real, err := queue.ResolveStore(store)
	if err != nil {
		return err
	}
	layout := queue.Layout{Root: real}
	st := storeStatus{Store: real, StoreID: cl.StoreID()}
	if d := cl.Daemon(); d != nil {
		r, err := cl.Report(ctx)
		if err != nil {
			return err
		}
		st.fromReport(r)
		if lockFile == "" {
			lockFile = r.LockFile
		}
	} else {
		if s, err := queue.ReadStranded(real); err != nil {
			st.Stranded = ptr(err.Error())
		} else if s != nil {
			st.Stranded = ptr(s.Why)
		}
		if st.Journal, st.Interrupted, err = readJournal(layout.Journal()); err != nil {
			return err
		}
		if st.Journal.Error == nil {
			st.Applied, st.Rejected = &st.Journal.Applied, &st.Journal.Rejected
		}
	}
	if st.Interrupted != nil && st.Interrupted.Stuck != "" && st.LastError == nil {
		st.LastError = ptr(st.Interrupted.Stuck)
	}
	if lockFile == "" {
		lockFile = layout.Lock()
	}
	st.Lock = probeLock(lockFile)
	if asJSON {
		return writeJSON(c.Stdout, st)
	}
	c.printStatus(&st)
	return nil
}

// fromReport fills in what the daemon's status report tells.
func (st *storeStatus) fromReport(r *queue.StatusReport) {
	st.Daemon = &daemonJSON{PID: r.PID, Version: r.Version, Started: r.Started, UptimeMS: time.Since(r.Started).Milliseconds(), Holding: r.Holding, Epoch: r.Epoch}
	st.Queued, st.InFlight, st.Applied, st.Rejected, st.DeadLetters = &r.Queued, &r.InFlight, &r.Applied, &r.Rejected, &r.Dead
	st.Waiting, st.Fault, st.Running, st.Deferred = optional(r.Waiting), optional(r.Fault), optional(r.Running), optional(r.Deferred)
	st.LastError = optional(r.Fault)
	st.Interrupted = r.Interrupted
	if j := r.Journal; j != nil {
		st.Journal = journalJSON{Path: j.Path, Bytes: j.Bytes, Outcomes: j.Outcomes, Applied: j.Applied, Rejected: j.Rejected, Epoch: j.Epoch, LastSeq: j.LastSeq, Error: optional(j.Error)}
	} else { // a daemon that does not report its journal
		st.Journal = journalJSON{Path: journal.Path(r.Store), Error: ptr("the daemon does not report its journal")}
	}
}

// readJournal reads the journal without the store lock: its numbers and
// any interrupted batch. A journal that does not exist yet is empty; one
// that is busy or damaged is shown with its error. A journal that fails
// the rules of .scribe is the error.
func readJournal(path string) (journalJSON, *queue.Interrupted, error) {
	jj := journalJSON{Path: path}
	j, err := journal.OpenReadOnly(path, time.Second)
	if errors.Is(err, fs.ErrNotExist) {
		return jj, nil, nil // nothing was ever applied to this store
	}
	if errors.Is(err, queue.ErrInsecure) {
		return jj, nil, err // not this user's journal: nothing of it is shown
	}
	if err != nil {
		jj.Error = ptr(fmt.Sprintf("journal busy (a writer has it open): %v", err))
		return jj, nil, nil
	}
	defer j.Close()
	info, err := j.Info()
	if err != nil {
		jj.Error = ptr(err.Error())
		return jj, nil, nil
	}
	jj = journalJSON{Path: path, Bytes: info.Bytes, Outcomes: info.Outcomes, Applied: info.Applied, Rejected: info.Rejected, Epoch: info.Epoch, LastSeq: info.LastSeq}
	in, err := j.Interrupted()
	if err != nil {
		jj.Error = ptr(err.Error())
	}
	return jj, in, nil
}

// probeLock is the store lock as the kernel tells it.
func probeLock(path string) lockJSON {
	l := lockJSON{Path: path, State: "free"}
	held, pids, h := lock.ProbeLock(path)
	if !held {
		return l
	}
	l.State = "held"
	switch {
	case h != nil:
		l.PID, l.Host, l.Mode, l.Command, l.Since, l.Epoch = &h.PID, &h.Host, &h.Mode, &h.Command, &h.Since, &h.Epoch
	case len(pids) > 0:
		l.PID = &pids[0]
	}
	return l
}

// printReport prints a daemon's status report for people, the store
// lock as the report tells it (its file probed, if it names one).
func (c *StatusCommand) printReport(r *queue.StatusReport) {
	st := storeStatus{Store: r.Store, StoreID: r.StoreID}
	st.fromReport(r)
	switch h := r.Holder; {
	case r.LockFile != "":
		st.Lock = probeLock(r.LockFile)
	case h != nil:
		st.Lock = lockJSON{State: "held", PID: &h.PID, Host: &h.Host, Mode: &h.Mode, Command: &h.Command, Since: &h.Since, Epoch: &h.Epoch}
	default:
		st.Lock = lockJSON{State: "free"}
	}
	c.printStatus(&st)
}

// printStatus prints the store's status for people.
func (c *StatusCommand) printStatus(st *storeStatus) {
	w := c.Stdout
	fmt.Fprintf(w, "store %s (%s)\n", st.Store, st.StoreID)
	if d := st.Daemon; d != nil {
		fmt.Fprintf(w, "daemon pid %d, version %s, up %s\n", d.PID, d.Version, (time.Duration(d.UptimeMS) * time.Millisecond).Round(time.Second))
		fmt.Fprintf(w, "queued %d, in flight %d, applied %d, rejected %d since start; %d dead letters\n",
			*st.Queued, *st.InFlight, *st.Applied, *st.Rejected, *st.DeadLetters)
	} else {
		fmt.Fprintln(w, "no daemon")
	}
	printLock(w, st.Lock)
	if j := st.Journal; j.Error != nil {
		fmt.Fprintf(w, "journal %s: %s\n", j.Path, *j.Error)
	} else {
		fmt.Fprintf(w, "journal: %d outcomes (%d applied, %d rejected), epoch %d, last queue seq %d (%d bytes)\n", j.Outcomes, j.Applied, j.Rejected, j.Epoch, j.LastSeq, j.Bytes)
	}
	for _, line := range []struct {
		label string
		text  *string
	}{
		{"writer waiting", st.Waiting},
		{"writer failing, retrying", st.Fault},
		{"running", st.Running},   // an exec job's command, now
		{"deferred", st.Deferred}, // why the next job waits (exec: its lock, a busy exit)
	} {
		if line.text != nil {
			fmt.Fprintf(w, "%s: %s\n", line.label, *line.text)
		}
	}
	if in := st.Interrupted; in != nil {
		fmt.Fprintf(w, "interrupted batch: %d jobs, %d files, to be finished by the next holder\n", in.Jobs, in.Files)
		if in.Stuck != "" {
			fmt.Fprintf(w, "stuck: %s\n%s\n", in.Stuck, stuckHint(writer.ErrStuck))
		}
	}
	if st.Stranded != nil {
		fmt.Fprintf(w, "jobs may be waiting in the queue (%s): start scribe serve to apply them\n", *st.Stranded)
	}
}

// printLock prints the store lock's line.
func printLock(w io.Writer, l lockJSON) {
	switch {
	case l.State == "free":
		fmt.Fprintln(w, "store lock: free")
	case l.Mode != nil:
		h := &queue.Holder{PID: *l.PID, Host: *l.Host, Mode: *l.Mode, Command: *l.Command}
		fmt.Fprintf(w, "store lock: held by %s for %s, epoch %d\n",
			lock.DescribeHolder(h), time.Since(*l.Since).Round(time.Millisecond), *l.Epoch)
	case l.PID != nil:
		fmt.Fprintf(w, "store lock: held by pid %d, a process that wrote no identity (not scribe, or flock(1))\n", *l.PID)
	default:
		fmt.Fprintln(w, "store lock: held by a process that wrote no identity (not scribe, or flock(1))")
	}
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
