package caller

import (
	"context"
	"fmt"
	"time"

	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/journal"
)

// recoverResult is what `recover --json` prints.
type recoverResult struct {
	// Interrupted is the batch found, or nil if there was none.
	Interrupted *queue.Interrupted `json:"interrupted"`
	// Done is "finished", "abandoned" or "nothing".
	Done  string `json:"done,omitempty"`
	Error string `json:"error,omitempty"`
}

// recoverer is `scribe recover`, on the command line's streams.
type recoverer struct{ *cli.Main }

// Recover is `scribe recover`: a batch an earlier holder of the store was
// interrupted in, finished, or given up (docs/recovery.md).
func Recover() cli.Command {
	return cli.Command{
		Name:  "recover",
		Forms: []cli.Form{{Args: "--store DIR [--abandon] [--json]", Summary: "finish, or give up, an interrupted batch"}},
		Help: "Takes the store lock (fail-fast: exit 75 while a daemon or anyone holds it) and finishes the\n" +
			"batch an earlier holder was interrupted in, or with --abandon records its jobs as rejected\n" +
			"(abandoned) and drops it (docs/recovery.md).",
		Setup: func(m *cli.Main, fs *cli.FlagSet) func(context.Context, []string) error {
			store := fs.Store()
			abandon := fs.Bool("abandon", false, "give the interrupted batch up: its jobs are recorded as rejected (abandoned); files stay as they are")
			lockFile := fs.LockFile()
			asJSON := fs.JSON(`{"interrupted": {"jobs", "files", "stuck"} or null, "done": "finished"|"abandoned"|"nothing", "error"}`)
			c := &recoverer{m}
			return func(ctx context.Context, args []string) error {
				if err := cli.RequireStore(*store); err != nil {
					return err
				}
				if len(args) > 0 {
					return cli.Usagef("unexpected argument %q", args[0])
				}
				return c.run(ctx, *store, lockFile, *abandon, *asJSON)
			}
		},
	}
}

// run takes the store lock (fail-fast), redoes an interrupted batch, or
// with abandon records its jobs as rejected (abandoned) and drops it.
func (c *recoverer) run(ctx context.Context, store string, lockFile *cli.LockFile, abandon, asJSON bool) error {
	res := recoverResult{}
	report := func(err error) error {
		if err != nil {
			res.Error = err.Error()
		}
		if asJSON {
			if jerr := cli.WriteJSON(c.Stdout, res); jerr != nil {
				return jerr
			}
			if err != nil {
				return cli.Exit(cli.ExitCode(err), nil)
			}
		}
		return err
	}
	real, err := queue.ResolveStore(store)
	if err != nil {
		return report(err)
	}
	// The lock the store's daemon takes, or the two would not exclude
	// each other (discovery.LockFile), as for scribe lock.
	given, configured, err := lockFile.Settle(c.Main, store)
	if err != nil {
		return report(err)
	}
	lockPath, err := discovery.LockFile(real, given, configured)
	if err != nil {
		return report(cli.WithHint(err, lockFileHint(err)))
	}
	opts := writer.Options{LockPath: lockPath, Command: "scribe recover"}
	if abandon {
		in, err := writer.Abandon(ctx, store, opts)
		res.Interrupted = in
		if err != nil {
			return report(err)
		}
		res.Done = "nothing"
		if in != nil {
			res.Done = "abandoned"
		}
		if !asJSON {
			if in == nil {
				fmt.Fprintln(c.Stdout, "no interrupted batch: nothing to abandon")
			} else {
				fmt.Fprintf(c.Stdout, "abandoned an interrupted batch of %d jobs (%d files): its jobs are recorded as rejected (abandoned); the files may hold part of it\n", in.Jobs, in.Files)
			}
		}
		return report(nil)
	}
	res.Interrupted = interrupted(store)
	s, err := writer.Open(ctx, store, opts) // finishes an interrupted batch first
	if err != nil {
		return report(err)
	}
	if err := s.Close(); err != nil {
		return report(err)
	}
	res.Done = "nothing"
	if res.Interrupted != nil {
		res.Done = "finished"
	}
	if !asJSON {
		if res.Interrupted == nil {
			fmt.Fprintln(c.Stdout, "no interrupted batch: nothing to recover")
		} else {
			fmt.Fprintf(c.Stdout, "finished an interrupted batch of %d jobs (%d files)\n", res.Interrupted.Jobs, res.Interrupted.Files)
		}
	}
	return report(nil)
}

// interrupted reads the batch an earlier holder was interrupted in, if
// any, from the journal without the store lock (nil if none, or if the
// journal cannot be read now).
func interrupted(store string) *queue.Interrupted {
	j, err := journal.OpenReadOnly(journal.Path(store), time.Second)
	if err != nil {
		return nil
	}
	defer j.Close()
	in, _ := j.Interrupted()
	return in
}
