package caller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
)

// jobs is `scribe jobs`, on the command line's streams.
type jobs struct{ *cli.Main }

// Jobs is `scribe jobs`: recent outcomes, and the jobs queued.
func Jobs() cli.Command {
	return cli.Command{
		Name:  "jobs",
		Forms: []cli.Form{{Args: "--store DIR [--state S] [--since DUR]", Summary: "recent outcomes, queued jobs"}},
		Help: "Lists the journal's recorded outcomes, newest first, and the jobs queued, next first. Without a\n" +
			"daemon it reads the journal itself; queued jobs can then not be listed (--state queued exits 69).\n" + cli.RemoteHelp,
		JSON: true,
		Setup: func(m *cli.Main, fs *cli.FlagSet) func(context.Context, []string) error {
			store := fs.Store()
			remote := fs.Remote()
			state := fs.String("state", "", "list only `STATE`: applied, rejected (outcomes) or queued (queued jobs, those in hand included)")
			fs.CompleteWords("state", string(queue.StatusApplied), string(queue.StatusRejected), string(queue.StateQueued))
			since := fs.Duration("since", 0, "list only the outcomes recorded in the last `DUR` (0: all)")
			limit := fs.Int("limit", queue.DefaultJobsLimit, fmt.Sprintf("list at most `N` outcomes, and N queued jobs (at most %d)", queue.MaxJobsLimit))
			asJSON := fs.JSON("the list (the same keys with and without a daemon; docs/cli.md)")
			lockFile := fs.LockFile()
			c := &jobs{m}
			return func(ctx context.Context, args []string) error {
				t, err := remote.Resolve(*store)
				if err != nil {
					return err
				}
				if len(args) > 0 {
					return cli.Usagef("want no arguments, got %q", args[0])
				}
				if *since < 0 {
					return cli.Usagef("--since %s: want 0 (all) or more", *since)
				}
				if *limit <= 0 || *limit > queue.MaxJobsLimit {
					return cli.Usagef("--limit %d: want 1 to %d", *limit, queue.MaxJobsLimit)
				}
				q := queue.JobsQuery{State: queue.JobState(*state), Limit: *limit}
				if *since > 0 {
					q.Since = time.Now().Add(-*since)
				}
				if err := q.Normalize(); err != nil {
					return cli.Usagef("--%v", err)
				}
				locks, err := lockFile.Options(m, t.Store)
				if err != nil {
					return err
				}
				return c.run(ctx, t, q, locks, *asJSON)
			}
		},
	}
}

// jobsJSON is what `jobs --json` prints, with and without a daemon: every
// key is always present (docs/cli.md).
type jobsJSON struct {
	Store   string `json:"store"`
	StoreID string `json:"store_id"`
	// DaemonPID is the pid of the daemon that answered, null without one.
	DaemonPID *int `json:"daemon_pid"`
	// Outcomes are recorded outcomes, newest first; null when not asked
	// for (--state queued).
	Outcomes []*queue.Outcome `json:"outcomes"`
	// OutcomesCut is how many of the oldest outcomes asked for the
	// daemon left out for its answer to fit one message.
	OutcomesCut int `json:"outcomes_cut"`
	// Queued are the queued jobs, next first; null when not listed: not
	// asked for (--state applied or rejected), or no daemon (only the
	// daemon can read its queue). QueuedTotal counts them all.
	Queued      []queue.QueuedJob `json:"queued"`
	QueuedTotal *uint64           `json:"queued_total"`
	// Note says why queued jobs are not listed, if it is not asked for.
	Note *string `json:"note"`
	// Error is what could not be read: the list is partial.
	Error *string `json:"error"`
}

