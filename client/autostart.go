package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// DefaultExitIdle is how long a daemon started on demand (WithAutostart)
// stays once it has nothing to do: no job in hand and an empty queue. Long
// enough that hooks firing every agent turn find it running, short enough
// that nothing lingers after the session.
const DefaultExitIdle = 5 * time.Minute

// autostartPoll is how often Open looks for the discovery of a daemon it
// started: first every 5 ms, since a start takes tens of milliseconds, all
// inside a hook's budget, then less often, up to every 100 ms. Thirty
// hooks polling every 5 ms (each poll takes the daemon lock for an
// instant) starved the very daemon they waited for on a loaded machine.
func autostartPoll(n int) time.Duration {
	return min(5*time.Millisecond<<min(n/4, 5), 100*time.Millisecond)
}

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
	refused *DaemonRefusedError // the daemon it started exited at once
}

// discover is queued.discover with autostart: when no daemon serves the
// store, start one (at most autostartTries) and wait for the discovery of
// the daemon that won the lock, ours or another's.
//
// Callers that find no daemon take turns at the store's autostart gate:
// the one holding it starts a daemon and keeps the gate until some daemon
// holds the daemon lock, so the others find that daemon starting and
// wait for it rather than start one each. Without the gate a burst of
// thirty hooks started thirty daemons, twenty-nine only to exit, and on a
// loaded machine the one that won announced itself too late for some.
func (a *autostarter) discover(ctx context.Context, q *queued) (*queue.Discovery, error) {
	gate := startGate{layout: queue.Layout{Root: a.store}, patience: gatePatience(ctx), log: q.log}
	defer func() {
		gate.release()
		if a.started != nil {
			a.started.release()
			a.started = nil
		}
	}()
	for attempt := 0; ; attempt++ {
		d, err := discovery.Find(q.store)
		switch {
		case err == nil && d != nil:
			return d, nil
		case err != nil && !errors.Is(err, discovery.ErrStarting):
			return nil, err
		case err != nil:
			// A daemon holds the lock and is starting, ours or another's:
			// whoever comes now waits for it.
			gate.release()
		case a.failed():
			// It failed as the next would.
			return nil, a.refused
		case a.started == nil || a.started.exited():
			// No daemon holds the lock, and ours (if any) is gone: start
			// one, unless another caller holds the gate to start one.
			ok, err := gate.take()
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			if d, err := discovery.Find(q.store); d != nil || err != nil {
				gate.release() // one took the lock while we came through the gate
				break
			}
			if a.tries >= autostartTries {
				return nil, unstarted{fmt.Errorf("no daemon could be started on demand: %d started, none serves the store; see %s", a.tries, queue.Layout{Root: a.store}.DaemonLog())}
			}
			a.tries++
			s, err := startDaemon(a.cfg, a.store)
			if err != nil {
				return nil, unstarted{fmt.Errorf("no daemon could be started on demand: %w", err)}
			}
			a.started = s
			q.log.Debug("started a daemon", "pid", s.pid, "command", a.cfg.Command)
		}
		if !queue.Sleep(ctx, autostartPoll(attempt)) {
			if err == nil {
				err = errors.New("no daemon announced itself")
			}
			return nil, fmt.Errorf("%w: waiting for the daemon started on demand (see %s): %w", ErrUnavailable, queue.Layout{Root: a.store}.DaemonLog(), err)
		}
	}
}

// startGate is the store's autostart gate: an exclusive flock on
// <store>/.scribe/autostart, held by the caller that is starting a
// daemon. The kernel frees it if that caller dies; the file is never
// removed, and nothing is read from it. It is held to the rules of
// .scribe (queue.OpenPrivate): a gate planted by another user, a symlink
// above all, is refused, never followed.
type startGate struct {
	layout    queue.Layout  // the gate is layout.AutostartGate()
	patience  time.Duration // see gatePatience
	log       *slog.Logger
	f         *os.File  // the gate, open
	locked    bool      // this caller holds f's flock
	unusable  bool      // the gate cannot be opened: start without it
	busySince time.Time // when this caller first found it held
}

