package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scribehq/scribe/embednats"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/claim"
	"github.com/scribehq/scribe/writer/exec"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// ServeCommand runs the daemon of one store, or of several stores with
// one queue server (docs/running.md#several-stores).
type ServeCommand struct{ *Main }

// storeList is serve's --store, which may be given once per store.
type storeList []string

func (l *storeList) String() string { return strings.Join(*l, ", ") }

func (l *storeList) Set(s string) error {
	if s == "" {
		return errors.New("empty store folder")
	}
	*l = append(*l, s)
	return nil
}

// storeSpec is a store to serve, as the command line or the config file
// names it.
type storeSpec struct {
	path     string // the folder as given
	lockFile string // its store lock file; "" for the default
	from     string // where it was named, for --check-config
}

// Run parses flags and serves until ctx ends (SIGINT/SIGTERM), then shuts
// down gracefully: the batch in hand is finished and the lock released.
func (c *ServeCommand) Run(ctx context.Context, args []string) error {
	// Every daemon starts here, by hand, under a supervisor or on demand:
	// it keeps nothing its starter had open but 0-2, or a hook's caller
	// reading the hook's output to EOF would wait for the daemon to exit.
	inherited := exec.CloseInherited()
	fs := c.newFlagSet("serve", "--store DIR [--store DIR…] [flags]")
	var storeArgs storeList
	fs.Var(&storeArgs, "store", "store `folder`; give it once per store to serve several stores with one daemon (default $SCRIBE_STORE)")
	host := fs.String("host", "127.0.0.1", "listen `address` (non-loopback addresses are warned about)")
	port := fs.Int("port", 0, "listen `port` (0: a free one)")
	syncFlag := fs.String("sync", "always", "queue durability: `always` (fsync each stored job) or an interval such as 1s (faster; a power loss can lose jobs queued in it)")
	lockFile := fs.String("lock-file", "", "store lock `file` (default <store>/.scribe/lock); share an existing tool's lock. One store only: a daemon of several sets each store's in its [[store]] table")
	batch := fs.Int("batch", writer.DefaultBatchSize, "most `jobs` per batch")
	idle := fs.Duration("idle-release", writer.DefaultIdleRelease, "release the store lock after this long `idle`")
	grace := fs.Duration("hand-off-grace", writer.DefaultHandOffGrace, "stay away this `long` after letting a waiting direct writer in")
	warnAfter := fs.Duration("warn-after", writer.DefaultWarnAfter, "warn when another holder has kept the store this `long`")
	maxJobs := fs.Int64("max-jobs", queue.DefaultMaxJobs, "most `jobs` queued per store")
	maxJobBytes := fs.Int("max-job-bytes", queue.MaxJobBytes, fmt.Sprintf("largest encoded `job` taken, up to %d (JetStream stores messages of up to 32 MiB); clients learn it from daemon.json", queue.MaxJobBytesLimit))
	maxBytes := fs.Int64("max-bytes", queue.DefaultMaxBytes, "most `bytes` queued per store, reserved on disk up front (JetStream lets all streams reserve 75% of the free space)")
	retention := fs.Duration("retention", journal.DefaultRetention, "keep job outcomes this `long` (a resubmitted ID older than this would apply again)")
	level := fs.String("log-level", "info", "log `level`: debug, info, warn, error")
	logFormat := fs.String("log-format", "text", "log `format` on stderr: text or json (one JSON object a line)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics, such as :9464 (on 127.0.0.1; non-loopback hosts are warned about), or on a Unix socket only the daemon's user can connect to, unix:PATH (its folder must be the user's, writable by no one else); off when empty")
	metricsToken := fs.String("metrics-token-file", "", "with --metrics-addr: answer only scrapes that send the token in this `file` (owner-only, mode 0600) as Authorization: Bearer TOKEN; others get 401")
	exitIdle := fs.Duration("exit-idle", 0, "exit cleanly once no job has been in hand and the queue has been empty this `long` (0: never; autostarted daemons get submit's --exit-idle); with several stores, all of them")
	queueDir := fs.String("queue-dir", "", "the shared queue `folder` of a daemon of several stores (default $XDG_STATE_HOME/scribe/queue, or ~/.local/state/scribe/queue); a daemon of one store keeps its queue in the store")
	configFile := fs.String("config", "", "TOML config `file` (default <store>/.scribe/config.toml when present and one store is named); flags given override it (docs/config.md)")
	checkConfig := fs.Bool("check-config", false, "check the config file, print the settings serve would run with and where each comes from, and exit")
	var nf natsFlags // --nats-url and its credentials (docs/cluster.md)
	nf.registerConn(fs)
	natsConfig := fs.String("nats-config", "", "run a NATS node of a cluster in this process, from a nats-server config `file` (cluster, accounts, TLS, jetstream store_dir), and queue through it; without --store the process is only a node (docs/cluster.md)")
	replicas := fs.Int("replicas", 1, "with --nats-url or --nats-config: how many servers keep each store's queue, 1 or 3 (3 survives the loss of one)")
	claimTTL := fs.Duration("claim-ttl", claim.DefaultTTL, "with --nats-url or --nats-config: a writer's claim on a store lasts this `long` unrenewed; a standby daemon takes the store over this long after its writer stops (all daemons of a store must agree)")
	if err := parse(fs, args); err != nil {
		return err
	}
	clusterOnlyGiven := given(fs, "replicas") || given(fs, "claim-ttl") // on the command line
	if !given(fs, "nats-url") {
		nf.URL = "" // a daemon's queue is named by its command line or config file, never by a client's environment
	}
	bareNode := *natsConfig != "" && len(storeArgs) == 0 && *configFile == "" && os.Getenv("SCRIBE_STORE") == ""
	// The store whose own config file is the default: the one named.
	one := ""
	switch len(storeArgs) {
	case 0:
		one = os.Getenv("SCRIBE_STORE")
	case 1:
		one = storeArgs[0]
	}
	// As before there were several: a store named on the command line, or
	// none and no file to name them, is checked first.
	if !*checkConfig && !bareNode && (len(storeArgs) == 1 || len(storeArgs) == 0 && *configFile == "") {
		if err := requireStore(one); err != nil {
			return err
		}
	}
	if fs.NArg() > 0 {
		return usageError("serve takes no arguments, got %q", fs.Args())
	}
	cfg, sources, err := applyConfig(fs, one, *configFile)
	if err != nil {
		return reportConfigErrors(c.Stderr, err)
	}
	onCommandLine := map[string]bool{} // or in the config file
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	cluster := nf.URL != "" || *natsConfig != ""
	if cluster {
		if nf.URL != "" && *natsConfig != "" {
			return usageError("--nats-url and --nats-config: give one (a node of --nats-config is the server)")
		}
		if err := checkClusterFlags(onCommandLine); err != nil {
			return err
		}
		if *replicas < 1 || *replicas > 5 {
			return usageError("--replicas %d: want 1 to 5", *replicas)
		}
		if *claimTTL < 100*time.Millisecond {
			return usageError("--claim-ttl %v: want at least 100ms", *claimTTL)
		}
	} else if clusterOnlyGiven {
		return usageError("--replicas and --claim-ttl are for a queue on a NATS cluster: give --nats-url or --nats-config")
	}
	stores, err := servedStores(fs, storeArgs, one, cfg, *lockFile)
	if err != nil {
		return err
	}
	bareNode = *natsConfig != "" && len(stores) == 0 // a node needs no store
	if len(stores) == 0 && !*checkConfig && !bareNode {
		return usageError("--store is required (or set $SCRIBE_STORE, or list [[store]] tables in --config)")
	}
	if !*checkConfig {
		seen := map[string]bool{}
		for _, st := range stores {
			if err := requireStore(st.path); err != nil {
				return err
			}
			// Before any lock is taken: the second lock of a store named
			// twice would name this daemon as the one that serves it.
			if real, err := queue.ResolveStore(st.path); err == nil {
				if seen[real] {
					return usageError("store %s is named twice", real)
				}
				seen[real] = true
			}
		}
	}
	if len(stores) == 0 { // --check-config without a store
		if err := cfg.CheckCommandLocks(storeLockPaths("", *lockFile)); err != nil {
			return reportConfigErrors(c.Stderr, err)
		}
	}
	for _, st := range stores {
		if err := cfg.CheckCommandLocks(storeLockPaths(st.path, st.lockFile)); err != nil {
			return reportConfigErrors(c.Stderr, err)
		}
	}
	for _, st := range stores {
		if err := checkLockFileFolder(st.lockFile); err != nil {
			return err // else the writer would wait for ever for a lock it cannot take
		}
	}
	var commands []exec.Command // the exec allowlist: none without a file
	if cfg != nil {
		commands = cfg.Commands
	}
	var syncInterval time.Duration
	if *syncFlag != "always" {
		d, err := time.ParseDuration(*syncFlag)
		if err != nil || d <= 0 {
			return usageError("--sync %q: want always or a positive duration", *syncFlag)
		}
		syncInterval = d
	}
	log, err := c.serveLogger(*level, *logFormat)
	if err != nil {
		return err
	}
	if len(inherited) > 0 {
		log.Debug("closed the descriptors inherited from the starter", "fds", inherited)
	}
	if *checkConfig {
		printConfig(c.Stdout, fs, cfg, sources)
		printStores(c.Stdout, stores)
		return nil
	}
	shared := len(stores) > 1 && !cluster
	if shared {
		if err := checkOwnConfigs(stores, cfg, log); err != nil {
			return err
		}
		if *queueDir == "" {
			if *queueDir, err = discovery.DefaultQueueDir(); err != nil {
				return err
			}
		}
	} else if *queueDir != "" && !cluster {
		log.Info("a daemon of one store keeps its queue in the store: queue_dir is for a daemon of several", "queue_dir", *queueDir)
	}
	ready := newNotifier() // before any command runs: they must not inherit NOTIFY_SOCKET
	var ms *metricsServer
	var met *metrics
	var observer writer.Observer // nil, not a nil *metrics, without metrics
	if *metricsToken != "" && *metricsAddr == "" {
		return usageError("--metrics-token-file needs --metrics-addr")
	}
	if *metricsAddr != "" {
		if ms, err = listenMetrics(*metricsAddr, *metricsToken, log); err != nil {
			return err
		}
		defer ms.Close()
		met = newMetrics()
		observer = met
	}
	for _, st := range stores {
		if fsName := lock.NetworkFilesystem(st.path); fsName != "" {
			log.Warn("the store is on a network filesystem, where flock(2) may not exclude writers on other machines; keep stores on a local disk", "store", st.path, "fs", fsName)
		}
	}
	limits := queue.Limits{MaxJobs: *maxJobs, MaxBytes: *maxBytes, MaxJobBytes: *maxJobBytes}
	if err := limits.Check(); err != nil {
		return usageError("--max-job-bytes: %v", err)
	}
	// What every store's writer shares; each adds its store and queue.
	writerCfg := writer.Config{
		BatchSize: *batch, IdleRelease: *idle, HandOffGrace: *grace, WarnAfter: *warnAfter, Retention: *retention,
		Command: "scribe " + strings.Join(os.Args[1:], " "), Version: Version, Logger: log,
		Commands: commands, Observer: observer,
	}
	if cluster {
		limits.Replicas = *replicas
		cs := &clusterServe{
			remote: nf.Remote, natsConfig: *natsConfig, claimTTL: *claimTTL, limits: limits, idle: *idle,
			metrics: ms, met: met, commands: commands, log: log, ready: ready, writerCfg: writerCfg,
		}
		return cs.run(ctx, stores)
	}
	// The daemon locks first, every store's: they make this each store's
	// only daemon and check the .scribe folders; the queue's server runs
	// under them. A store another daemon serves stops the start before
	// any store is served.
	d := &served{log: log, exitIdle: *exitIdle}
	defer d.closeLocks()
	for _, st := range stores {
		lk, err := discovery.Take(ctx, st.path, log)
		if err != nil {
			return err
		}
		d.stores = append(d.stores, &servedStore{lk: lk, path: lk.Layout().Root, id: queue.StoreID(lk.Layout().Root), lockFile: st.lockFile})
	}
	ncfg := embednats.Config{Host: *host, Port: *port, SyncInterval: syncInterval, MaxJobBytes: *maxJobBytes, Version: Version, Logger: log}
	var srv *embednats.Server
	if shared {
		paths := make([]string, len(d.stores))
		for i, st := range d.stores {
			paths[i] = st.path
		}
		if d.qd, err = discovery.TakeQueueDir(ctx, *queueDir, paths, log); err != nil {
			return fmt.Errorf("%w; give this daemon a folder of its own with --queue-dir (queue_dir)", err)
		}
		srv, err = embednats.StartShared(ctx, d.qd, d.locks(), ncfg)
	} else {
		srv, err = embednats.Start(ctx, d.stores[0].lk, ncfg)
	}
	if err != nil {
		return err
	}
	defer srv.Close()
	defer d.withdraw() // clients stop coming before the server goes
	d.srv = srv
	// One check of the queue's server for all the writers (embednats.Watch):
	// each writer's own, every second, would wake an idle daemon of many
	// stores that many times.
	watch := srv.Watch(writer.QueueCheckInterval)
	defer watch.Close()
	if err := d.takeOver(ctx, limits); err != nil {
		if errors.Is(err, queue.ErrNoSpace) {
			return noSpaceError(srv.Space(), *maxBytes)
		}
		return err
	}
	for _, st := range d.stores {
		cfg := writerCfg
		cfg.Store, cfg.LockPath, cfg.Conn, cfg.Limits, cfg.CheckQueue = st.path, st.lockFile, srv.StoreConn(st.id), limits, watch.CheckQueue()
		// OwnServer makes the writer take every other scribe stream it
		// sees for this store's queue under a former path, and apply its
		// jobs to this store. True of a store's own server only. A server
		// of several stores holds other stores' queues: one writer
		// draining them would apply another store's jobs to its own.
		// (Each store's queue is also in an account of its own, which
		// other writers do not see; that must not be the only guard. A
		// moved store's former queue is the account of its former ID:
		// takeOver stops the start and says how to drain it.)
		cfg.OwnServer = !shared
		st.w, err = writer.New(ctx, cfg)
		if errors.Is(err, queue.ErrNoSpace) {
			log.Debug("create stream", "err", err)
			return noSpaceError(srv.Space(), *maxBytes)
		}
		if err != nil {
			return err
		}
		if err := st.w.Start(ctx); err != nil {
			return err
		}
	}
	defer d.closeWriters() // on every early return; a second Close is a no-op
	if shared {
		d.reportUnserved()
	}
	for _, st := range d.stores {
		st.d, _ = srv.StoreDiscovery(st.id)
		// Direct writers given no lock file take this one (discovery.LockFile).
		if st.d.LockFile, err = discovery.ResolveLockFile(st.d.Store, st.lockFile); err != nil {
			return err
		}
		st.d.IdleReleaseMS = idle.Milliseconds()
		st.d.MaxJobBytes = *maxJobBytes
	}
	if ms != nil { // before the announcement: a ready daemon answers scrapes
		d.watchMetrics(met, commands)
		ms.Serve(met.reg, log)
		log.Info("serving metrics", "addr", ms.Addr(), "url", ms.URL(), "token", ms.token != "")
	}
	if err := d.announce(); err != nil {
		return err
	}
	for _, st := range d.stores {
		log.Info("serving", "store", st.d.Store, "store_id", st.d.StoreID, "url", st.d.URL, "pid", st.d.PID, "sync", *syncFlag, "exec_commands", len(commands))
	}
	status := "serving " + d.stores[0].path
	if shared {
		status = fmt.Sprintf("serving %d stores, queue in %s", len(d.stores), d.qd.Dir())
	}
	ready.notify(log, "READY=1", fmt.Sprintf("MAINPID=%d", os.Getpid()), "STATUS="+status)
	refused := d.waitIdle(ctx)
	ready.notify(log, "STOPPING=1")
	log.Info("shutting down")
	// No job may be queued once the writers have counted what they
	// leave queued (the stranded mark): callers stop finding the daemon,
	// and those connected are cut off (they submit again, through
	// discovery, to the next daemon).
	d.withdraw()
	if !refused {
		if err := srv.RefuseSubmitters(); err != nil {
			log.Warn("refuse new jobs while stopping", "err", err)
		}
	}
	if err := d.closeWriters(); err != nil {
		return fmt.Errorf("stop writer: %w", err)
	}
	writer.PausePoint("stopped")
	d.withdraw()
	if shared {
		d.markStranded()
	}
	watch.Close()
	if err := srv.Close(); err != nil {
		return err
	}
	return d.closeLocks()
}

