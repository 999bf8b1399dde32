package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer/lock"
)

// Route says whether jobs go through the daemon.
type Route string

// Routes.
const (
	// RoutePrefer uses the daemon if one serves the store, and otherwise
	// writes directly, failing fast if the store is busy. A process that
	// was handed a standing hold of the store (a `scribe lock` child, an
	// exec command) writes directly under that hold.
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

// Timeouts. Each bounds one step, so that a daemon that goes away cannot
// hang a caller whose ctx has no deadline; ctx still bounds the whole.
const (
	// defaultConnectTimeout is how long Open tries to reach a daemon that
	// holds its lock but does not answer (WithConnectTimeout changes it).
	defaultConnectTimeout = 10 * time.Second
	// dialTimeout bounds one connection attempt, TLS handshake included.
	dialTimeout = 5 * time.Second
	// publishTimeout bounds one publish's wait for the queue's ack; a
	// publish that times out is retried with the same ID.
	publishTimeout = 5 * time.Second
	// lookupTimeout bounds one journal look-up through the daemon: a
	// request on a connection that dies would otherwise wait long.
	lookupTimeout = 2 * time.Second
	// conflictCheckTimeout bounds Submit's look-up, after a job was
	// queued, of an older job with its ID: not knowing is no reason to
	// fail a job that is queued.
	conflictCheckTimeout = 2 * time.Second
	// outcomeQueueLen is how many messages a job's outcome subscription
	// holds unread: one outcome is expected, perhaps a few more (a
	// retried submit's, someone else's conflict notice). nats.go's default
	// is 64k slots, a 512 KiB channel made and collected per Apply; when
	// more come than fit, the rest are dropped and the journal is asked.
	outcomeQueueLen = 4
	// unackedWait is how long Apply waits for the outcome of a job sent
	// without the queue's ack before it asks for the ack: well past a
	// busy writer's batches (a few ms), so that it is rarely asked.
	unackedWait = 250 * time.Millisecond
	// outcomePoll is how long Apply listens for an outcome before it asks
	// the journal, in case the message was missed.
	outcomePoll = 2 * time.Second
	// journalOpenTimeout bounds the wait for a read-only open of the
	// journal (Status without a daemon) while a writer commits.
	journalOpenTimeout = 2 * time.Second
)

// options are what Option sets.
type options struct {
	route          Route
	lockPath       string
	configLockPath string
	wait           time.Duration
	command        string
	connectTimeout time.Duration
	log            *slog.Logger
	autostart      *Autostart
	// remote is the store's queue on a NATS server or cluster
	// (WithRemote), nil for the local daemon's.
	remote *queue.Remote
	// maxJobBytes is WithMaxJobBytes's limit, 0 for the default.
	maxJobBytes int
}

// Option configures Open.
type Option func(*options)

// WithRoute sets the route (default RoutePrefer).
func WithRoute(r Route) Option { return func(o *options) { o.route = r } }

// WithLockFile makes direct writes take the store lock on path instead of
// <store>/.scribe/lock, to share the lock an existing tool already uses.
// Without it, direct writes take the lock file the store's live daemon
// names in its discovery file, if any; with it, one the daemon does not
// take fails with ErrOtherLockFile.
func WithLockFile(path string) Option { return func(o *options) { o.lockPath = path } }

// WithConfigLockFile names the lock file the store's config file sets
// (lock_file), which `scribe serve` takes: direct writes take it when no
// WithLockFile is given and no live daemon names its own, so that they
// exclude a daemon started later, and the tool that shares it.
func WithConfigLockFile(path string) Option { return func(o *options) { o.configLockPath = path } }

// WithWait makes a direct write wait up to d for a busy store instead of
// failing at once.
func WithWait(d time.Duration) Option { return func(o *options) { o.wait = d } }

// WithCommand describes this process in the lock file while it writes
// directly (default: its command line).
func WithCommand(cmd string) Option { return func(o *options) { o.command = cmd } }

// WithConnectTimeout bounds how long Open tries to reach a daemon that
// holds the store's daemon lock but does not answer (starting, stopping
// or stopped) before it fails with ErrUnavailable. Default 10 s.
func WithConnectTimeout(d time.Duration) Option { return func(o *options) { o.connectTimeout = d } }

// WithLogger sets a logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRemote makes Open queue the store's jobs on a NATS server or
// cluster that r reaches (the store's daemon serves it from there, scribe
// serve --nats-url) instead of looking for a local daemon: Open is then
// OpenRemote with the folder's store ID. A process handed a standing hold
// of the store (a `scribe lock` child) still writes directly under it;
// RouteDirect is an error.
func WithRemote(r queue.Remote) Option { return func(o *options) { o.remote = &r } }

// WithMaxJobBytes sets the largest encoded job a client sends to a
// remote queue (OpenRemote, WithRemote), where no discovery file tells
// the daemon's limit: the daemon's own (serve --max-job-bytes), at most
// queue.MaxJobBytesLimit. Default queue.MaxJobBytes. A local daemon's
// discovery file overrides it; a direct write ignores it.
func WithMaxJobBytes(n int) Option { return func(o *options) { o.maxJobBytes = n } }

// Client writes jobs to one store, by the route Open chose.
type Client struct {
	store   string // "" for a store known by ID only (OpenRemote)
	storeID string
	r       route
	// lockFile is the store lock file WithLockFile named, "" for none;
	// configLockFile WithConfigLockFile's.
	lockFile, configLockFile string
	// maxJobBytes is the largest encoded job sent to a remote queue.
	maxJobBytes int
	// fellBack is why the prefer route writes directly although it was
	// to start a daemon (ErrDaemonRefused); nil otherwise.
	fellBack error
}

// FellBack reports why a client opened with RoutePrefer and WithAutostart
// writes directly: the daemon it started exited at once, refusing its
// settings or failing to start (a *DaemonRefusedError, which quotes it).
// It is nil for a client that did not fall back. The problem stays until
// it is fixed (`scribe serve --check-config` finds the settings' ones),
// and each such Open starts a daemon again.
func (c *Client) FellBack() error { return c.fellBack }

// route is how a Client's jobs reach the store: queued (through the
// daemon) or direct (under the store lock). Open picks one for the
// client's lifetime.
type route interface {
	// submit hands over job, prepared and encoded as data; chosen says
	// the caller chose its ID (only such an ID can have been used before).
	submit(ctx context.Context, job *queue.Job, data []byte, chosen bool) error
	// apply hands over job, prepared and encoded as data, and waits for
	// its outcome.
	apply(ctx context.Context, job *queue.Job, data []byte) (*queue.Outcome, error)
	// lookup asks the journal for a valid job ID.
	lookup(ctx context.Context, id string) (*queue.Lookup, error)
	report(ctx context.Context) (*queue.StatusReport, error)
	// cancel asks the daemon to cancel a queued job, a valid ID.
	cancel(ctx context.Context, id string) (*queue.CancelAnswer, error)
	deadLetters(ctx context.Context) (*queue.DeadLetters, error)
	// locate, waitFor and jobs are Locate, Wait and Jobs (jobs.go).
	locate(ctx context.Context, id string) (*queue.Lookup, error)
	waitFor(ctx context.Context, id string) (*queue.Lookup, error)
	jobs(ctx context.Context, q queue.JobsQuery) (*queue.JobList, error)
	// daemon is the discovery of the daemon in use, nil for none.
	daemon() *queue.Discovery
	close() error
}

// Open prepares a client for a store folder, which must exist, and picks
// its route for good. With a route other than RouteDirect it looks for the
// store's daemon and connects to it; it trusts the discovery file only
// while the daemon lock is held. With RoutePrefer and no daemon, the
// client writes directly. A store whose .scribe folder another user could
// change is refused on every route, with a *queue.InsecureError
// (errors.Is(err, queue.ErrInsecure)).
func Open(ctx context.Context, store string, opts ...Option) (*Client, error) {
	real, err := queue.ResolveStore(store)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("store %s is not a folder", store)
	}
	// Every route reads or writes .scribe: none trusts one another user
	// could change (queue.Layout.Check), and each says so the same way.
	if err := (queue.Layout{Root: real}).Check(); err != nil {
		return nil, err
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	c := &Client{store: real, storeID: queue.StoreID(real), maxJobBytes: o.maxJobBytes, lockFile: o.lockPath, configLockFile: o.configLockPath}
	// Direct writes take the lock the store's daemon takes, or they would
	// not exclude it: its lock file when none was given, and none other.
	// A hold handed down is on that file too. A mismatch matters only
	// when the client writes directly. Learning that file looks for the
	// daemon, as the queued route does anyway: only when it is needed.
	lockFile := sync.OnceValues(func() (string, error) { return discovery.LockFile(real, o.lockPath, o.configLockPath) })
	// A process handed a standing hold of the store (run by `scribe lock`,
	// or by the daemon as an exec command) writes under it: queued, its
	// job would wait for the holder, which may be waiting for it.
	inherited := false
	if o.route == RoutePrefer && holdHandedDown() {
		lockPath, err := lockFile()
		inherited = err == nil && lock.InheritedHold(real, lockPath)
	}
	if o.remote != nil && !inherited {
		if c.r, err = openRemote(ctx, real, c.storeID, *o.remote, o); err != nil {
			return nil, err
		}
		return c, nil
	}
	if o.route != RouteDirect && !inherited {
		q, err := openQueued(ctx, real, c.storeID, o)
		switch {
		case errors.Is(err, ErrDaemonRefused) && o.route == RoutePrefer:
			// A daemon started on demand that cannot start (its
			// settings, a port) does not fail the write: it goes the
			// direct route, as with no daemon, and the caller is told.
			c.fellBack = err
			o.log.Warn("writing directly", "err", err)
		case err != nil:
			return nil, err
		}
		if q != nil {
			c.r = q
			return c, nil
		}
		if o.route == RouteRequire {
			return nil, fmt.Errorf("%s: %w", real, ErrNoDaemon)
		}
	}
	lockPath, err := lockFile()
	if err != nil {
		return nil, err
	}
	d := &direct{
		store: real, lockPath: lockPath, wait: o.wait, command: o.command, log: o.log,
		fallback: o.route == RoutePrefer && !inherited,
	}
	c.r = d
	if inherited {
		// Look-ups still ask a live daemon: only it knows the queue. None
		// is started for them.
		o.autostart = nil
		c.r = &held{direct: d, find: func(ctx context.Context) (*queued, error) {
			return openQueued(ctx, real, c.storeID, o)
		}}
	}
	return c, nil
}

// newOptions applies opts to the defaults and checks the result.
func newOptions(opts []Option) (options, error) {
	o := options{route: RoutePrefer, command: commandLine(), connectTimeout: defaultConnectTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var err error
	if o.route, err = ParseRoute(string(o.route)); err != nil {
		return o, err
	}
	if o.maxJobBytes < 0 || o.maxJobBytes > queue.MaxJobBytesLimit {
		return o, fmt.Errorf("max job bytes %d: want 1 to %d (0: the default)", o.maxJobBytes, queue.MaxJobBytesLimit)
	}
	if o.remote != nil && o.route == RouteDirect {
		return o, fmt.Errorf("%w: the direct route writes the store's folder here, not through the queue at %s", ErrRemoteConfig, o.remote.URL)
	}
	return o, nil
}

// Daemon returns the discovery of the local daemon the client is
// connected to, or nil when it writes directly or its queue is remote
// (OpenRemote, WithRemote: no discovery file names the daemon).
func (c *Client) Daemon() *queue.Discovery { return c.r.daemon() }

// Queued reports whether the client's jobs go through a queue, a local
// daemon's or a remote one, rather than being written directly.
func (c *Client) Queued() bool {
	_, ok := c.r.(*queued)
	return ok
}

// StoreID is the store's ID.
func (c *Client) StoreID() string { return c.storeID }

// Close closes the connection to the daemon, if any, for good.
func (c *Client) Close() error { return c.r.close() }

// prepare gives the job an ID if it has none, binds it to the store,
// trims the leading "./" from its paths (queue.TrimDotSlash) and encodes
// it. A malformed job returns a *queue.RejectError.
func (c *Client) prepare(job *queue.Job) ([]byte, error) {
	if job.ID == "" {
		job.ID = queue.NewID()
	}
	job.Store = c.storeID
	// People write "./notes.txt"; the wire format takes clean paths only.
	for i := range job.Ops {
		job.Ops[i].Path = queue.TrimDotSlash(job.Ops[i].Path)
		job.Ops[i].Dir = queue.TrimDotSlash(job.Ops[i].Dir)
	}
	if job.Submitted.IsZero() {
		job.Submitted = time.Now().UTC()
	}
	limit := queue.MaxJobBytes // a direct write's (under a hold, too); a daemon says its own
	if c.Queued() {
		if d := c.r.daemon(); d != nil && d.MaxJobBytes > 0 {
			limit = d.MaxJobBytes
		} else if d == nil && c.maxJobBytes > 0 {
			limit = c.maxJobBytes // a remote queue's, as the caller says
		}
	}
	return queue.EncodeLimit(job, limit)
}

// Submit queues a job and returns once the daemon's queue has stored it:
// from then on it will be applied exactly once. Without a daemon (route
// prefer or direct) the job is applied directly and Submit returns its
// rejection, if any, as an error; an exec job, which runs only in the
// daemon, fails with ErrExecNeedsDaemon. A job without an ID gets one.
//
// An ID that was already used by a different job is a *queue.RejectError
// with queue.ReasonIDConflict: the job will not be applied. When the queue
// still holds a job with this ID (JetStream dropped this copy as a
// duplicate), Submit waits, within ctx, for that job's outcome to tell a
// retry of the same job (nil) from a conflict.
func (c *Client) Submit(ctx context.Context, job *queue.Job) error {
	chosen := job.ID != ""
	data, err := c.prepare(job)
	if err != nil {
		return err
	}
	return c.r.submit(ctx, job, data, chosen)
}

// Apply submits a job and waits for its outcome. A rejection is an
// outcome, not an error; errors mean the outcome is unknown (the job may
// still be applied later: ask Status with the same ID, or call Apply again,
// never redo it another way). A job whose ID was already applied gets the
// outcome recorded then and changes nothing; one whose ID was used by a
// different job is rejected with queue.ReasonIDConflict.
//
// A direct write to a busy store fails with a *BusyError (ErrBusy), at
// once or, with WithWait, once the wait runs out. An exec job runs only
// in the daemon: without one it fails with ErrExecNeedsDaemon before
// anything is done.
func (c *Client) Apply(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
	data, err := c.prepare(job)
	if err != nil {
		return nil, err
	}
	return c.r.apply(ctx, job, data)
}

// Status looks a job ID up in the journal: its recorded outcome, or, when
// there is none (yet), whether older outcomes have been pruned.
func (c *Client) Status(ctx context.Context, id string) (*queue.Lookup, error) {
	if p := queue.IDProblem(id); p != "" {
		return nil, queue.Reject(queue.ReasonBadInput, "%s", p)
	}
	return c.r.lookup(ctx, id)
}

// Cancel cancels a job still queued, not yet decided: the daemon records
// its outcome, rejected with queue.ReasonCancelled, before it answers, so
// the job is never applied, and whoever waits for it gets that outcome.
// It returns that outcome, also when the job was cancelled before:
// cancelling twice gives the same result.
//
// A job already decided, or in the writer's hand (being applied, its
// command running or deferred), is too late: a *TooLateError (ErrTooLate).
// An ID with no outcome that is not queued fails with ErrUnknownJob.
// Without a daemon Cancel fails with ErrNoDaemon (also when the daemon
// dies before it answers and the journal holds no outcome of the job:
// whether it was cancelled is then not known yet); while another process
// holds the store, so that the cancellation cannot be recorded, with
// ErrBusy (nothing was changed; try again). An invalid ID is a
// *queue.RejectError.
func (c *Client) Cancel(ctx context.Context, id string) (*queue.Outcome, error) {
	if p := queue.IDProblem(id); p != "" {
		return nil, queue.Reject(queue.ReasonBadInput, "%s", p)
	}
	a, err := c.r.cancel(ctx, id)
	if err != nil {
		return nil, err
	}
	switch a.Result {
	case queue.CancelDone:
		if a.Outcome == nil {
			return nil, fmt.Errorf("cancel %s: the daemon's answer has no outcome", id)
		}
		return a.Outcome, nil
	case queue.CancelTooLate:
		return nil, &TooLateError{ID: id, State: a.State, Outcome: a.Outcome, Detail: a.Detail}
	case queue.CancelUnknown:
		return nil, fmt.Errorf("cancel %s: %w: %s", id, ErrUnknownJob, a.Detail)
	case queue.CancelBusy:
		return nil, fmt.Errorf("cancel %s: %w: %s", id, ErrBusy, a.Detail)
	}
	if a.Error != "" {
		return nil, fmt.Errorf("cancel %s: %s", id, a.Error)
	}
	return nil, fmt.Errorf("cancel %s: the daemon's answer %q is not known", id, a.Result)
}

// Report asks the daemon for its status. Without a daemon it returns
// ErrNoDaemon.
func (c *Client) Report(ctx context.Context) (*queue.StatusReport, error) {
	return c.r.report(ctx)
}

// DeadLetters asks the daemon for the messages its queue received without
// a readable job ID (newest first). Without a daemon it returns
// ErrNoDaemon.
func (c *Client) DeadLetters(ctx context.Context) (*queue.DeadLetters, error) {
	return c.r.deadLetters(ctx)
}

// holdHandedDown reports whether this process's environment hands it a
// hold of some store (lock.InheritedHold tells whether of this one):
// without one, there is nothing to ask.
func holdHandedDown() bool {
	return os.Getenv(lock.EnvLockID) != "" && os.Getenv(lock.EnvLockToken) != ""
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
