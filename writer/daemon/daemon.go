package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scribehq/scribe/embednats"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer/claim"
	"github.com/scribehq/scribe/writer/daemon/metricsaddr"
	"github.com/scribehq/scribe/writer/exec"
	"github.com/scribehq/scribe/writer/lock"
)

// Config configures a Daemon. Stores is required, but for a daemon that is
// only a node of a NATS cluster (Queue.NodeConfig). Its problems are
// errors that match ErrConfig, naming each setting by its `scribe serve`
// flag.
type Config struct {
	// Stores are the stores to serve, each at most once: one, or several
	// with one queue server.
	Stores []Store
	// Queue is where the stores' jobs wait: the embedded server by
	// default, or a NATS server or cluster that other daemons reach too.
	Queue Queue
	// ExitIdle, if positive, makes Run return once no store has had a
	// job in hand, and every store's queue has been empty, for this long.
	// Only with the embedded queue.
	ExitIdle time.Duration
	// Writer is how every store's writer works.
	Writer Settings
	// Commands is the exec allowlist: the commands exec jobs may run, by
	// name (exec.Index checks it for each store). Without it, exec jobs
	// are rejected.
	Commands []exec.Command
	// Metrics, if its Addr is set, serves Prometheus metrics.
	Metrics Metrics
	// Command describes the daemon in the store lock files, for other
	// processes' error messages; empty means this process's command line.
	Command string
	// Version is the version the daemon reports in its discovery files
	// and status.
	Version string
	// Logger receives the daemon's log; nil discards it.
	Logger *slog.Logger
	// Ready, if set, is called once the daemon serves every store and has
	// announced itself, with a line that says what it serves: for a
	// supervisor's readiness protocol (systemd's READY=1 and STATUS).
	Ready func(status string)
	// Stopping, if set, is called when the daemon begins to stop.
	Stopping func()
}

// Store is a store a Daemon serves.
type Store struct {
	// Path is the store folder; it must exist.
	Path string
	// LockFile is its store lock file; empty means lock.DefaultPath. Set
	// it to share the lock an existing tool already takes.
	LockFile string
}

// Queue says where a Daemon's stores' jobs wait.
type Queue struct {
	// Host and Port are where the embedded server listens; empty and 0
	// mean 127.0.0.1 and a free port. A non-loopback host is warned
	// about.
	Host string
	Port int
	// SyncInterval is how often the embedded server syncs the jobs it
	// stored to disk; 0 means each one, before it is acknowledged. A
	// positive interval is faster, and a power loss can lose the jobs
	// queued in it.
	SyncInterval time.Duration
	// Dir is the shared queue folder of a daemon of several stores on the
	// embedded queue; empty means discovery.DefaultQueueDir. A daemon of
	// one store keeps its queue in the store.
	Dir string
	// Limits bounds each store's queue. Limits.Replicas is for a queue
	// on a cluster, and required there: how many servers keep each
	// store's queue, 1 to 5 (3 survives the loss of one).
	Limits queue.Limits
	// Remote, once its URL is set, is a NATS server or cluster that other
	// daemons may reach too, instead of the embedded server. A claim per
	// store (package claim) keeps one writer per store among them: a
	// daemon that finds another holding it stands by.
	Remote queue.Remote
	// NodeConfig, if set, is a nats-server config file: the daemon runs a
	// node of a NATS cluster from it, in this process, and queues through
	// it (Remote.URL is the node's unless set). Without Stores the daemon
	// is only that node.
	NodeConfig string
	// ClaimTTL is how long a store's claim lasts unrenewed on a cluster
	// (claim.Config.TTL); 0 means claim.DefaultTTL. Every daemon of a
	// store must use the same.
	ClaimTTL time.Duration
}

// cluster reports whether the queue is on a NATS server other daemons
// reach.
func (q Queue) cluster() bool { return q.Remote.URL != "" || q.NodeConfig != "" }

