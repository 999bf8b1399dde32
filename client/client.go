// Package client is what programs link to write to a scribe store: it
// finds the store's daemon through the discovery file and queues jobs
// there, or, when no daemon serves the store, writes directly under the
// store lock, failing fast when the store is busy.
//
// It does not link nats-server, so hook binaries and MCP servers that use
// it stay small.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/gofrs/flock"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"scribe/queue"
	"scribe/writer"
)

// Route says whether jobs go through the daemon.
type Route string

// Routes.
const (
	// RoutePrefer uses the daemon if one serves the store, and otherwise
	// writes directly, failing fast if the store is busy.
	RoutePrefer Route = "prefer"
	// RouteRequire uses the daemon only; Open fails with ErrNoDaemon
	// without one.
	RouteRequire Route = "require"
	// RouteDirect never uses the daemon.
	RouteDirect Route = "direct"
)

// ParseRoute parses a route name; empty means RoutePrefer.
func ParseRoute(s string) (Route, error) {
	switch r := Route(s); r {
	case "":
		return RoutePrefer, nil
	case RoutePrefer, RouteRequire, RouteDirect:
		return r, nil
	}
	return "", fmt.Errorf("unknown route %q: want prefer, require or direct", s)
}

var (
	// ErrNoDaemon means no daemon serves the store and the route requires
	// one.
	ErrNoDaemon = errors.New("no daemon serves this store")
	// ErrBusy means a direct write found the store lock held. The error
	// is a *writer.LockedError naming the holder.
	ErrBusy = writer.ErrLocked
	// ErrQueueFull means the daemon's queue for the store is at its
	// limits; the job was not queued.
	ErrQueueFull = queue.ErrQueueFull
	// ErrRejected matches a job's rejection (a *queue.RejectError).
	ErrRejected = queue.ErrRejected
)

// Option configures Open.
type Option func(*Client)

// WithRoute sets the route (default RoutePrefer).
func WithRoute(r Route) Option { return func(c *Client) { c.route = r } }

// WithLockFile makes direct writes take the store lock on path instead of
// <store>/.scribe/lock, to share the lock an existing tool already uses.
func WithLockFile(path string) Option { return func(c *Client) { c.lockPath = path } }

// WithWait makes a direct write wait up to d for a busy store instead of
// failing at once.
func WithWait(d time.Duration) Option { return func(c *Client) { c.wait = d } }

// WithCommand describes this process in the lock file while it writes
// directly (default: its command line).
func WithCommand(cmd string) Option { return func(c *Client) { c.command = cmd } }

// WithLogger sets a logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// Client writes jobs to one store.
type Client struct {
	store    string
	storeID  string
	route    Route
	lockPath string
	wait     time.Duration
	command  string
	log      *slog.Logger

	daemon *queue.Discovery
	nc     *nats.Conn
	js     jetstream.JetStream
}

// Open prepares a client for a store folder, which must exist. With a
// route other than RouteDirect it looks for the store's daemon and connects
// to it; it trusts the discovery file only while the daemon lock is held.
func Open(ctx context.Context, store string, opts ...Option) (*Client, error) {
	real, err := queue.ResolveStore(store)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("store %s is not a folder", store)
	}
	c := &Client{store: real, storeID: queue.StoreID(real), route: RoutePrefer, command: commandLine()}
	for _, o := range opts {
		o(c)
	}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if _, err := ParseRoute(string(c.route)); err != nil {
		return nil, err
	}
	if c.route == RouteDirect {
		return c, nil
	}
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	if c.nc == nil && c.route == RouteRequire {
		return nil, fmt.Errorf("%s: %w", real, ErrNoDaemon)
	}
	return c, nil
}