// servedStores are the stores to serve: those of the command line (each
// --store), else the config file's [[store]] tables, else $SCRIBE_STORE.
// --lock-file (or the top-level lock_file) names the store lock of one
// store only.
func servedStores(fset *flag.FlagSet, args storeList, one string, cfg *Config, lockFile string) ([]storeSpec, error) {
	lockOnCommandLine := false
	fset.Visit(func(f *flag.Flag) { lockOnCommandLine = lockOnCommandLine || f.Name == "lock-file" })
	var stores []storeSpec
	switch {
	case len(args) > 0:
		for _, p := range args {
			stores = append(stores, storeSpec{path: p, from: "flag --store"})
		}
	case cfg != nil && len(cfg.Stores) > 0:
		for _, s := range cfg.Stores {
			stores = append(stores, storeSpec{path: s.Path, lockFile: s.LockFile, from: fmt.Sprintf("file %s:%d", cfg.Path, s.Line)})
		}
	case one != "":
		stores = append(stores, storeSpec{path: one, from: "$SCRIBE_STORE"})
	}
	if lockFile != "" {
		switch {
		case len(stores) > 1 && lockOnCommandLine:
			return nil, usageError("--lock-file names the lock of one store; a daemon of several sets each store's lock_file in its [[store]] table of --config")
		case len(stores) > 1:
			return nil, usageError("the config file's lock_file names the lock of one store; a daemon of several sets each store's lock_file in its [[store]] table")
		case len(stores) == 1 && (lockOnCommandLine || stores[0].lockFile == ""):
			stores[0].lockFile = lockFile
		}
	}
	return stores, nil
}

