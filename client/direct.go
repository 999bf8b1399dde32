package client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/journal"
)

// direct is the route without a daemon: each job takes the store lock,
// fail-fast unless WithWait, and goes through the same appliers and
// journal as the daemon's.
type direct struct {
	store    string
	lockPath string
	wait     time.Duration
	command  string
	log      *slog.Logger
	// fallback: the prefer route found no daemon. It must not write past
	// jobs that a stopped daemon may have left queued (ErrStranded).
	fallback bool
}

func (d *direct) submit(ctx context.Context, job *queue.Job, _ []byte, _ bool) error {
	out, err := d.apply(ctx, job, nil)
	if err != nil {
		return err
	}
	return out.Err()
}

func (d *direct) apply(ctx context.Context, job *queue.Job, _ []byte) (*queue.Outcome, error) {
	// Before anything else, the lock and the journal included: a direct
	// writer has no allowlist, so an exec job could only be refused, and
	// that refusal would be recorded under its ID for good.
	if slices.ContainsFunc(job.Ops, func(op queue.Op) bool { return op.Kind == queue.OpExec }) {
		if !d.fallback {
			return nil, directExecError(d.store)
		}
		return nil, fmt.Errorf("%s: %w", d.store, ErrExecNeedsDaemon)
	}
	if d.fallback {
		st, err := queue.ReadStranded(d.store)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.store, err)
		}
		if st != nil {
			return nil, fmt.Errorf("%s: %w (%s)", d.store, ErrStranded, st.Why)
		}
	}
	s, err := writer.Open(ctx, d.store, writer.Options{
		LockPath: d.lockPath, Mode: queue.ModeDirect, Command: d.command, Wait: d.wait, Logger: d.log,
	})
	if err != nil {
		return nil, busyError(err)
	}
	defer s.Close()
	res, err := s.Apply([]writer.Entry{{Job: job}})
	if err != nil {
		return nil, err
	}
	s.MaybePrune(0) // direct writes' own outcomes; rarely does anything
	return res[0].Outcome, nil
}

// lookup reads the journal itself, read-only: no lock needed.
func (d *direct) lookup(_ context.Context, id string) (*queue.Lookup, error) {
	j, err := journal.OpenReadOnly(queue.Layout{Root: d.store}.Journal(), journalOpenTimeout)
	if errors.Is(err, fs.ErrNotExist) {
		return &queue.Lookup{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer j.Close()
	l, err := j.Lookup(id)
	return &l, err
}

func (d *direct) report(context.Context) (*queue.StatusReport, error) { return nil, ErrNoDaemon }

// cancel needs the daemon: only its writer can take a job off its queue.
func (d *direct) cancel(context.Context, string) (*queue.CancelAnswer, error) {
	return nil, ErrNoDaemon
}

func (d *direct) deadLetters(context.Context) (*queue.DeadLetters, error) {
	return nil, fmt.Errorf("%s: dead letters are the daemon's: %w", d.store, ErrNoDaemon)
}

func (d *direct) daemon() *queue.Discovery { return nil }

func (d *direct) close() error { return nil }

// directExecError is an exec job given to the direct route, which does not
// use the daemon even when one serves the store. It matches
// ErrExecNeedsDaemon (and so ErrNoDaemon).
type directExecError string

func (e directExecError) Error() string {
	return string(e) + ": the direct route does not use the daemon, and exec jobs run in the daemon, which has the allowlist"
}

func (e directExecError) Is(target error) bool {
	return target == ErrExecNeedsDaemon || target == ErrNoDaemon
}