// connect finds and connects to the store's daemon, if one is alive.
func (c *Client) connect(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		d, err := c.discover()
		if err != nil || d == nil {
			return err
		}
		nc, err := nats.Connect(d.URL, nats.UserInfo(d.User, d.Password), nats.Timeout(2*time.Second),
			nats.Name("scribe-client"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err == nil {
			c.daemon, c.nc = d, nc
			c.js, err = jetstream.New(nc)
			return err
		}
		// The daemon may be starting or stopping: look again until it
		// answers or lets go of its lock.
		c.log.Debug("connect to daemon", "url", d.URL, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("connect to daemon pid %d at %s: %w", d.PID, d.URL, err)
		case <-time.After(backoff(attempt)):
		}
	}
}

// discover returns the live daemon's discovery, or nil if none holds the
// daemon lock. A daemon that holds the lock but has not yet written its
// discovery file is still starting: wait for it, briefly.
func (c *Client) discover() (*queue.Discovery, error) {
	const starting = 5 * time.Second
	deadline := time.Now().Add(starting)
	for attempt := 0; ; attempt++ {
		alive, err := daemonAlive(c.store)
		if err != nil || !alive {
			return nil, err
		}
		d, err := queue.ReadDiscovery(c.store)
		if err == nil && d.StoreID == c.storeID {
			return d, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("a daemon holds %s but its discovery file is unusable: %v", queue.DaemonLockPath(c.store), err)
		}
		time.Sleep(backoff(attempt))
	}
}

// daemonAlive reports whether some process holds the store's daemon lock.
// The probe holds the lock for an instant at most; a daemon starting at
// that instant retries rather than fail.
func daemonAlive(store string) (bool, error) {
	path := queue.DaemonLockPath(store)
	fl := flock.New(path, flock.SetFlag(os.O_RDONLY))
	ok, err := fl.TryLock()
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("probe %s: %w", path, err)
	}
	if ok {
		_ = fl.Unlock()
		return false, nil
	}
	return true, nil
}

// Daemon returns the discovery of the daemon the client is connected to,
// or nil when it writes directly.
func (c *Client) Daemon() *queue.Discovery { return c.daemon }

// StoreID is the store's ID.
func (c *Client) StoreID() string { return c.storeID }

// Close closes the connection to the daemon, if any.
func (c *Client) Close() error {
	if c.nc != nil {
		c.nc.Close()
	}
	return nil
}

// prepare gives the job an ID if it has none, binds it to the store and
// encodes it. A malformed job returns a *queue.RejectError.
func (c *Client) prepare(job *queue.Job) ([]byte, error) {
	if job.ID == "" {
		job.ID = queue.NewID()
	}
	job.Store = c.storeID
	if job.Submitted.IsZero() {
		job.Submitted = time.Now().UTC()
	}
	return queue.Encode(job)
}

// Submit queues a job and returns once the daemon's queue has stored it:
// from then on it will be applied exactly once. Without a daemon (route
// prefer or direct) the job is applied directly and Submit returns its
// rejection, if any, as an error. A job without an ID gets one.
func (c *Client) Submit(ctx context.Context, job *queue.Job) error {
	data, err := c.prepare(job)
	if err != nil {
		return err
	}
	if c.nc == nil {
		out, err := c.applyDirect(ctx, job)
		if err != nil {
			return err
		}
		return out.Err()
	}
	_, err = c.publish(ctx, job.ID, data)
	return err
}

// Apply submits a job and waits for its outcome. A rejection is an
// outcome, not an error; errors mean the outcome is unknown (the job may
// still be applied later: ask Status with the same ID, or call Apply again,
// never redo it another way). A job whose ID was already applied gets the
// outcome recorded then and changes nothing.
func (c *Client) Apply(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
	data, err := c.prepare(job)
	if err != nil {
		return nil, err
	}
	if c.nc == nil {
		return c.applyDirect(ctx, job)
	}
	// Subscribe before publishing, so the outcome cannot slip past.
	sub, err := c.nc.SubscribeSync(queue.OutcomeSubject(c.storeID, job.ID))
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	dup, err := c.publish(ctx, job.ID, data)
	if err != nil {
		return nil, err
	}
	// Outcomes travel on plain NATS: if one is missed (the job was a
	// duplicate JetStream dropped, or the connection blinked), the journal
	// still has it. Ask it now and then.
	poll := 2 * time.Second
	if dup {
		poll = 0
	}
	for {
		if poll == 0 {
			if l, err := c.lookup(ctx, job.ID); err == nil && l.Found {
				return l.Outcome, nil
			}
			poll = 2 * time.Second
		}
		wait, cancel := context.WithTimeout(ctx, poll)
		m, err := sub.NextMsgWithContext(wait)
		cancel()
		switch {
		case err == nil:
			return queue.DecodeOutcome(m.Data)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("job %s queued, outcome not yet known: %w", job.ID, ctx.Err())
		case errors.Is(err, context.DeadlineExceeded):
			poll = 0
		default:
			return nil, err
		}
	}
}

