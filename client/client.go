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
	"sync"
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
	// ErrUnavailable means a daemon holds the store but does not answer,
	// or none runs while jobs may still wait in its queue. Jobs must not be
	// written directly then by the prefer route: they would overtake (or
	// race) the queued ones. Start the daemon, or use RouteDirect.
	ErrUnavailable = errors.New("the store's daemon does not answer")
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

// WithConnectTimeout bounds how long Open tries to reach a daemon that
// holds the store's daemon lock but does not answer (starting, stopping
// or stopped) before it fails with ErrUnavailable. Default 10 s.
func WithConnectTimeout(d time.Duration) Option { return func(c *Client) { c.connectTimeout = d } }

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

	connectTimeout time.Duration

	mu     sync.Mutex // guards the connection, replaced if the daemon restarts
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
	c := &Client{store: real, storeID: queue.StoreID(real), route: RoutePrefer, command: commandLine(), connectTimeout: 10 * time.Second}
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
	if nc, _ := c.conn(); nc == nil && c.route == RouteRequire {
		return nil, fmt.Errorf("%s: %w", real, ErrNoDaemon)
	}
	return c, nil
}

// connect finds and connects to the store's daemon, if one is alive. A
// daemon that holds its lock but cannot be reached within the connect
// timeout is ErrUnavailable.
func (c *Client) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		d, err := c.discover(ctx)
		if err != nil || d == nil {
			return err
		}
		nc, js, err := dial(d)
		if err == nil {
			c.mu.Lock()
			c.daemon, c.nc, c.js = d, nc, js
			c.mu.Unlock()
			return nil
		}
		c.log.Debug("connect to daemon", "url", d.URL, "err", err)
		if !sleep(ctx, backoff(attempt)) {
			return fmt.Errorf("%w: pid %d at %s: %v", ErrUnavailable, d.PID, d.URL, err)
		}
	}
}

