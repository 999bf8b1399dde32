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
	"crypto/tls"
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

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
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
	// ErrUnverified means the server at the discovery file's address did
	// not prove it is the daemon the file names (no TLS, or not the pinned
	// certificate): the client sent it nothing. Open fails with it wrapped
	// in ErrUnavailable once the connect timeout runs out.
	ErrUnverified = queue.ErrUnverified
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

	mu     sync.Mutex // guards the connection, replaced when it is lost
	daemon *queue.Discovery
	nc     *nats.Conn
	js     jetstream.JetStream
	closed bool // by Close: no more redials
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
			return fmt.Errorf("%w: pid %d at %s: %w", ErrUnavailable, d.PID, d.URL, err)
		}
	}
}

// dial connects to the daemon d names, over TLS pinned to d's certificate:
// the server proves it holds that certificate's key before the client
// sends its credentials or anything else. The connection never reconnects
// by itself, since whoever listens on a remembered port after a restart
// may be someone else: a lost connection is closed, and redial goes
// through discovery again.
// dialTimeout bounds one connection attempt, TLS handshake included.
const dialTimeout = 5 * time.Second

func dial(d *queue.Discovery) (*nats.Conn, jetstream.JetStream, error) {
	tc, err := d.TLSConfig()
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(d.URL, nats.Secure(tc), nats.UserInfo(d.User, d.Password),
		nats.Timeout(dialTimeout), nats.Name("scribe-client"), nats.NoReconnect())
	if err != nil {
		var cv *tls.CertificateVerificationError
		switch {
		case errors.As(err, &cv):
			got := "none"
			if len(cv.UnverifiedCertificates) > 0 {
				got = queue.CertFingerprint(cv.UnverifiedCertificates[0].Raw)
			}
			return nil, nil, fmt.Errorf("%w: it presented certificate %s, the discovery file names %s (%w)", ErrUnverified, got, d.TLSCertSHA256, err)
		case errors.Is(err, nats.ErrSecureConnWanted):
			return nil, nil, fmt.Errorf("%w: it does not offer TLS (%w)", ErrUnverified, err)
		}
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// redial is the only way back to a daemon once the connection is lost:
// discovery again (the daemon lock held, its discovery file, its pinned
// certificate), whether the daemon restarted or not. It does nothing while
// the connection is up or no daemon serves the store; a job is never
// redone directly.
func (c *Client) redial(ctx context.Context) {
	c.mu.Lock()
	lost, closed := c.nc, c.closed
	c.mu.Unlock()
	if closed || lost != nil && lost.IsConnected() {
		return
	}
	d, err := c.discover(ctx)
	if err != nil || d == nil {
		return
	}
	nc, js, err := dial(d)
	if err != nil {
		c.log.Debug("redial daemon", "url", d.URL, "err", err)
		return
	}
	c.mu.Lock()
	if c.nc != lost || c.closed { // another call got there first, or Close
		c.mu.Unlock()
		nc.Close()
		return
	}
	c.daemon, c.nc, c.js = d, nc, js
	c.mu.Unlock()
	if lost != nil {
		lost.Close()
	}
	c.log.Debug("redialled the daemon", "url", d.URL, "pid", d.PID)
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

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
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

// Close closes the connection to the daemon, if any, for good.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	nc := c.nc
	c.mu.Unlock()
	if nc != nil {
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
//
// An ID that was already used by a different job is a *queue.RejectError
// with queue.ReasonIDConflict: the job will not be applied. When the queue
// still holds a job with this ID (JetStream dropped this copy as a
// duplicate), Submit waits, within ctx, for that job's outcome to tell a
// retry of the same job (nil) from a conflict.
func (c *Client) Submit(ctx context.Context, job *queue.Job) error {
	chosen := job.ID != "" // only a caller's own ID can have been used before
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
	dup, err := c.publish(ctx, job.ID, data)
	if err != nil || (!dup && !chosen) {
		return err
	}
	digest := job.Digest()
	if !dup {
		// Stored, but the journal may already know the ID from a job that
		// left the dedupe window: then the writer will refuse this one.
		// Ask, briefly (the journal can be busy for a moment); not knowing
		// is no reason to fail a job that is queued.
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		for attempt := 0; ; attempt++ {
			l, err := c.lookup(lctx, job.ID)
			if err == nil {
				if o, ours := judge(job, digest, l.Outcome, false); l.Found && ours {
					return conflictErr(o, digest)
				}
				return nil
			}
			if !sleep(lctx, backoff(attempt)) {
				return nil
			}
		}
	}
	// JetStream swallowed this copy: the job it kept under this ID may be
	// another one. Its outcome says.
	nc, sub, err := c.subscribe(ctx, job.ID)
	if err != nil {
		return fmt.Errorf("job %s: the queue already holds a job with this ID, and whether it is this one is not known yet: %w", job.ID, err)
	}
	o, err := c.await(ctx, job, digest, nc, sub, true)
	if err != nil {
		return fmt.Errorf("job %s: the queue already holds a job with this ID, and whether it is this one is not known yet: %w", job.ID, err)
	}
	return conflictErr(o, digest)
}

// conflictErr is the error Submit returns for outcome o of a job with
// digest: the ID conflict, if o is one, else nil (o is the outcome of
// this same job, queued or decided before).
func conflictErr(o *queue.Outcome, digest string) error {
	if o.Reason == queue.ReasonIDConflict && o.Digest == digest {
		return fmt.Errorf("job %s %w", o.ID, o.Err())
	}
	return nil
}

// Apply submits a job and waits for its outcome. A rejection is an
// outcome, not an error; errors mean the outcome is unknown (the job may
// still be applied later: ask Status with the same ID, or call Apply again,
// never redo it another way). A job whose ID was already applied gets the
// outcome recorded then and changes nothing; one whose ID was used by a
// different job is rejected with queue.ReasonIDConflict.
func (c *Client) Apply(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
	data, err := c.prepare(job)
	if err != nil {
		return nil, err
	}
	if nc, _ := c.conn(); nc == nil {
		return c.applyDirect(ctx, job)
	}
	// Subscribe before publishing, so the outcome cannot slip past.
	nc, sub, err := c.subscribe(ctx, job.ID)
	if err != nil {
		return nil, fmt.Errorf("job %s not queued: %w", job.ID, err)
	}
	dup, err := c.publish(ctx, job.ID, data)
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return c.await(ctx, job, job.Digest(), nc, sub, dup)
}

// subscribe listens for a job's outcome on the connection to the daemon,
// redialling a lost one first (until ctx ends).
func (c *Client) subscribe(ctx context.Context, id string) (*nats.Conn, *nats.Subscription, error) {
	for attempt := 0; ; attempt++ {
		nc, _ := c.conn()
		if !nc.IsConnected() {
			c.redial(ctx)
			nc, _ = c.conn()
		}
		sub, err := nc.SubscribeSync(queue.OutcomeSubject(c.storeID, id))
		if err == nil {
			return nc, sub, nil
		}
		if c.isClosed() || !errors.Is(err, nats.ErrConnectionClosed) {
			return nil, nil, err
		}
		if !sleep(ctx, backoff(attempt)) {
			return nil, nil, fmt.Errorf("%w: no connection to it (%w)", ErrUnavailable, ctx.Err())
		}
	}
}

// await waits for the outcome of a queued job, of digest digest: a
// message on sub (made on nc), or the journal's answer. Outcomes travel on
// plain NATS: if one is missed (the job was a duplicate JetStream dropped,
// the connection was lost, the daemon restarted), the journal still has
// it, so ask it now and then, and at once when lookupNow. A lost
// connection is redialled through discovery, never trusted on its own.
// await unsubscribes whatever subscription it ends with.
func (c *Client) await(ctx context.Context, job *queue.Job, digest string, nc *nats.Conn, sub *nats.Subscription, lookupNow bool) (*queue.Outcome, error) {
	defer func() { _ = sub.Unsubscribe() }()
	subject := queue.OutcomeSubject(c.storeID, job.ID)
	unknown := func() error {
		return fmt.Errorf("job %s queued, outcome not yet known: %w", job.ID, ctx.Err())
	}
	for down := 0; ; {
		if now, _ := c.conn(); now != nc { // redialled: listen on the new connection
			nc = now
			_ = sub.Unsubscribe()
			var err error
			if sub, err = nc.SubscribeSync(subject); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				return nil, err
			}
			lookupNow = true
		}
		if !nc.IsConnected() {
			c.redial(ctx)
			if now, _ := c.conn(); now == nc { // no daemon to go back to yet
				if c.isClosed() {
					return nil, fmt.Errorf("job %s queued, outcome not yet known: %w", job.ID, nats.ErrConnectionClosed)
				}
				if !sleep(ctx, backoff(down)) {
					return nil, unknown()
				}
				down++
			}
			continue
		}
		down = 0
		if lookupNow {
			lookupNow = false
			// Bounded: a request on a connection that dies would wait long.
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			l, err := c.lookup(lctx, job.ID)
			cancel()
			if err == nil && l.Found {
				if o, ours := judge(job, digest, l.Outcome, false); ours {
					return o, nil
				}
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
			if o, derr := queue.DecodeOutcome(m.Data); derr == nil {
				if o, ours := judge(job, digest, o, true); ours {
					return o, nil
				}
			}
			lookupNow = true
		case ctx.Err() != nil:
			return nil, unknown()
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrBadSubscription):
			lookupNow = true
		default:
			return nil, err
		}
	}
}

// judge decides whether outcome o answers job, of digest digest, and what
// the caller gets. Only an outcome with the job's ID counts. An outcome of
// a different job with this ID makes this job an ID conflict, except a
// conflict notice received for yet another job with this ID (received):
// that one is not ours to take, nor a decision on ours.
func judge(job *queue.Job, digest string, o *queue.Outcome, received bool) (*queue.Outcome, bool) {
	if o == nil || o.ID != job.ID {
		return nil, false
	}
	if received && o.Reason == queue.ReasonIDConflict && o.Digest != digest {
		return nil, false
	}
	if rej := o.Conflict(digest); rej != nil {
		return &queue.Outcome{
			V: queue.Version, ID: job.ID, Status: queue.StatusRejected, Reason: rej.Reason, Detail: rej.Detail,
			Epoch: o.Epoch, Mode: o.Mode, At: time.Now().UTC(), Meta: job.Meta, Digest: digest,
		}, true
	}
	return o, true
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
		if c.isClosed() {
			return false, fmt.Errorf("job %s: whether it was queued is unknown; retry with the same ID: %w", id, err)
		}
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
	if nc, _ := c.conn(); !nc.IsConnected() {
		c.redial(ctx)
	}
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
