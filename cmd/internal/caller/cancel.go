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

// canceller is `scribe cancel`, on the command line's streams.
type canceller struct{ *cli.Main }

// defaultCancelTimeout bounds a cancel request: the writer answers it
// between batches, so it may wait for the batch in hand.
const defaultCancelTimeout = 30 * time.Second

// Cancel is `scribe cancel`: take a job that is still queued off the
// queue, recording it rejected (cancelled).
func Cancel() cli.Command {
	return cli.Command{
		Name:  "cancel",
		Forms: []cli.Form{{Args: "--store DIR [--timeout DUR] JOB_ID", Summary: "cancel a job still queued"}},
		Help: "Cancels a job still queued: the daemon records it rejected (cancelled) and never applies it; whoever\n" +
			"waits for it gets that outcome. Exit 0 cancelled (also when it was cancelled before), 1 too late (the\n" +
			"job was decided, or the writer has it in hand) or no such job, 69 no daemon, 75 the store is held by\n" +
			"another process (nothing was changed) or --timeout ran out (the answer was lost, if any): try again,\n" +
			"cancelling twice gives the same answer.\n" + cli.RemoteHelp,
		JSON: true,
		Setup: func(m *cli.Main, fs *cli.FlagSet) func(context.Context, []string) error {
			store := fs.Store()
			remote := fs.Remote()
			timeout := fs.Duration("timeout", defaultCancelTimeout, "give up after `DUR` (exit 75)")
			asJSON := fs.JSON("the answer: id, result (cancelled, too_late, unknown, busy), state, outcome, error")
			c := &canceller{m}
			return func(ctx context.Context, args []string) error {
				t, err := remote.Resolve(*store)
				if err != nil {
					return err
				}
				return c.run(ctx, t, *timeout, *asJSON, args)
			}
		},
	}
}

// cancelJSON is what cancel prints with --json.
type cancelJSON struct {
	ID      string             `json:"id"`
	Result  queue.CancelResult `json:"result,omitempty"`
	State   queue.JobState     `json:"state,omitempty"`
	Outcome *queue.Outcome     `json:"outcome,omitempty"`
	Error   string             `json:"error,omitempty"`
}

func (c *canceller) run(ctx context.Context, t cli.Target, timeout time.Duration, asJSON bool, args []string) error {
	id, err := jobIDArg(args)
	if err != nil {
		return err
	}
	if timeout <= 0 {
		return cli.Usagef("--timeout %s: want more than 0", timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := c.cancel(ctx, t, id)
	ans := cancelJSON{ID: id, Result: queue.CancelDone, Outcome: out}
	if out != nil {
		ans.State = queue.StateOf(out)
	}
	var late *client.TooLateError
	switch {
	case err == nil:
	case errors.As(err, &late):
		ans.Result, ans.State, ans.Outcome = queue.CancelTooLate, late.State, late.Outcome
	case errors.Is(err, client.ErrUnknownJob):
		ans.Result, ans.State = queue.CancelUnknown, queue.StateUnknown
	case errors.Is(err, client.ErrBusy):
		ans.Result = queue.CancelBusy
	default:
		ans.Result = ""
	}
	if err != nil {
		ans.Error = err.Error()
		if ctx.Err() != nil && cli.ExitCode(err) != cli.ExitNoDaemon {
			err = cli.Exit(cli.ExitBusy, fmt.Errorf("%w: cancel %s: whether it was cancelled is not known (cancel again): %v", cli.ErrWaitTimeout, id, err))
			ans.Error = err.Error()
		}
	}
	if asJSON {
		if werr := cli.WriteJSON(c.Stdout, ans); werr != nil && err == nil {
			return werr
		}
	} else if err == nil {
		fmt.Fprintf(c.Stdout, "job %s cancelled\n", id)
	}
	return err
}

// cancel opens the store's daemon (no other route can cancel) and asks
// it to cancel job id.
func (c *canceller) cancel(ctx context.Context, t cli.Target, id string) (*queue.Outcome, error) {
	cl, err := t.Open(ctx, client.WithRoute(client.RouteRequire))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.Cancel(ctx, id)
}