// printStores ends --check-config's output with the stores serve would
// serve, as [[store]] tables.
func printStores(w io.Writer, stores []storeSpec) {
	for _, st := range stores {
		fmt.Fprintf(w, "\n%-40s # %s\n", "[[store]]", st.from)
		fmt.Fprintf(w, "path = %s\n", strconv.Quote(st.path))
		if st.lockFile != "" {
			fmt.Fprintf(w, "lock_file = %s\n", strconv.Quote(st.lockFile))
		}
	}
}

// checkOwnConfigs looks at the stores' own config files, which a daemon
// of several stores does not read (only --config): one that sets the
// store's lock file stops the start, unless --config gives the store the
// same, since the daemon would take another lock than the tool it shares
// the store with, and neither would exclude the other. Other settings are
// only warned about.
func checkOwnConfigs(stores []storeSpec, cfg *Config, log *slog.Logger) error {
	for _, st := range stores {
		path := configPath(st.path)
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) || (cfg != nil && lock.SameFile(path, cfg.Path)) {
			continue
		}
		own, err := ReadConfig(path)
		if err != nil {
			return fmt.Errorf("store %s: %w", st.path, err)
		}
		if own.LockFile != nil {
			mine, _ := discovery.ResolveLockFile(st.path, st.lockFile)
			theirs, _ := discovery.ResolveLockFile(st.path, *own.LockFile)
			if st.lockFile == "" || !(mine == theirs || lock.SameFile(mine, theirs)) {
				return fmt.Errorf("store %s: its config file %s sets lock_file %s, which a daemon of several stores does not read: set it in the store's [[store]] table of --config (docs/config.md#several-stores)",
					st.path, path, *own.LockFile)
			}
		}
		log.Warn("a daemon of several stores reads --config only, not the stores' own config files", "store", st.path, "file", path)
	}
	return nil
}

