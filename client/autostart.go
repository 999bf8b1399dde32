package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/daemon"
)

// DefaultExitIdle is how long a daemon started on demand (WithAutostart)
// stays once it has nothing to do: no job in hand and an empty queue. Long
// enough that hooks firing every agent turn find it running, short enough
// that nothing lingers after the session.
const DefaultExitIdle = 5 * time.Minute

// autostartPoll is how often Open looks for the discovery of a daemon it
// started: its start takes tens of milliseconds, all inside a hook's
// budget, so a coarse backoff would show.
const autostartPoll = 5 * time.Millisecond

// autostartTries bounds how many daemons one discovery starts: a started
// daemon can exit at once, having lost the daemon lock to one that was
// leaving (idle) at that instant.
const autostartTries = 3

// Autostart says how to start the store's daemon on demand.
type Autostart struct {
	// Command runs the daemon: the program and its first arguments, such
	// as {"/usr/local/bin/scribe", "serve"}. Open appends --store STORE
	// and --exit-idle DUR. Required: the library cannot know where the
	// scribe binary is (the scribe CLI passes its own os.Executable).
	Command []string
	// ExitIdle is the started daemon's --exit-idle: it leaves once it has
	// been idle this long. 0 means DefaultExitIdle.
	ExitIdle time.Duration
}

// WithAutostart makes Open start the store's daemon when none serves the
// store (none runs, or one was killed and left jobs stranded), instead of
// writing directly or failing: the daemon is started detached, in its own
// session, its output appended to <store>/.scribe/daemon.log, and Open
// waits for it (within WithConnectTimeout) and connects. When many
// callers start one at once, the daemon lock keeps one; the others exit
// at once and their callers use the one that won.
//
// Open does not wait for the daemon as a child; a goroutine reaps it when
// it exits. It has no effect with RouteDirect.
func WithAutostart(a Autostart) Option {
	return func(o *options) { o.autostart = &a }
}

// autostarter starts daemons for one queued route and keeps track of the
// last one it started, until it is found or gone.
type autostarter struct {
	cfg     Autostart
	store   string
	started *startedDaemon
	tries   int
}

// discover is queued.discover with autostart: when no daemon serves the
// store, start one (at most autostartTries) and wait for the discovery of
// the daemon that won the lock, ours or another's.
func (a *autostarter) discover(ctx context.Context, q *queued) (*queue.Discovery, error) {
	defer func() {
		if a.started != nil {
			a.started.release()
			a.started = nil
		}
	}()
	for {
		d, err := daemon.Find(q.store)
		switch {
		case err == nil && d != nil:
			return d, nil
		case err != nil && !errors.Is(err, daemon.ErrStarting):
			return nil, err
		case err == nil && (a.started == nil || a.started.exited()):
			// No daemon holds the lock, and ours (if any) is gone.
			if a.tries >= autostartTries {
				return nil, fmt.Errorf("%w: started %d daemons, none serves the store; see %s", ErrUnavailable, a.tries, queue.Layout{Root: a.store}.DaemonLog())
			}
			a.tries++
			s, err := startDaemon(a.cfg, a.store)
			if err != nil {
				return nil, fmt.Errorf("%w: autostart: %w", ErrUnavailable, err)
			}
			a.started = s
			q.log.Debug("started a daemon", "pid", s.pid, "command", a.cfg.Command)
		}
		if !sleep(ctx, autostartPoll) {
			if err == nil {
				err = errors.New("no daemon announced itself")
			}
			return nil, fmt.Errorf("%w: waiting for the daemon started on demand (see %s): %w", ErrUnavailable, queue.Layout{Root: a.store}.DaemonLog(), err)
		}
	}
}
