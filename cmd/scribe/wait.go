package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// WaitCommand waits for a job's outcome.
type WaitCommand struct{ *Main }

// Run parses flags, waits and prints the outcome as `status JOB_ID` does.
// With --json, stdout holds JSON whatever happens (see guardJSON).
func (c *WaitCommand) Run(ctx context.Context, args []string) error {
	return c.guardJSON(args, func(m *Main) error { return (&WaitCommand{m}).run(ctx, args) })
}

func (c *WaitCommand) run(sig context.Context, args []string) error {
	fs := c.newFlagSet("wait", "--store DIR [--timeout DUR] [--json] JOB_ID\n\n"+
		"Waits until the job's outcome is recorded and prints it as `scribe status JOB_ID` does: exit 0 applied,\n"+
		"1 rejected, 75 when --timeout runs out (the job may still be applied), 130 interrupted. Without a\n"+
		"daemon it reads the journal, and turns to a daemon that starts meanwhile.\n"+remoteUsage)
	store := storeFlag(fs)
	var nf natsFlags
	nf.register(fs)
	timeout := fs.Duration("timeout", 0, "give up after `DUR` (exit 75); 0 waits without bound")
	asJSON := fs.Bool("json", false, "print the outcome as JSON (or, if there is none, the job's look-up and an error)")
	lockFile := fs.String("lock-file", "", "store lock `file` (default: the daemon's, else <store>/.scribe/lock)")
	if err := parse(fs, args); err != nil {
		return err
	}
	t, err := nf.resolve(*store)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("want one JOB_ID")
	}
	if *timeout < 0 {
		return usageError("--timeout %s: want 0 (no bound) or more", *timeout)
	}
	id := fs.Arg(0)
	if !queue.ValidID(id) {
		return usageError("job id %q is not valid: want 1-%d characters of [A-Za-z0-9_-]", id, queue.MaxIDLen)
	}
	ctx := sig
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(sig, *timeout)
		defer cancel()
	}
	cl, err := t.open(ctx, client.WithLockFile(*lockFile))
	if err != nil {
		if ctx.Err() != nil {
			return c.notDecided(sig, nil, t, id, *asJSON)
		}
		return err
	}
	defer cl.Close()
	l, err := cl.Wait(ctx, id)
	if err != nil {
		if !errors.Is(err, client.ErrNotDecided) {
			return err
		}
		return c.notDecided(sig, cl, t, id, *asJSON)
	}
	out := l.Outcome
	if *asJSON {
		if err := writeJSON(c.Stdout, out); err != nil {
			return err
		}
	} else {
		printOutcome(c.Stdout, out)
	}
	if !out.Applied() {
		return &exitError{code: exitRejected, err: fmt.Errorf("job %s %w", out.ID, out.Err())}
	}
	return nil
}

// notDecided reports a wait that ended before the outcome was known: the
// timeout ran out (exit 75) or a signal came (sig ended: exit 130). It
// says where the job stands, if it can still ask (cl not nil).
func (c *WaitCommand) notDecided(sig context.Context, cl *client.Client, t target, id string, asJSON bool) error {
	var l *queue.Lookup
	if cl != nil {
		// A moment more to say where the job stands: not after a signal,
		// which asks to stop now.
		if sig.Err() == nil {
			lctx, cancel := context.WithTimeout(context.WithoutCancel(sig), 2*time.Second)
			l, _ = cl.Locate(lctx, id)
			cancel()
		}
	}
	where := "its state is not known"
	if l != nil {
		where = describeLookup(l)
	}
	if l != nil && l.Found && l.Outcome != nil {
		where = "its outcome was recorded just now: " + string(l.Outcome.Status)
	}
	code, what := exitBusy, fmt.Sprintf("%s: job %s: %s", errWaitTimeout, id, where)
	if sig.Err() != nil {
		code, what = exitInterrupted, fmt.Sprintf("interrupted while waiting for job %s", id)
	}
	msg := fmt.Errorf("%s; it may still be applied: ask with scribe status %s %s", what, t.ref(), id)
	if asJSON {
		if l == nil {
			l = &queue.Lookup{} // not asked: no state to tell
		}
		_ = writeJSON(c.Stdout, lookupJSON{ID: id, Lookup: l, Error: msg.Error()})
	}
	return &exitError{code: code, err: msg}
}