// served is what the daemon serves: its stores, their queues' server,
// and, for several stores, the shared queue folder.
type served struct {
	stores   []*servedStore
	srv      *embednats.Server
	qd       *discovery.QueueDir // nil for one store
	log      *slog.Logger
	exitIdle time.Duration
}

// servedStore is one store of the daemon.
type servedStore struct {
	path     string // canonical
	id       string
	lockFile string
	lk       *discovery.Lock
	w        *writer.Writer
	d        queue.Discovery
}

func (d *served) locks() []*discovery.Lock {
	locks := make([]*discovery.Lock, len(d.stores))
	for i, st := range d.stores {
		locks[i] = st.lk
	}
	return locks
}

// takeOver moves each store's queued jobs into the server before its
// writer starts, from wherever they are kept (discovery.QueueHome): a
// daemon of one store takes them from the shared queue folder of the
// daemon of several that served the store last; a daemon of several takes
// them from another shared folder if the note names one, and from the
// store's own folder (a daemon of the store alone served it before). The
// note says where they are from then on: it is changed once the jobs are
// copied, before their old queue is deleted (embednats.Server.TakeOver).
func (d *served) takeOver(ctx context.Context, limits queue.Limits) error {
	for _, st := range d.stores {
		home, err := discovery.ReadQueueHome(st.path)
		if err != nil {
			return err
		}
		if d.qd == nil {
			if home != nil {
				src := embednats.QueueSource{Dir: home.JetStream(), StoreID: home.StoreID, Shared: true}
				if err := d.takeOverFrom(ctx, st, home, src, limits, st.lk.ClearQueueHome); err != nil {
					return err
				}
			}
			if err := st.lk.ClearQueueHome(); err != nil {
				return err
			}
			continue
		}
		here := func() error { return st.lk.SetQueueHome(d.qd.Dir()) }
		switch {
		case home == nil:
		case home.Dir != d.qd.Dir():
			src := embednats.QueueSource{Dir: home.JetStream(), StoreID: home.StoreID, Shared: true}
			if err := d.takeOverFrom(ctx, st, home, src, limits, here); err != nil {
				return err
			}
		case home.StoreID != st.id:
			// Moved while served from this folder: its former queue is
			// the account of its former ID, here.
			for _, u := range d.srv.Unserved() {
				if u.StoreID == home.StoreID {
					return fmt.Errorf("store %s: %w: %d jobs of the store, queued under its former ID %s, wait in %s; serve the store alone once to apply them (scribe serve --store %s --exit-idle 1s), then add it again",
						st.path, embednats.ErrFormerQueue, u.Jobs, u.StoreID, d.qd.Dir(), shellQuote(st.path))
				}
			}
		}
		// Its own folder too, whatever the note says: a daemon of the
		// store alone (of a version without notes) may have served it.
		own := embednats.QueueSource{Dir: queue.Layout{Root: st.path}.Queue(), StoreID: st.id}
		n, err := d.srv.TakeOver(ctx, st.id, own, limits, here)
		if err != nil {
			return fmt.Errorf("store %s: %w", st.path, err)
		}
		if n > 0 {
			d.log.Info("took over the store's queued jobs from its own queue folder", "store", st.path, "jobs", n, "from", own.Dir)
		}
		if err := here(); err != nil {
			return err
		}
		if err := d.qd.Remember(st.id, st.path); err != nil {
			return err
		}
	}
	return nil
}