func dial(d *queue.Discovery) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(d.URL, nats.UserInfo(d.User, d.Password), nats.Timeout(2*time.Second),
		nats.Name("scribe-client"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		// While disconnected, fail a publish at once (it is retried, or
		// redialled to a restarted daemon) rather than buffer it.
		nats.ReconnectBufSize(-1))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// redial follows a daemon that restarted (a new URL and credentials in its
// discovery file) after the connection was lost. It keeps the old
// connection if no other daemon has taken over.
func (c *Client) redial(ctx context.Context) {
	d, err := c.discover(ctx)
	if err != nil || d == nil {
		return // no daemon now: keep waiting, a job is never redone directly
	}
	c.mu.Lock()
	same := c.daemon != nil && *d == *c.daemon
	c.mu.Unlock()
	if same {
		return
	}
	nc, js, err := dial(d)
	if err != nil {
		return
	}
	c.mu.Lock()
	old := c.nc
	c.daemon, c.nc, c.js = d, nc, js
	c.mu.Unlock()
	old.Close()
	c.log.Debug("reconnected to a restarted daemon", "url", d.URL, "pid", d.PID)
}

// conn returns the current connection to the daemon, nil without one.
func (c *Client) conn() (*nats.Conn, jetstream.JetStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nc, c.js
}

// discover returns the live daemon's discovery, or nil if none holds the
// daemon lock. A daemon that holds the lock but has not yet written its
// discovery file is still starting: wait for it until ctx ends.
func (c *Client) discover(ctx context.Context) (*queue.Discovery, error) {
	for attempt := 0; ; attempt++ {
		alive, err := daemonAlive(c.store)
		if err != nil || !alive {
			return nil, err
		}
		d, err := queue.ReadDiscovery(c.store)
		if err == nil && d.StoreID == c.storeID {
			return d, nil
		}
		if !sleep(ctx, backoff(attempt)) {
			return nil, fmt.Errorf("%w: it holds %s but has not announced itself (%v)", ErrUnavailable, queue.DaemonLockPath(c.store), err)
		}
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
func (c *Client) Daemon() *queue.Discovery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.daemon
}

// StoreID is the store's ID.
func (c *Client) StoreID() string { return c.storeID }

// Close closes the connection to the daemon, if any.
func (c *Client) Close() error {
	if nc, _ := c.conn(); nc != nil {
		nc.Close()
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
	if nc, _ := c.conn(); nc == nil {
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
	nc, _ := c.conn()
	if nc == nil {
		return c.applyDirect(ctx, job)
	}
	// Subscribe before publishing, so the outcome cannot slip past.
	sub, err := nc.SubscribeSync(queue.OutcomeSubject(c.storeID, job.ID))
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	dup, err := c.publish(ctx, job.ID, data)
	if err != nil {
		return nil, err
	}
	// Outcomes travel on plain NATS: if one is missed (the job was a
	// duplicate JetStream dropped, the connection blinked, the daemon
	// restarted), the journal still has it. Ask it now and then.
	lookupNow := dup
	for {
		if now, _ := c.conn(); now != nc { // redialled: listen on the new connection
			nc = now
			_ = sub.Unsubscribe()
			if sub, err = nc.SubscribeSync(queue.OutcomeSubject(c.storeID, job.ID)); err != nil {
				return nil, err
			}
			lookupNow = true
		}
		if lookupNow {
			// Bounded: on a dead connection a request would wait for ever.
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			l, err := c.lookup(lctx, job.ID)
			cancel()
			if err == nil && l.Found {
				return l.Outcome, nil
			}
			if !nc.IsConnected() {
				c.redial(ctx)
			}
		}
		wait, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := sub.NextMsgWithContext(wait)
		cancel()
		switch {
		case err == nil:
			// Anyone who may submit can make the server publish here (a
			// publish's reply subject is the publisher's choice): only this
			// job's outcome counts; anything else means "ask the journal".
			if o, derr := queue.DecodeOutcome(m.Data); derr == nil && o.ID == job.ID {
				return o, nil
			}
			lookupNow = true
		case ctx.Err() != nil:
			return nil, fmt.Errorf("job %s queued, outcome not yet known: %w", job.ID, ctx.Err())
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrBadSubscription):
			lookupNow = true
			if !nc.IsConnected() {
				c.redial(ctx)
			}
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
		_, js := c.conn()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		dup, err = queue.Publish(pctx, js, c.storeID, id, data)
		cancel()
		if err == nil || errors.Is(err, ErrQueueFull) {
			return dup, err
		}
		c.log.Debug("publish retry", "id", id, "err", err)
		if !sleep(ctx, backoff(attempt)) {
			return false, fmt.Errorf("job %s: whether it was queued is unknown; retry with the same ID: %w (%w)", id, ctx.Err(), err)
		}
		if nc, _ := c.conn(); !nc.IsConnected() {
			c.redial(ctx)
		}
	}
}

// Status looks a job ID up in the journal: its recorded outcome, or, when
// there is none (yet), whether older outcomes have been pruned.
func (c *Client) Status(ctx context.Context, id string) (*queue.Lookup, error) {
	return c.lookup(ctx, id)
}

func (c *Client) lookup(ctx context.Context, id string) (*queue.Lookup, error) {
	if !queue.ValidID(id) {
		return nil, queue.Reject(queue.ReasonBadInput, "job id %q is not valid", id)
	}
	var l queue.Lookup
	if nc, _ := c.conn(); nc == nil {
		j, err := writer.OpenJournalReadOnly(writer.JournalPath(c.store), 2*time.Second)
		if errors.Is(err, fs.ErrNotExist) {
			return &l, nil
		}
		if err != nil {
			return nil, err
		}
		defer j.Close()
		l, err := j.Lookup(id)
		return &l, err
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
	if nc, _ := c.conn(); nc == nil {
		return nil, ErrNoDaemon
	}
	var r queue.StatusReport
	return &r, c.request(ctx, nil, &r)
}

// DeadLetters asks the daemon for the messages its queue received without
// a readable job ID (newest first). Without a daemon it returns
// ErrNoDaemon.
func (c *Client) DeadLetters(ctx context.Context) (*queue.DeadLetters, error) {
	if nc, _ := c.conn(); nc == nil {
		return nil, ErrNoDaemon
	}
	var d queue.DeadLetters
	if err := c.request(ctx, []byte(queue.DeadLettersRequest), &d); err != nil {
		return nil, err
	}
	if d.Error != "" {
		return nil, errors.New(d.Error)
	}
	return &d, nil
}

func (c *Client) request(ctx context.Context, body []byte, v any) error {
	nc, _ := c.conn()
	m, err := nc.RequestWithContext(ctx, queue.StatusSubject(c.storeID), body)
	if err != nil {
		return fmt.Errorf("status request: %w", err)
	}
	return jsonUnmarshal(m.Data, v)
}

// applyDirect applies a job as a direct writer: the store lock, fail-fast
// unless WithWait, then the same appliers and journal as the daemon.
func (c *Client) applyDirect(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
	if why := queue.Stranded(c.store); c.route == RoutePrefer && why != "" {
		return nil, fmt.Errorf("%w: no daemon serves %s, but jobs may still be queued (%s); start scribe serve to apply them, or write with --route direct to go past them", ErrUnavailable, c.store, why)
	}
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
	s.MaybePrune(0) // direct writes' own outcomes; rarely does anything
	return res[0].Outcome, nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
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