// Metrics says where a Daemon serves its Prometheus metrics.
type Metrics struct {
	// Addr is HOST:PORT or :PORT (on 127.0.0.1) for http://ADDR/metrics,
	// or unix:PATH for a Unix socket only the daemon's user can connect
	// to; empty serves none.
	Addr string
	// TokenFile, if set, is a file (owner-only) with the bearer token a
	// scrape must send; others get 401.
	TokenFile string
}

// ErrConfig matches the errors of a Config that cannot be served.
var ErrConfig = errors.New("invalid daemon configuration")

// configError is a problem of the Config, in the words of serve's flags.
type configError struct{ msg string }

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == ErrConfig }

func badConfig(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}

// Check refuses a Config that cannot be served (an ErrConfig), as Start
// does before anything is touched.
func (c *Config) Check() error {
	cluster := c.Queue.cluster()
	if len(c.Stores) == 0 && c.Queue.NodeConfig == "" {
		return badConfig("--store is required: a daemon serves at least one store")
	}
	seen := map[string]bool{}
	var reals []string
	for _, st := range c.Stores {
		real, err := queue.ResolveStore(st.Path)
		if err != nil {
			return err
		}
		// Before any lock is taken: the second lock of a store named
		// twice would name this daemon as the one that serves it.
		if seen[real] {
			return badConfig("store %s is named twice", real)
		}
		seen[real] = true
		reals = append(reals, real)
	}
	if !cluster && len(c.Stores) > 1 {
		if err := c.Queue.checkSharedDir(reals); err != nil {
			return err
		}
	}
	if err := c.Queue.checkFiles(); err != nil {
		return err
	}
	switch {
	case cluster && c.ExitIdle > 0:
		return badConfig("--exit-idle: not with --nats-url or --nats-config (a daemon of a shared queue stands by)")
	case cluster && (c.Queue.Limits.Replicas < 1 || c.Queue.Limits.Replicas > 5):
		return badConfig("--replicas %d: want 1 to 5", c.Queue.Limits.Replicas)
	case cluster && c.Queue.ClaimTTL != 0 && c.Queue.ClaimTTL < 100*time.Millisecond:
		return badConfig("--claim-ttl %v: want at least 100ms", c.Queue.ClaimTTL)
	case !cluster && (c.Queue.Limits.Replicas > 1 || c.Queue.ClaimTTL != 0):
		return badConfig("--replicas and --claim-ttl are for a queue on a NATS cluster: give --nats-url or --nats-config")
	case c.Queue.SyncInterval < 0:
		return badConfig("--sync %v: want always or a positive duration", c.Queue.SyncInterval)
	case c.Queue.SyncInterval > 0 && c.Queue.SyncInterval < time.Millisecond:
		// The queue's server draws a jitter from a tenth of it.
		return badConfig("--sync %v: want always or at least 1ms", c.Queue.SyncInterval)
	case c.Queue.Host != "" && net.ParseIP(c.Queue.Host) == nil && !resolves(c.Queue.Host):
		return badConfig("--host %q: not an IP address, nor a name this machine resolves", c.Queue.Host)
	case c.Metrics.TokenFile != "" && c.Metrics.Addr == "":
		return badConfig("--metrics-token-file needs --metrics-addr")
	case c.Queue.Port < 0 || c.Queue.Port > 65535:
		return badConfig("--port %d: want 0 to 65535", c.Queue.Port)
	}
	if err := metricsaddr.Check(c.Metrics.Addr); err != nil {
		return badConfig("--metrics-addr: %v", err)
	}
	if err := c.Queue.Limits.Check(); err != nil {
		return badConfig("--max-job-bytes: %v", err)
	}
	return nil
}

// resolves reports whether this machine resolves host to an address.
func resolves(host string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	return err == nil && len(addrs) > 0
}

