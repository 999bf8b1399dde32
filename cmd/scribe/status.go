package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
)

// StatusCommand shows a store's daemon and lock, or one job's outcome.
type StatusCommand struct{ *Main }

// Run parses flags and prints the status.
func (c *StatusCommand) Run(ctx context.Context, args []string) error {
	fs := c.newFlagSet("status", "--store DIR [--json] [JOB_ID]")
	store := storeFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	lockFile := fs.String("lock-file", "", "store lock `file` (default <store>/.scribe/lock)")
	dead := fs.Bool("dead", false, "list the dead letters: queued messages without a readable job ID")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := requireStore(*store); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usageError("want at most one JOB_ID")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := client.Open(ctx, *store, client.WithLockFile(*lockFile))
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
	return c.store(ctx, cl, *store, *lockFile, *asJSON)
}

func (c *StatusCommand) job(ctx context.Context, cl *client.Client, id string, asJSON bool) error {
	l, err := cl.Status(ctx, id)
	if err != nil {
		return err
	}
	out := l.Outcome
	if out == nil {
		if asJSON {
			_ = writeJSON(c.Stdout, l)
		}
		if !l.PrunedBefore.IsZero() {
			return fmt.Errorf("job %s: no outcome recorded: still queued, unknown, or recorded before %s and pruned", id, l.PrunedBefore.Format(time.RFC3339))
		}
		return fmt.Errorf("job %s: no outcome recorded (unknown, or still queued)", id)
	}
	if asJSON {
		return writeJSON(c.Stdout, out)
	}
	fmt.Fprintf(c.Stdout, "job %s: %s", out.ID, out.Status)
	if !out.Applied() {
		fmt.Fprintf(c.Stdout, " (%s): %s", out.Reason, out.Detail)
	}
	fmt.Fprintf(c.Stdout, "\n  by %s, epoch %d, seq %d, at %s\n", out.Mode, out.Epoch, out.Seq, out.At.Format(time.RFC3339Nano))
	if out.CoalescedInto != "" {
		fmt.Fprintf(c.Stdout, "  joined the run of job %s\n", out.CoalescedInto)
	}
	if x := out.Exec; x != nil {
		fmt.Fprintf(c.Stdout, "  command %s: exit %d", x.Command, x.ExitCode)
		if x.Signal != "" {
			fmt.Fprintf(c.Stdout, " (%s)", x.Signal)
		}
		fmt.Fprintf(c.Stdout, ", started %s, ran %s; --json for its output\n", x.Started.Format(time.RFC3339), time.Duration(x.DurationMS)*time.Millisecond)
	}
	return nil
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

// storeStatus is what `status` reports without a daemon.
type storeStatus struct {
	Store   string        `json:"store"`
	StoreID string        `json:"store_id"`
	Daemon  bool          `json:"daemon"`
	Holder  *queue.Holder `json:"holder,omitempty"`
	Epoch   uint64        `json:"epoch"`
	LastSeq uint64        `json:"last_seq"`
	// Stranded says why jobs may wait in a queue no daemon serves.
	Stranded string `json:"stranded,omitempty"`
	// Interrupted is a batch a holder was interrupted in and that the
	// next holder must finish first (with why it failed, if it did).
	Interrupted *writer.Interrupted `json:"interrupted,omitempty"`
	Note        string              `json:"note,omitempty"`
}

func (c *StatusCommand) store(ctx context.Context, cl *client.Client, store, lockFile string, asJSON bool) error {
	if cl.Daemon() != nil {
		r, err := cl.Report(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(c.Stdout, r)
		}
		c.printReport(r)
		return nil
	}
	real, err := queue.ResolveStore(store)
	if err != nil {
		return err
	}
	layout := queue.Layout{Root: real}
	st := storeStatus{Store: real, StoreID: cl.StoreID()}
	if s, err := queue.ReadStranded(real); err != nil {
		st.Stranded = err.Error()
	} else if s != nil {
		st.Stranded = s.Why
	}
	if lockFile == "" {
		lockFile = layout.Lock()
	}
	st.Holder, _ = writer.ReadHolder(lockFile)
	if j, err := writer.OpenJournalReadOnly(layout.Journal(), time.Second); err == nil {
		st.Epoch, st.LastSeq, _ = j.Meta()
		st.Interrupted, _ = j.Interrupted()
		j.Close()
	} else if !errors.Is(err, fs.ErrNotExist) {
		st.Note = "journal busy: " + err.Error()
	}
	if asJSON {
		return writeJSON(c.Stdout, st)
	}
	fmt.Fprintf(c.Stdout, "store %s (%s)\nno daemon\nepoch %d, last queue seq %d\n", st.Store, st.StoreID, st.Epoch, st.LastSeq)
	printHolder(c, st.Holder)
	if in := st.Interrupted; in != nil {
		fmt.Fprintf(c.Stdout, "interrupted batch: %d jobs, %d files, to be finished by the next holder\n", in.Jobs, in.Files)
		if in.Stuck != "" {
			fmt.Fprintf(c.Stdout, "stuck: %s\n%s\n", in.Stuck, stuckHint(writer.ErrStuck))
		}
	}
	if st.Stranded != "" {
		fmt.Fprintf(c.Stdout, "jobs may be waiting in the queue (%s): start scribe serve to apply them\n", st.Stranded)
	}
	if st.Note != "" {
		fmt.Fprintln(c.Stdout, st.Note)
	}
	return nil
}

// printReport prints the daemon's status report for people.
func (c *StatusCommand) printReport(r *queue.StatusReport) {
	fmt.Fprintf(c.Stdout, "store %s (%s)\ndaemon pid %d, version %s, up %s\nqueued %d, applied %d, rejected %d since start; %d dead letters\n",
		r.Store, r.StoreID, r.PID, r.Version, time.Since(r.Started).Round(time.Second), r.Queued, r.Applied, r.Rejected, r.Dead)
	printHolder(c, r.Holder)
	for _, line := range []struct{ label, text string }{
		{"writer waiting", r.Waiting},
		{"writer failing, retrying", r.Fault},
		{"running", r.Running},   // an exec job's command, now
		{"deferred", r.Deferred}, // why the next job waits (exec: its lock, a busy exit)
	} {
		if line.text != "" {
			fmt.Fprintf(c.Stdout, "%s: %s\n", line.label, line.text)
		}
	}
}

func printHolder(c *StatusCommand, h *queue.Holder) {
	if h == nil {
		fmt.Fprintln(c.Stdout, "store lock: free, or held by a process that did not say who it is")
		return
	}
	fmt.Fprintf(c.Stdout, "store lock: held by pid %d on %s (%s: %s) for %s, epoch %d\n",
		h.PID, h.Host, h.Mode, h.Command, time.Since(h.Since).Round(time.Millisecond), h.Epoch)
}
