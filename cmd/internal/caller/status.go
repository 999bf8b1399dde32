package caller

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/lock"
)

// status is `scribe status`, on the command line's streams.
type status struct{ *cli.Main }

// lookupTimeout bounds a look-up: status, jobs.
const lookupTimeout = 10 * time.Second

// Status is `scribe status`: a store's daemon and lock, one job's
// outcome, or the dead letters.
func Status() cli.Command {
	return cli.Command{
		Name: "status",
		Forms: []cli.Form{
			{Args: "--store DIR [--json] [JOB_ID]", Summary: "daemon status, or a job's outcome"},
			{Args: "--store DIR --dead [--json]", Summary: "the daemon's dead letters"},
			{Args: "--nats-url URL --store-id ID [JOB_ID]", Summary: "… of a store whose queue is remote"},
		},
		Help: cli.RemoteHelp,
		JSON: true,
		Setup: func(m *cli.Main, fs *cli.FlagSet) func(context.Context, []string) error {
			store := fs.Store()
			remote := fs.Remote()
			asJSON := fs.JSON("the status (the same keys with and without a daemon; docs/cli.md)")
			lockFile := fs.LockFile()
			dead := fs.Bool("dead", false, "list the dead letters: queued messages without a readable job ID")
			c := &status{m}
			return func(ctx context.Context, args []string) error {
				t, err := remote.Resolve(*store)
				if err != nil {
					return err
				}
				if len(args) > 1 {
					return cli.Usagef("want at most one JOB_ID")
				}
				locks, err := lockFile.Options(m, t.Store)
				if err != nil {
					return err
				}
				return c.run(ctx, t, locks, *dead, *asJSON, args)
			}
		},
	}
}

func (c *status) run(ctx context.Context, t cli.Target, locks []client.Option, dead, asJSON bool, args []string) error {
	if len(args) == 1 {
		if _, err := jobIDArg(args); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	cl, err := t.Open(ctx, locks...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if dead {
		return c.deadLetters(ctx, cl, asJSON)
	}
	if len(args) == 1 {
		return c.job(ctx, cl, args[0], asJSON)
	}
	st, err := cl.StoreStatus(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return cli.WriteJSON(c.Stdout, st)
	}
	c.printStatus(st)
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

func (c *status) job(ctx context.Context, cl *client.Client, id string, asJSON bool) error {
	l, err := cl.Locate(ctx, id)
	if err != nil {
		return err
	}
	if out := l.Outcome; l.Found && out != nil {
		if asJSON {
			return cli.WriteJSON(c.Stdout, out)
		}
		printOutcome(c.Stdout, out)
		return nil
	}
	err = fmt.Errorf("job %s: %s", id, describeLookup(l))
	if asJSON {
		_ = cli.WriteJSON(c.Stdout, lookupJSON{ID: id, Lookup: l, Error: err.Error()})
	}
	return err
}

// printOutcome prints a recorded outcome for people.
func printOutcome(w io.Writer, out *queue.Outcome) {
	fmt.Fprintf(w, "job %s: %s", out.ID, out.Status)
	if !out.Applied() {
		fmt.Fprintf(w, " (%s): %s", out.Reason, out.Detail)
	}
	seq := ""
	if out.Seq > 0 { // a direct write's job never was in the queue
		seq = fmt.Sprintf(", seq %d", out.Seq)
	}
	fmt.Fprintf(w, "\n  by %s, epoch %d%s, at %s\n", out.Mode, out.Epoch, seq, out.At.Format(time.RFC3339Nano))
	if out.CoalescedInto != "" {
		fmt.Fprintf(w, "  joined the run of job %s\n", out.CoalescedInto)
	}
	if x := out.Exec; x != nil {
		fmt.Fprintf(w, "  command %s: exit %d", x.Command, x.ExitCode)
		if x.Signal != "" {
			fmt.Fprintf(w, " (%s)", x.Signal)
		}
		ran := fmt.Sprintf("ran %s", time.Duration(x.DurationMS)*time.Millisecond)
		if out.Reason == queue.ReasonInterrupted {
			ran = "its end not seen" // the holder that recorded it came after
		}
		fmt.Fprintf(w, ", started %s, %s; --json for its output\n", x.Started.Format(time.RFC3339), ran)
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

func (c *status) deadLetters(ctx context.Context, cl *client.Client, asJSON bool) error {
	d, err := cl.DeadLetters(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return cli.WriteJSON(c.Stdout, d)
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

// printStatus prints the store's status for people.
func (c *status) printStatus(st *client.StoreStatus) {
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
			fmt.Fprintf(w, "stuck: %s\n%s\n", in.Stuck, cli.StuckHint(writer.ErrStuck))
		}
	}
	if st.Stranded != nil {
		fmt.Fprintf(w, "jobs may be waiting in the queue (%s): start scribe serve to apply them\n", *st.Stranded)
	}
}

// printLock prints the store lock's line.
func printLock(w io.Writer, l client.LockStatus) {
	switch {
	case l.State == client.LockFree:
		fmt.Fprintln(w, "store lock: free")
	case l.Command != nil:
		h := &queue.Holder{PID: *l.PID, Host: *l.Host, Command: *l.Command}
		epoch := "" // a tool's own identity has none
		if l.Mode != nil {
			h.Mode = *l.Mode
		}
		if l.Epoch != nil && *l.Epoch > 0 {
			epoch = fmt.Sprintf(", epoch %d", *l.Epoch)
		}
		fmt.Fprintf(w, "store lock: held by %s for %s%s\n",
			lock.DescribeHolder(h), time.Since(*l.Since).Round(time.Millisecond), epoch)
	case l.PID != nil:
		fmt.Fprintf(w, "store lock: held by pid %d, %s\n", *l.PID, noIdentity)
	default:
		fmt.Fprintln(w, "store lock: held by a process", noIdentity)
	}
}

// noIdentity says who holds the store lock without an identity of its own:
// the lock file names no holder, or one that is gone while the lock is
// held through a descriptor it handed down.
const noIdentity = "which wrote no identity: a program other than scribe (flock(1)), or a command a scribe holder started (an exec command, scribe lock's) that outlived it"