// takeOverFrom takes a store's jobs over from the shared queue folder
// home names, holding it meanwhile: a daemon that uses it (and does not
// serve the store) keeps them there, and this start stops, saying where
// they are. moved records that they are here (see TakeOver).
func (d *served) takeOverFrom(ctx context.Context, st *servedStore, home *discovery.QueueHome, src embednats.QueueSource, limits queue.Limits, moved func() error) error {
	has, err := src.HasQueue()
	if err != nil || !has {
		return err
	}
	qd, err := discovery.TakeQueueDir(ctx, home.Dir, []string{st.path}, d.log)
	if errors.Is(err, discovery.ErrQueueDirBusy) {
		return fmt.Errorf("store %s: its queued jobs are kept in the shared queue folder of the daemon that served it last, and %w, which does not serve the store: add the store to that daemon, or stop it, so that this one takes the jobs over (docs/running.md#several-stores)",
			st.path, err)
	}
	if err != nil {
		return err
	}
	defer qd.Close()
	n, err := d.srv.TakeOver(ctx, st.id, src, limits, moved)
	if err != nil {
		return fmt.Errorf("store %s: %w", st.path, err)
	}
	if n > 0 {
		d.log.Info("took over the store's queued jobs from the shared queue folder", "store", st.path, "jobs", n, "from", home.Dir)
	}
	return qd.Remember(home.StoreID, "")
}