// publish queues an encoded job. A publish whose fate is unknown (timeout,
// lost connection) is retried with the same ID until ctx ends: JetStream
// and the journal drop the duplicate if the first one got through.
func (c *Client) publish(ctx context.Context, id string, data []byte) (dup bool, err error) {
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		dup, err = queue.Publish(pctx, c.js, c.storeID, id, data)
		cancel()
		if err == nil || errors.Is(err, ErrQueueFull) {
			return dup, err
		}
		c.log.Debug("publish retry", "id", id, "err", err)
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("job %s: queued or not is unknown; retry with the same ID: %w", id, err)
		case <-time.After(backoff(attempt)):
		}
	}
}

// Status returns the recorded outcome of a job ID, or nil if the journal
// has none (yet).
func (c *Client) Status(ctx context.Context, id string) (*queue.Outcome, error) {
	l, err := c.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	return l.Outcome, nil
}

func (c *Client) lookup(ctx context.Context, id string) (*queue.Lookup, error) {
	if !queue.ValidID(id) {
		return nil, queue.Reject(queue.ReasonBadInput, "job id %q is not valid", id)
	}
	var l queue.Lookup
	if c.nc == nil {
		j, err := writer.OpenJournalReadOnly(writer.JournalPath(c.store), 2*time.Second)
		if errors.Is(err, fs.ErrNotExist) {
			return &l, nil
		}
		if err != nil {
			return nil, err
		}
		defer j.Close()
		o, err := j.Outcome(id)
		return &queue.Lookup{Found: o != nil, Outcome: o}, err
	}
	if err := c.request(ctx, []byte(id), &l); err != nil {
		return nil, err
	}
	if l.Error != "" {
		return nil, fmt.Errorf("look up %s: %s", id, l.Error)
	}
	return &l, nil
}

// Report asks the daemon for its status. Without a daemon it returns
// ErrNoDaemon.
func (c *Client) Report(ctx context.Context) (*queue.StatusReport, error) {
	if c.nc == nil {
		return nil, ErrNoDaemon
	}
	var r queue.StatusReport
	return &r, c.request(ctx, nil, &r)
}

func (c *Client) request(ctx context.Context, body []byte, v any) error {
	m, err := c.nc.RequestWithContext(ctx, queue.StatusSubject(c.storeID), body)
	if err != nil {
		return fmt.Errorf("status request: %w", err)
	}
	return jsonUnmarshal(m.Data, v)
}

// applyDirect applies a job as a direct writer: the store lock, fail-fast
// unless WithWait, then the same appliers and journal as the daemon.
func (c *Client) applyDirect(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
	s, err := writer.OpenSessionWait(ctx, c.store, c.wait, writer.SessionOptions{
		LockPath: c.lockPath, Mode: writer.ModeDirect, Command: c.command, Logger: c.log,
	})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res, err := s.Apply([]writer.Entry{{Job: job}})
	if err != nil {
		return nil, err
	}
	return res[0].Outcome, nil
}

func backoff(n int) time.Duration {
	return min(10*time.Millisecond<<min(n, 6), 500*time.Millisecond)
}

func commandLine() string {
	s := ""
	for i, a := range os.Args {
		if i > 0 {
			s += " "
		}
		s += a
		if len(s) > 200 {
			return s[:200] + "…"
		}
	}
	return s
}

func jsonUnmarshal(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("status reply: %w", err)
	}
	return nil
}
