package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/journal"
)

// RecoverCommand finishes, or gives up, a batch an earlier holder of the
// store was interrupted in (docs/recovery.md).
type RecoverCommand struct{ *Main }

// recoverResult is what `recover --json` prints.
type recoverResult struct {
	// Interrupted is the batch found, or nil if there was none.
	Interrupted *queue.Interrupted `json:"interrupted"`
	// Done is "finished", "abandoned" or "nothing".
	Done  string `json:"done,omitempty"`
	Error string `json:"error,omitempty"`
}

// Run takes the store lock (fail-fast), redoes an interrupted batch, or
// with --abandon records its jobs as rejected (abandoned) and drops it.
func (c *RecoverCommand) Run(ctx context.Context, args []string) error {
	fs := c.newFlagSet("recover", "--store DIR [--abandon] [--lock-file FILE] [--json]")
	store := storeFlag(fs)
	abandon := fs.Bool("abandon", false, "give the interrupted batch up: its jobs are recorded as rejected (abandoned); files stay as they are")
	lockFile := fs.String("lock-file", "", "store lock `file` (default <store>/.scribe/lock)")
	asJSON := fs.Bool("json", false, "print {\"interrupted\": {\"jobs\", \"files\", \"stuck\"} or null, \"done\": \"finished\"|\"abandoned\"|\"nothing\", \"error\"}")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := requireStore(*store); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q", fs.Arg(0))
	}
	res := recoverResult{}
	report := func(err error) error {
		if err != nil {
			res.Error = err.Error()
		}
		if *asJSON {
			if jerr := writeJSON(c.Stdout, res); jerr != nil {
				return jerr
			}
			if err != nil {
				return &exitError{code: exitCode(err)}
			}
		}
		return err
	}
	opts := writer.Options{LockPath: *lockFile, Command: "scribe recover"}
	if *abandon {
		in, err := writer.Abandon(ctx, *store, opts)
		res.Interrupted = in
		if err != nil {
			return report(err)
		}
		res.Done = "nothing"
		if in != nil {
			res.Done = "abandoned"
		}
		if !*asJSON {
			if in == nil {
				fmt.Fprintln(c.Stdout, "no interrupted batch: nothing to abandon")
			} else {
				fmt.Fprintf(c.Stdout, "abandoned an interrupted batch of %d jobs (%d files): its jobs are recorded as rejected (abandoned); the files may hold part of it\n", in.Jobs, in.Files)
			}
		}
		return report(nil)
	}
	res.Interrupted = interrupted(*store)
	s, err := writer.Open(ctx, *store, opts) // finishes an interrupted batch first
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
	if !*asJSON {
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

// stuckHint is what the CLI adds to an error that says an interrupted
// batch cannot be finished.
func stuckHint(err error) string {
	if !errors.Is(err, writer.ErrStuck) {
		return ""
	}
	return "the store takes no write until that batch is finished: fix what the error names and run `scribe recover --store DIR`, or give the batch up with `scribe recover --store DIR --abandon` (docs/recovery.md)"
}