// reportUnserved logs the jobs the shared queue folder keeps for stores
// the daemon does not serve, and marks those stores stranded: their
// status says where the jobs are (a daemon that serves such a store
// takes them over).
func (d *served) reportUnserved() {
	known := d.qd.Stores()
	keep := map[string]bool{}
	for _, st := range d.stores {
		keep[st.id] = true
	}
	for _, u := range d.srv.Unserved() {
		keep[u.StoreID] = true
		path := known[u.StoreID]
		d.log.Warn("jobs wait in the shared queue folder for a store this daemon does not serve; they stay there until a daemon serves the store",
			"store", path, "store_id", u.StoreID, "jobs", u.Jobs, "queue_dir", d.qd.Dir())
		if path == "" {
			continue
		}
		if home, err := discovery.ReadQueueHome(path); err != nil || home == nil || home.Dir != d.qd.Dir() {
			continue // not this folder's (any more)
		}
		if live, err := discovery.Find(path); err != nil || live != nil {
			continue
		}
		why := fmt.Sprintf("%d jobs of this store wait in the shared queue folder %s of daemon pid %d, which does not serve it; a daemon serving the store takes them over",
			u.Jobs, d.qd.Dir(), os.Getpid())
		if err := queue.MarkStranded(path, why); err != nil {
			d.log.Warn("mark the store stranded", "store", path, "err", err)
		}
	}
	for id := range known {
		if !keep[id] {
			if err := d.qd.Remember(id, ""); err != nil {
				d.log.Warn("update the shared queue folder's list of stores", "err", err)
			}
		}
	}
}

