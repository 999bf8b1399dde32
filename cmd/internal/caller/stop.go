package caller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// defaultStopTimeout is how long `scribe stop` waits by default: the
// batch in hand is finished first, and an exec command that is running
// is stopped with its grace period (5 s by default).
const defaultStopTimeout = time.Minute

// stopPoll is how often stop looks whether the daemon is gone.
const stopPoll = 20 * time.Millisecond

// stopper is `scribe stop`, on the command line's streams.
type stopper struct{ *cli.Main }

// Stop is `scribe stop`: the store's daemon stopped gracefully, as SIGTERM
// does, and waited for until it is gone.
func Stop() cli.Command {
	return cli.Command{
		Name:  "stop",
		Forms: []cli.Form{{Args: "--store DIR [--timeout DUR]", Summary: "stop the store's daemon gracefully"}},
		Setup: func(m *cli.Main, fs *cli.FlagSet) func(context.Context, []string) error {
			store := fs.Store()
			timeout := fs.Duration("timeout", defaultStopTimeout, "wait at most `DUR` for the daemon to finish its batch and exit, then exit 75 (0: no limit)")
			c := &stopper{m}
			return func(ctx context.Context, args []string) error {
				return c.run(ctx, *store, *timeout, args)
			}
		},
	}
}

// run finds the store's daemon through its discovery file, checks that
// the pid there is that daemon's, sends it SIGTERM and waits until it has
// released the daemon lock. No daemon is no failure: exit 0, with a note.
// A daemon still there after timeout is exit 75.
func (c *stopper) run(ctx context.Context, store string, timeout time.Duration, args []string) error {
	if err := cli.RequireStore(store); err != nil {
		return err
	}
	if len(args) > 0 {
		return cli.Usagef("stop takes no arguments, got %q", args)
	}
	if timeout < 0 {
		return cli.Usagef("--timeout %s: want a duration ≥ 0", timeout)
	}
	real, err := queue.ResolveStore(store)
	if err != nil {
		return err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// timedOut says what has not happened, how long stop waited for it,
	// then what else may be done.
	timedOut := func(what, otherwise string) error {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return cli.Exit(cli.ExitBusy, fmt.Errorf("%s after %s; wait longer (--timeout)%s", what, timeout, otherwise))
		}
		return ctx.Err()
	}
	poll := time.NewTicker(stopPoll)
	defer poll.Stop()
	next := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-poll.C:
			return true
		}
	}

	// A daemon that holds the lock without a discovery file is starting
	// (or stopping): wait until it says who it is, or is gone.
	waited := false
	find := func() (*queue.Discovery, error) {
		for {
			d, err := discovery.Find(real)
			if !errors.Is(err, discovery.ErrStarting) {
				return d, err
			}
			waited = true
			if !next() {
				// Its pid is not known: the file that would say is gone.
				return nil, timedOut(fmt.Sprintf("a daemon holds %s without a discovery file: it is starting, or stopping already (finishing its batch, or an exec command's grace period) (%v)", real, err), "")
			}
		}
	}
	d, err := find()
	if err == nil && d != nil {
		// Stops at once take turns: each would signal the daemon, and a
		// second signal kills it at once. The one that comes second
		// finds the daemon gone, or looks again.
		release, gerr := takeStopGate(queue.Layout{Root: real}, next)
		switch {
		case errors.Is(gerr, errNoTurn):
			return timedOut(fmt.Sprintf("another scribe stop of %s is still waiting for daemon pid %d", real, d.PID), "")
		case gerr != nil:
			return gerr
		}
		defer release()
		d, err = find()
	}
	if err != nil {
		return err
	}
	switch {
	case d == nil && waited:
		fmt.Fprintf(c.Stdout, "the daemon of %s, which was stopping already (or starting), has exited\n", real)
		return nil
	case d == nil:
		fmt.Fprintf(c.Stderr, "scribe: no daemon serves %s; nothing to stop\n", real)
		return nil
	}
	if err := signalDaemon(queue.Layout{Root: real}, d); err != nil {
		return err
	}
	// Gone once the daemon lock is free, or held by another daemon (a
	// supervisor restarted it).
	for {
		now, err := discovery.Find(real)
		switch {
		case err == nil && (now == nil || now.PID != d.PID):
			fmt.Fprintf(c.Stdout, "stopped daemon pid %d of %s\n", d.PID, real)
			return nil
		case err != nil && !errors.Is(err, discovery.ErrStarting): // stopping: the file is withdrawn first
			return err
		}
		if !next() {
			return timedOut(fmt.Sprintf("daemon pid %d of %s has not stopped: it finishes the batch in hand first, and gives a running exec command its grace period", d.PID, real),
				fmt.Sprintf(", or stop it at once: kill -KILL %d (what is queued is kept, and applied by the next daemon)", d.PID))
		}
	}
}

// takeStopGate takes the store's stop gate (queue.Layout.StopGate), an
// exclusive flock, trying again at each tick of next until it ends. The
// gate is held to .scribe's rules (queue.OpenPrivate), never removed, and
// let go by release, or by the kernel if this process dies.
func takeStopGate(l queue.Layout, next func() bool) (release func(), err error) {
	f, err := queue.OpenPrivate(l.StopGate(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return func() { f.Close() }, nil
		case !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR):
			f.Close()
			return nil, fmt.Errorf("take %s: %w", l.StopGate(), err)
		}
		if !next() {
			f.Close()
			return nil, errNoTurn
		}
	}
}

// errNoTurn is a stop whose turn at the gate did not come before its
// context ended.
var errNoTurn = errors.New("no turn at the stop gate")