// gatePatience is how long a caller waits for the autostart gate before it
// starts a daemon regardless: half its time to connect (5 s of the default
// 10), or 5 s without a deadline. The gate only spares the machine a
// crowd of daemons; the daemon lock keeps one. A holder stopped (SIGSTOP,
// a debugger) before it started one must not keep every caller from it;
// but a daemon started amid thirty race-built hooks on two loaded cores
// took 2.8 s to hold its lock, so the patience is not shorter.
func gatePatience(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl) / 2
	}
	return 5 * time.Second
}

// take reports whether this caller may start a daemon: it holds the gate
// (taken now or before), or the gate cannot be opened at all (a store
// whose .scribe this user cannot write), or another caller has held it
// for its patience. In the last two, starting one regardless is better
// than never starting one; the daemon lock still keeps one daemon. A
// folder or gate that fails the rules of .scribe is an *InsecureError:
// then no daemon is started at all.
func (g *startGate) take() (bool, error) {
	if g.unusable || g.locked {
		return true, nil
	}
	if g.f == nil {
		if err := g.layout.Make(); err != nil {
			if errors.Is(err, queue.ErrInsecure) {
				return false, err
			}
			g.log.Debug("no autostart gate", "err", err)
			g.unusable = true
			return true, nil
		}
		f, err := queue.OpenPrivate(g.layout.AutostartGate(), os.O_CREATE|os.O_RDONLY, 0o600)
		if errors.Is(err, queue.ErrInsecure) {
			return false, err
		}
		if err != nil {
			g.log.Debug("no autostart gate", "err", err)
			g.unusable = true
			return true, nil
		}
		g.f = f
	}
	err := syscall.Flock(int(g.f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	switch {
	case err == nil:
		g.locked = true
		return true, nil
	case !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR):
		g.log.Debug("no autostart gate", "err", err)
		g.unusable = true
		return true, nil
	case g.busySince.IsZero():
		g.busySince = time.Now()
	case time.Since(g.busySince) >= g.patience:
		g.log.Debug("the autostart gate stays held; starting a daemon regardless", "held_for", time.Since(g.busySince))
		return true, nil
	}
	return false, nil
}

// release lets the gate go if this caller holds it, and forgets how long
// it found it held: a daemon holds the store now.
func (g *startGate) release() {
	g.busySince = time.Time{}
	if g.f != nil {
		// Closing the only descriptor drops the flock; the next take
		// opens the gate anew, checked again.
		g.f.Close()
		g.f, g.locked = nil, false
	}
}

// unstarted is an autostart that left no daemon serving the store. It
// matches ErrUnavailable (try again), without its words: no daemon was
// there to answer.
type unstarted struct{ error }

func (e unstarted) Is(target error) bool { return target == ErrUnavailable }
func (e unstarted) Unwrap() error        { return e.error }

// failed reports whether the daemon this caller started exited at once
// with a failure another would meet too; if so, refused says what it was.
func (a *autostarter) failed() bool {
	if a.started == nil {
		return false
	}
	code, at, ok := a.started.failed()
	if ok {
		a.refused = &DaemonRefusedError{Code: code, Said: said(queue.Layout{Root: a.store}.DaemonLog(), at)}
	}
	return ok
}

// said is what a daemon wrote to its log at path after offset at, in one
// line for a message: its lines (a refused config's problems, FILE:LINE:
// KEY: PROBLEM, then its summary) joined, control characters (and bidi
// ones) shown as ?,
// at most 1,000 bytes, and the log's path. The log is read as .scribe's
// files are (queue.OpenPrivate).
func said(path string, at int64) string {
	f, err := queue.OpenPrivate(path, os.O_RDONLY, 0)
	if err != nil {
		return "see " + path
	}
	defer f.Close()
	var b [1000]byte
	n, _ := f.ReadAt(b[:], at)
	lines := strings.Split(strings.TrimSpace(strings.ToValidUTF8(string(b[:n]), "?")), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(strings.Map(func(r rune) rune {
			if r < 0x20 || r >= 0x7f && r < 0xa0 || unicode.Is(unicode.Bidi_Control, r) {
				return '?' // a terminal's escapes, or text turned around, are not the log's to send
			}
			return r
		}, l), "scribe: ")
	}
	if len(lines) == 1 && lines[0] == "" {
		return "see " + path
	}
	return fmt.Sprintf("%s (%s)", strings.Join(lines, "; "), path)
}