func (c *jobs) run(ctx context.Context, t cli.Target, q queue.JobsQuery, locks []client.Option, asJSON bool) error {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	cl, err := t.Open(ctx, locks...)
	if err != nil {
		return err
	}
	defer cl.Close()
	list, err := cl.Jobs(ctx, q)
	if err != nil {
		return err
	}
	out := jobsJSON{Store: t.Store, StoreID: cl.StoreID(), Outcomes: list.Outcomes, OutcomesCut: list.OutcomesCut, Error: cli.Optional(list.Error)}
	if t.Store != "" {
		if real, err := queue.ResolveStore(t.Store); err == nil {
			out.Store = real
		}
	}
	if q.State == queue.StateQueued {
		out.Outcomes = nil
	}
	switch d := cl.Daemon(); {
	case cl.Queued() || d != nil: // a daemon answered: a remote queue's (its pid is another host's), or a local one, which answers under a hold too
		if d != nil {
			out.DaemonPID = &d.PID
		}
		if q.State == "" || q.State == queue.StateQueued {
			out.Queued, out.QueuedTotal = list.Queued, &list.QueuedTotal
			if out.Queued == nil {
				out.Queued = []queue.QueuedJob{}
			}
		}
	case q.State == "":
		out.Note = cli.Ptr("no daemon serves the store: queued jobs cannot be listed (only the daemon reads its queue)")
	}
	if asJSON {
		if err := cli.WriteJSON(c.Stdout, out); err != nil {
			return err
		}
	} else {
		c.print(&out, q)
	}
	if list.Error != "" {
		return errors.New("the list is partial: " + list.Error)
	}
	return nil
}

// print prints the list for people.
func (c *jobs) print(l *jobsJSON, q queue.JobsQuery) {
	w := c.Stdout
	if q.State != queue.StateQueued {
		what := "outcomes"
		if q.State != "" {
			what = string(q.State) + " " + what
		}
		if !q.Since.IsZero() {
			what += " since " + q.Since.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s, newest first: %d\n", what, len(l.Outcomes))
		for _, o := range l.Outcomes {
			fmt.Fprintf(w, "  %s  %-8s  %s  by %s, epoch %d", o.At.Format("2006-01-02T15:04:05.000Z07:00"), o.Status, o.ID, o.Mode, o.Epoch)
			if o.Seq != 0 {
				fmt.Fprintf(w, ", seq %d", o.Seq)
			}
			if !o.Applied() {
				fmt.Fprintf(w, ": %s: %s", o.Reason, o.Detail)
			}
			fmt.Fprintln(w)
		}
		switch {
		case l.OutcomesCut > 0:
			fmt.Fprintf(w, "  (the newest %d; %d older ones left out to fit one message: --limit or --since for fewer)\n", len(l.Outcomes), l.OutcomesCut)
		case len(l.Outcomes) == q.Limit:
			fmt.Fprintf(w, "  (the newest %d; --limit for more)\n", q.Limit)
		}
	}
	switch {
	case l.Note != nil:
		fmt.Fprintln(w, *l.Note)
	case l.QueuedTotal != nil:
		fmt.Fprintf(w, "queued, next first: %d\n", *l.QueuedTotal)
		for _, j := range l.Queued {
			fmt.Fprintf(w, "  %d. %s  %s  ", j.Position, j.ID, strings.ReplaceAll(string(j.State), "_", " "))
			if j.Priority == queue.PriorityHigh {
				fmt.Fprint(w, "high, ")
			}
			fmt.Fprintf(w, "seq %d, %s", j.Seq, strings.Join(j.Ops, ", "))
			if !j.Submitted.IsZero() {
				fmt.Fprintf(w, ", submitted %s", j.Submitted.Format(time.RFC3339))
			}
			if j.Detail != "" {
				fmt.Fprintf(w, ": %s", j.Detail)
			}
			fmt.Fprintln(w)
		}
		if n := uint64(len(l.Queued)); n < *l.QueuedTotal {
			fmt.Fprintf(w, "  (the first %d; --limit for more)\n", n)
		}
	}
	if l.Error != nil {
		fmt.Fprintf(w, "partial: %s\n", *l.Error)
	}
}