// markStranded says, in the stranded marker of each store whose jobs
// stay queued at the stop, where they are: in the shared queue folder.
func (d *served) markStranded() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, st := range d.stores {
		n, err := st.w.Queued(ctx)
		if err != nil || n == 0 {
			continue // the writer's own marker stands
		}
		why := fmt.Sprintf("daemon pid %d stopped with %d jobs queued for this store in the shared queue folder %s; a daemon serving the store takes them over",
			os.Getpid(), n, d.qd.Dir())
		if err := queue.MarkStranded(st.path, why); err != nil {
			d.log.Warn("mark the store stranded", "store", st.path, "err", err)
		}
	}
}

// announce writes every store's discovery file; it withdraws them all if
// one fails.
func (d *served) announce() error {
	for _, st := range d.stores {
		if err := st.lk.Announce(&st.d); err != nil {
			d.withdraw()
			return err
		}
	}
	return nil
}

func (d *served) withdraw() {
	for _, st := range d.stores {
		st.lk.Withdraw()
	}
}

// closeWriters stops the writers, all at once: each finishes its batch
// in hand.
func (d *served) closeWriters() error {
	var wg sync.WaitGroup
	errs := make([]error, len(d.stores))
	for i, st := range d.stores {
		if st.w == nil {
			continue
		}
		wg.Go(func() {
			if err := st.w.Close(); err != nil {
				errs[i] = fmt.Errorf("%s: %w", st.path, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// closeLocks releases the shared queue folder and the daemon locks.
func (d *served) closeLocks() error {
	var errs []error
	if d.qd != nil {
		errs = append(errs, d.qd.Close())
	}
	for _, st := range d.stores {
		errs = append(errs, st.lk.Close())
	}
	return errors.Join(errs...)
}

// watchMetrics registers what the metrics say of the stores. With
// several stores the scribe_* metrics are the daemon's, summed over its
// stores; scribe_daemon_info has a series per store.
func (d *served) watchMetrics(met *metrics, commands []exec.Command) {
	first := d.stores[0]
	met.started(first.d.Started, Version, first.path, commands)
	if len(d.stores) == 1 {
		met.watchQueue(first.w)
		return
	}
	for _, st := range d.stores[1:] {
		met.info.WithLabelValues(Version, st.path, st.id).Set(1)
	}
	met.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "scribe_queue_depth",
		Help: "Jobs waiting in the queues of the daemon's stores, not yet applied and acked.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var sum uint64
		for _, st := range d.stores {
			n, err := st.w.Queued(ctx)
			if err != nil {
				return math.NaN()
			}
			sum += n
		}
		return float64(sum)
	}))
}

// waitIdle returns when ctx ends or, with an exit-idle period, once the
// daemon has been idle that long: every store's writer has had no job in
// hand for that long and every queue is empty. Before it returns for
// idleness it makes sure that no job can come that it would leave
// behind: it withdraws the discovery files, so that new clients stop
// coming, then gives the submitters new credentials, which cuts off
// those still connected (a client that read a discovery file a moment
// before could otherwise queue a job after the writers stop, and nothing
// would apply it until some later client started a daemon), and looks
// again. A job queued by then keeps the daemon: it announces itself
// again, with the new credentials, and serves on. A client cut off in
// the middle of a submit does not know whether its job was queued and
// submits it again, with the same ID, through discovery (and autostart).
//
// It reports whether it returned for idleness, submitters refused.
func (d *served) waitIdle(ctx context.Context) (refused bool) {
	if d.exitIdle <= 0 {
		<-ctx.Done()
		return false
	}
	tick := time.NewTicker(min(max(d.exitIdle/4, 10*time.Millisecond), time.Second))
	defer tick.Stop()
	idle := func() bool {
		for _, st := range d.stores {
			if st.w.Idle() < d.exitIdle {
				return false
			}
			if n, err := st.w.Queued(ctx); err != nil || n > 0 {
				return false
			}
		}
		return true
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
		if !idle() {
			continue
		}
		d.withdraw()
		writer.PausePoint("withdrawn")
		err := d.srv.RefuseSubmitters()
		if err == nil && idle() {
			d.log.Info("idle; exiting", "exit_idle", d.exitIdle)
			return true
		}
		for _, st := range d.stores {
			if disc, ok := d.srv.StoreDiscovery(st.id); ok {
				st.d.User, st.d.Password = disc.User, disc.Password
			}
		}
		if err := d.announce(); err != nil {
			d.log.Error("announce again", "err", err)
			return false
		}
		if err != nil {
			// Submitters may still be connected: leaving could leave a
			// job of theirs behind. Serve until stopped.
			d.log.Error("idle, but new jobs cannot be refused: serving on until stopped, not leaving when idle", "err", err)
			<-ctx.Done()
			return false
		}
	}
}

// noSpaceError explains a queue whose --max-bytes JetStream cannot
// reserve: how much it asked for, how much there is, and what to change.
func noSpaceError(sp embednats.Space, maxBytes int64) error {
	if maxBytes <= 0 {
		maxBytes = queue.DefaultMaxBytes
	}
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