// checkSharedDir refuses a shared queue folder of a daemon of several
// stores that is inside one of them (reals, their real paths): a job of
// that store could write the queue's files, another store's jobs among
// them, and its store lock would be the queue folder's.
func (q Queue) checkSharedDir(reals []string) error {
	dir := q.Dir
	if dir == "" {
		var err error
		if dir, err = discovery.DefaultQueueDir(); err != nil {
			return nil // Start reports it
		}
	}
	real := resolveExisting(dir)
	for _, s := range reals {
		if real == s || strings.HasPrefix(real, s+string(filepath.Separator)) {
			return badConfig("--queue-dir %s is inside store %s: a job of that store could change the queue's files; give a folder outside every store served", dir, s)
		}
	}
	return nil
}

// resolveExisting is path made absolute, with the symlinks of its longest
// existing part resolved.
func resolveExisting(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(real, rest)
		}
		if filepath.Dir(p) == p {
			return abs
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// checkFiles refuses a node config or a file of the remote's credentials
// that does not exist, which the queue would only fail on after start.
// (The remote's are read only for a queue on a cluster.)
func (q Queue) checkFiles() error {
	for _, f := range []struct{ flag, path string }{
		{"--nats-config", q.NodeConfig}, {"--creds", q.Remote.Creds}, {"--nkey", q.Remote.NKey},
		{"--tls-ca", q.Remote.CA}, {"--tls-cert", q.Remote.Cert}, {"--tls-key", q.Remote.Key},
	} {
		if f.path == "" || f.flag != "--nats-config" && !q.cluster() {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return badConfig("%s %s: %v", f.flag, f.path, err)
		}
	}
	return nil
}

// Daemon serves one store or many: it holds each store's daemon lock,
// runs or reaches the queue's server, moves each store's queued jobs to
// it from wherever they were kept, runs a Writer per store, and announces
// itself in each store's discovery file, until Run returns or Close.
type Daemon struct {
	cfg Config
	log *slog.Logger

	stores []*store
	srv    *embednats.Server   // the embedded queue's server
	qd     *discovery.QueueDir // the shared queue folder of a daemon of several stores
	watch  *embednats.Watch
	node   *embednats.Node // cluster: the node this process runs
	nc     *nats.Conn      // cluster: the connection to it
	ms     *metricsServer
	met    *metrics
	shared bool // several stores in one embedded server

	stop      chan struct{} // closed by Close
	closeOnce sync.Once
	closeErr  error
	refused   bool // waitIdle refused submitters already
}

// store is one store of the daemon.
type store struct {
	path     string // canonical
	id       string
	lockFile string
	lk       *discovery.Lock
	w        *Writer
	d        queue.Discovery
	claim    *claim.Claim // cluster only
}

// Start starts a daemon that serves cfg.Stores: it takes each store's
// daemon lock (a store another daemon serves stops the start, naming it:
// discovery.ErrRunning), starts the queue's server, or connects to the
// cluster, takes over the jobs each store's former daemon left queued,
// starts the stores' writers and announces the daemon. With a cluster it
// first takes each store's claim, standing by while another daemon holds
// it, until ctx ends. ctx bounds the start only: Run serves, Close stops.
// Nothing is left held when Start fails.
func Start(ctx context.Context, cfg Config) (_ *Daemon, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Command == "" {
		cfg.Command = strings.Join(os.Args, " ")
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: cfg.Logger, stop: make(chan struct{})}
	defer func() {
		if err != nil {
			d.release()
		}
	}()
	if cfg.Metrics.Addr != "" {
		// Bound before the stores are touched: a taken port, a socket in
		// use or a token file others can read fails the start at once.
		if d.ms, err = listenMetrics(cfg.Metrics.Addr, cfg.Metrics.TokenFile, d.log); err != nil {
			return nil, err
		}
		d.met = newMetrics()
	}
	for _, st := range cfg.Stores {
		if fsName := lock.NetworkFilesystem(st.Path); fsName != "" {
			d.log.Warn("the store is on a network filesystem, where flock(2) may not exclude writers on other machines; keep stores on a local disk", "store", st.Path, "fs", fsName)
		}
	}
	if cfg.Queue.cluster() {
		err = d.startCluster(ctx)
	} else {
		err = d.startEmbedded(ctx)
	}
	if err != nil {
		return nil, err
	}
	if d.ms != nil && len(d.stores) > 0 { // before the announcement: a ready daemon answers scrapes
		d.watchMetrics()
		d.ms.Serve(d.met.reg, d.log)
		d.log.Info("serving metrics", "addr", d.ms.Addr(), "url", d.ms.URL(), "token", d.ms.token != "")
	}
	if !cfg.Queue.cluster() { // a cluster's stores announce themselves as they are served
		if err := d.announce(); err != nil {
			return nil, err
		}
		syncMode := "always"
		if cfg.Queue.SyncInterval > 0 {
			syncMode = cfg.Queue.SyncInterval.String()
		}
		for _, st := range d.stores {
			d.log.Info("serving", "store", st.d.Store, "store_id", st.d.StoreID, "url", st.d.URL, "pid", st.d.PID, "sync", syncMode, "exec_commands", len(cfg.Commands))
		}
	}
	if cfg.Ready != nil {
		cfg.Ready(d.status())
	}
	return d, nil
}

// status says what the daemon serves, in a line.
func (d *Daemon) status() string {
	switch {
	case len(d.stores) == 0:
		return "NATS node " + d.node.Name()
	case d.cfg.Queue.cluster():
		return "serving " + d.stores[0].path + " through " + d.cfg.Queue.Remote.URL
	case d.shared:
		return fmt.Sprintf("serving %d stores, queue in %s", len(d.stores), d.qd.Dir())
	}
	return "serving " + d.stores[0].path
}

// writerConfig is the configuration of st's writer, less its connection.
func (d *Daemon) writerConfig(st *store) WriterConfig {
	cfg := WriterConfig{
		Store: st.path, LockPath: st.lockFile, Settings: d.cfg.Writer, Limits: d.cfg.Queue.Limits,
		Command: d.cfg.Command, Version: d.cfg.Version, Logger: d.log, Commands: d.cfg.Commands,
		Moved: st.lk.Moved,
	}
	// The journal holds what a file's fsync has not made durable yet: a
	// queue that is not synced at once need not wait for the files either.
	if cfg.SyncDelay == 0 {
		cfg.SyncDelay = d.cfg.Queue.SyncInterval
	}
	if d.met != nil { // not a nil *metrics in the interface
		cfg.Observer = d.met
	}
	return cfg
}

// startEmbedded serves the stores on the embedded queue. The daemon
// locks first, every store's: they make this each store's only daemon and
// check the .scribe folders; the queue's server runs under them. A store
// another daemon serves stops the start before any store is served.
func (d *Daemon) startEmbedded(ctx context.Context) error {
	cfg := d.cfg
	d.shared = len(cfg.Stores) > 1
	for _, spec := range cfg.Stores {
		lk, err := discovery.Take(ctx, spec.Path, d.log)
		if err != nil {
			return err
		}
		root := lk.Layout().Root
		d.stores = append(d.stores, &store{lk: lk, path: root, id: queue.StoreID(root), lockFile: spec.LockFile})
	}
	ncfg := embednats.Config{Host: cfg.Queue.Host, Port: cfg.Queue.Port, SyncInterval: cfg.Queue.SyncInterval,
		MaxJobBytes: cfg.Queue.Limits.MaxJobBytes, Version: cfg.Version, Logger: d.log}
	var err error
	if d.shared {
		dir := cfg.Queue.Dir
		if dir == "" {
			if dir, err = discovery.DefaultQueueDir(); err != nil {
				return err
			}
		}
		paths := make([]string, len(d.stores))
		for i, st := range d.stores {
			paths[i] = st.path
		}
		if d.qd, err = discovery.TakeQueueDir(ctx, dir, paths, d.log); err != nil {
			return fmt.Errorf("%w; give this daemon a folder of its own with --queue-dir (queue_dir)", err)
		}
		d.srv, err = embednats.StartShared(ctx, d.qd, d.locks(), ncfg)
	} else {
		if cfg.Queue.Dir != "" {
			d.log.Info("a daemon of one store keeps its queue in the store: queue_dir is for a daemon of several", "queue_dir", cfg.Queue.Dir)
		}
		d.srv, err = embednats.Start(ctx, d.stores[0].lk, ncfg)
	}
	if err != nil {
		return err
	}
	// One check of the queue's server for all the writers (embednats.Watch):
	// each writer's own, every second, would wake an idle daemon of many
	// stores that many times.
	d.watch = d.srv.Watch(QueueCheckInterval)
	for _, st := range d.stores {
		if err := d.takeOver(ctx, st, d.embeddedTarget(st)); err != nil {
			if errors.Is(err, queue.ErrNoSpace) {
				return noSpaceError(d.srv.Space(), cfg.Queue.Limits.Bytes())
			}
			return err
		}
	}
	for _, st := range d.stores {
		wcfg := d.writerConfig(st)
		wcfg.Conn, wcfg.CheckQueue, wcfg.QueueOps = d.srv.StoreConn(st.id), d.watch.CheckQueue(), d.srv.QueueOps()
		// OwnServer makes the writer take every other scribe stream it
		// sees for this store's queue under a former path, and apply its
		// jobs to this store. True of a store's own server only. A server
		// of several stores holds other stores' queues: one writer
		// draining them would apply another store's jobs to its own.
		// (Each store's queue is also in an account of its own, which
		// other writers do not see; that must not be the only guard. A
		// moved store's former queue is the account of its former ID:
		// takeOver stops the start and says how to drain it.)
		wcfg.OwnServer = !d.shared
		w, err := NewWriter(ctx, wcfg)
		if errors.Is(err, queue.ErrNoSpace) {
			d.log.Debug("create stream", "err", err)
			return noSpaceError(d.srv.Space(), cfg.Queue.Limits.Bytes())
		}
		if err != nil {
			return err
		}
		st.w = w
		if err := st.w.Start(ctx); err != nil {
			return err
		}
	}
	if d.shared {
		d.reportUnserved()
	}
	for _, st := range d.stores {
		st.d, _ = d.srv.StoreDiscovery(st.id)
		// Direct writers given no lock file take this one (discovery.LockFile).
		if st.d.LockFile, err = discovery.ResolveLockFile(st.d.Store, st.lockFile); err != nil {
			return err
		}
		st.d.IdleReleaseMS = cfg.Writer.idleRelease().Milliseconds()
		st.d.MaxJobBytes = cfg.Queue.Limits.JobBytes()
	}
	return nil
}

// idleRelease is the idle release the writers use.
func (s Settings) idleRelease() time.Duration {
	if s.IdleRelease > 0 {
		return s.IdleRelease
	}
	return DefaultIdleRelease
}

// takeDaemonLock takes the store's daemon lock, waiting while another
// daemon of this host holds it: with the claim in hand, that one has lost
// its own and is leaving.
func takeDaemonLock(ctx context.Context, store string, log *slog.Logger) (*discovery.Lock, error) {
	var last time.Time
	for {
		lk, err := discovery.Take(ctx, store, log)
		if !errors.Is(err, discovery.ErrRunning) {
			return lk, err
		}
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			log.Info("waiting for the daemon that served the store on this host to leave", "err", err)
		}
		if !queue.Sleep(ctx, 100*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

// retryPause is how long to wait before the next attempt at something a
// cluster in transition refuses: 100 ms more each time, up to 1 s.
func retryPause(attempt int) time.Duration {
	return min(time.Duration(attempt+1)*100*time.Millisecond, time.Second)
}

func (d *Daemon) locks() []*discovery.Lock {
	locks := make([]*discovery.Lock, len(d.stores))
	for i, st := range d.stores {
		locks[i] = st.lk
	}
	return locks
}

// Run serves until ctx ends, Close is called, the daemon has been idle
// for Config.ExitIdle, or a store's writer stops on its own: its claim
// lost to another daemon, or the store moved or removed (the error says
// which store). Then it stops as Close does.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go d.watchStores(ctx, cancel)
	if !d.cfg.Queue.cluster() {
		d.refused = d.waitIdle(ctx)
	} else {
		select {
		case <-ctx.Done():
		case <-d.stop:
		}
	}
	lost := context.Cause(ctx)
	if !errors.Is(lost, errWriterStopped) {
		lost = nil
	}
	if err := d.Close(); err != nil && lost == nil {
		return err
	}
	return lost
}

// errWriterStopped wraps why a store's writer stopped on its own.
var errWriterStopped = errors.New("stopping")

// watchStores ends Run (cancel) once a store's writer stops on its own
// (Writer.Err) or a store is no longer at its path: checked every
// storeCheckInterval, so that a daemon whose store moved while idle goes
// and lets one serve it at its new path. It returns when ctx ends or the
// daemon stops.
func (d *Daemon) watchStores(ctx context.Context, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(storeCheckInterval)
	defer tick.Stop()
	stopped := make(chan error, len(d.stores))
	for _, st := range d.stores {
		go func() {
			select {
			case <-st.w.Done():
				if err := st.w.Err(); err != nil {
					stopped <- fmt.Errorf("%w: store %s: %w", errWriterStopped, st.path, err)
				}
			case <-ctx.Done():
			case <-d.stop:
			}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.stop:
			return
		case err := <-stopped:
			d.log.Error("a store's writer stopped; stopping the daemon", "err", err)
			cancel(err)
			return
		case <-tick.C:
			for _, st := range d.stores {
				if err := st.lk.Moved(); err != nil {
					err = fmt.Errorf("%w: %w", errWriterStopped, err)
					d.log.Error("a store was moved or removed while served; stopping the daemon", "err", err)
					cancel(err)
					return
				}
			}
		}
	}
}

// storeCheckInterval is how often a daemon checks that its stores are
// still at their paths.
const storeCheckInterval = time.Second

// Close stops the daemon and waits for it: clients stop finding it, those
// connected are cut off (they submit again, through discovery, to the
// next daemon), each writer finishes the batch in hand, jobs left queued
// are marked stranded where they wait, and everything it held is let go.
// Calling it again returns the first call's error.
func (d *Daemon) Close() error {
	d.closeOnce.Do(func() {
		close(d.stop)
		d.closeErr = d.shutdown()
	})
	return d.closeErr
}

// noSpaceError explains a queue whose --max-bytes JetStream cannot
// reserve: how much it asked for, how much there is, and what to change.
func noSpaceError(sp embednats.Space, maxBytes int64) error {
	avail := max(sp.Limit-sp.Reserved, 0)
	free := "unknown"
	if sp.Free >= 0 {
		free = embednats.FormatBytes(sp.Free)
	}
	return fmt.Errorf("%w: it reserves --max-bytes up front, %s (%d bytes), but JetStream lets it reserve only %s in %s "+
		"(%.0f%% of the space free when JetStream started, plus what the queue held; %s free now, %s reserved already); "+
		"lower --max-bytes to at most %d, or free space",
		queue.ErrNoSpace, embednats.FormatBytes(maxBytes), maxBytes, embednats.FormatBytes(avail), sp.Dir,
		embednats.JetStreamShare*100, free, embednats.FormatBytes(sp.Reserved), avail)
}

// shellQuote quotes s for a sh command line when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@%,=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
