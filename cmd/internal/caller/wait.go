package caller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
)

// waiter is `scribe wait`, on the command line's streams.
type waiter struct{ *cli.Main }

// Wait is `scribe wait`: a job's outcome, once recorded, printed as
// `scribe status JOB_ID` prints it.
func Wait() cli.Command {
	return cli.Command{
		Name:  "wait",
		Forms: []cli.Form{{Args: "--store DIR [--timeout DUR] JOB_ID", Summary: "wait for a job's outcome"}},
		Help: "Waits until the job's outcome is recorded and prints it as `scribe status JOB_ID` does: exit 0 applied,\n" +
			"1 rejected, 75 when --timeout runs out (the job may still be applied), 130 interrupted. Without a\n" +
			"daemon it reads the journal, and turns to a daemon that starts meanwhile.\n" + cli.RemoteHelp,
		JSON: true,
		Setup: func(m *cli.Main, fs *cli.FlagSet) func(context.Context, []string) error {
			store := fs.Store()
			remote := fs.Remote()
			timeout := fs.Duration("timeout", 0, "give up after `DUR` (exit 75); 0 waits without bound")
			asJSON := fs.JSON("the outcome (or, if there is none, the job's look-up and an error)")
			lockFile := fs.LockFile()
			c := &waiter{m}
			return func(ctx context.Context, args []string) error {
				t, err := remote.Resolve(*store)
				if err != nil {
					return err
				}
				locks, err := lockFile.Options(m, t.Store)
				if err != nil {
					return err
				}
				return c.run(ctx, t, *timeout, locks, *asJSON, args)
			}
		},
	}
}

func (c *waiter) run(sig context.Context, t cli.Target, timeout time.Duration, locks []client.Option, asJSON bool, args []string) error {
	id, err := jobIDArg(args)
	if err != nil {
		return err
	}
	if timeout < 0 {
		return cli.Usagef("--timeout %s: want 0 (no bound) or more", timeout)
	}
	ctx := sig
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(sig, timeout)
		defer cancel()
	}
	cl, err := t.Open(ctx, locks...)
	if err != nil {
		if ctx.Err() != nil {
			return c.notDecided(sig, nil, t, id, asJSON)
		}
		return err
	}
	defer cl.Close()
	l, err := cl.Wait(ctx, id)
	if err != nil {
		if !errors.Is(err, client.ErrNotDecided) {
			return err
		}
		return c.notDecided(sig, cl, t, id, asJSON)
	}
	out := l.Outcome
	if asJSON {
		if err := cli.WriteJSON(c.Stdout, out); err != nil {
			return err
		}
	} else {
		printOutcome(c.Stdout, out)
	}
	if !out.Applied() {
		return cli.Exit(cli.ExitRejected, fmt.Errorf("job %s %w", out.ID, out.Err()))
	}
	return nil
}

// notDecided reports a wait that ended before the outcome was known: the
// timeout ran out (exit 75) or a signal came (sig ended: exit 130). It
// says where the job stands, if it can still ask (cl not nil).
func (c *waiter) notDecided(sig context.Context, cl *client.Client, t cli.Target, id string, asJSON bool) error {
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
	code, what := cli.ExitBusy, fmt.Sprintf("%s: job %s: %s", cli.ErrWaitTimeout, id, where)
	if sig.Err() != nil {
		code, what = cli.ExitInterrupted, fmt.Sprintf("interrupted while waiting for job %s", id)
	}
	msg := fmt.Errorf("%s; it may still be applied: ask with scribe status %s %s", what, t.Ref(), id)
	if asJSON {
		if l == nil {
			l = &queue.Lookup{} // not asked: no state to tell
		}
		_ = cli.WriteJSON(c.Stdout, lookupJSON{ID: id, Lookup: l, Error: msg.Error()})
	}
	return cli.Exit(code, msg)
}

// jobIDArg is the one argument of status, wait and cancel, a job ID,
// checked.
func jobIDArg(args []string) (string, error) {
	if len(args) != 1 {
		return "", cli.Usagef("want one JOB_ID")
	}
	if p := queue.IDProblem(args[0]); p != "" {
		return "", cli.Usagef("%s", p)
	}
	return args[0], nil
}
