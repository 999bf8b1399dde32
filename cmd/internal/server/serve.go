package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/cmd/internal/config"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer/claim"
	"github.com/scribehq/scribe/writer/daemon"
	"github.com/scribehq/scribe/writer/exec"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// Serve is `scribe serve`: the daemon of one store or several
// (writer/daemon), from its flags and config file. It parses its own
// flags (serveflags.go).
func Serve() cli.Command {
	return cli.Command{
		Name: "serve",
		Forms: []cli.Form{
			{Args: "--store DIR [flags]", Summary: "run the daemon for a store"},
			{Args: "--store DIR --nats-url URL [flags]", Summary: "… its queue on a NATS cluster"},
			{Args: "--nats-config FILE [--store DIR]", Summary: "run a NATS cluster node (serving DIR through it)"},
		},
		Heavy: true,
		Run: func(ctx context.Context, m *cli.Main, args []string) error {
			return (&serveCommand{m}).Run(ctx, args)
		},
	}
}

// serveCommand runs the daemon of one store, or of several stores with
// one queue server (docs/running.md#several-stores).
type serveCommand struct{ *cli.Main }

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
func (c *serveCommand) Run(ctx context.Context, args []string) error {
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
	batch := fs.Int("batch", daemon.DefaultBatchSize, "most `jobs` per batch")
	idle := fs.Duration("idle-release", daemon.DefaultIdleRelease, "release the store lock after this long `idle`")
	grace := fs.Duration("hand-off-grace", daemon.DefaultHandOffGrace, "stay away this `long` after letting a waiting direct writer in")
	warnAfter := fs.Duration("warn-after", daemon.DefaultWarnAfter, "warn when another holder has kept the store this `long`")
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
	cfg, sources, err := config.Apply(fs, one, *configFile)
	if err != nil {
		return config.ReportErrors(c.Stderr, err)
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
	for _, st := range stores {
		if err := requireStore(st.path); err != nil {
			return err
		}
	}
	ignored, err := checkOwnConfigs(stores, cfg)
	if err != nil {
		return err
	}
	if len(stores) == 0 { // --check-config without a store
		if err := cfg.CheckCommandLocks(config.StoreLockPaths("", *lockFile)); err != nil {
			return config.ReportErrors(c.Stderr, err)
		}
	}
	for _, st := range stores {
		if err := cfg.CheckCommandLocks(config.StoreLockPaths(st.path, st.lockFile)); err != nil {
			return config.ReportErrors(c.Stderr, err)
		}
		if real, err := queue.ResolveStore(st.path); err == nil {
			if err := cfg.CheckCommandDirs(real); err != nil {
				return config.ReportErrors(c.Stderr, err)
			}
		}
	}
	for _, st := range stores {
		if err := checkLockFileFolder(st.lockFile); err != nil {
			return err // else the writer would wait for ever for a lock it cannot take
		}
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
	if nf.Creds != "" && onCommandLine["creds"] && !cluster {
		log.Warn("creds is ignored: it is the daemon's credentials for a queue on a NATS server or cluster (nats_url or nats_config)", "creds", nf.Creds)
	}
	for _, o := range ignored {
		log.Warn("this daemon does not read the store's own config file", "store", o.store, "file", o.file, "ignored", o.keys)
	}
	dcfg := daemon.Config{
		Queue: daemon.Queue{
			Host: *host, Port: *port, SyncInterval: syncInterval, Dir: *queueDir,
			Limits:     queue.Limits{MaxJobs: *maxJobs, MaxBytes: *maxBytes, MaxJobBytes: *maxJobBytes},
			NodeConfig: *natsConfig,
		},
		ExitIdle: *exitIdle,
		Writer:   daemon.Settings{BatchSize: *batch, IdleRelease: *idle, HandOffGrace: *grace, WarnAfter: *warnAfter, Retention: *retention},
		Metrics:  daemon.Metrics{Addr: *metricsAddr, TokenFile: *metricsToken},
		Command:  "scribe " + strings.Join(os.Args[1:], " "),
		Version:  c.Version,
		Logger:   log,
	}
	if cfg != nil {
		dcfg.Commands = cfg.Commands // the exec allowlist: none without a file
	}
	if cluster {
		dcfg.Queue.Remote, dcfg.Queue.Limits.Replicas, dcfg.Queue.ClaimTTL = nf.Remote, *replicas, *claimTTL
	}
	for _, st := range stores {
		dcfg.Stores = append(dcfg.Stores, daemon.Store{Path: st.path, LockFile: st.lockFile})
	}
	if *checkConfig {
		// What serve would refuse, --check-config refuses (with a store
		// to check it for: without one it prints the settings only).
		if err := dcfg.Check(); err != nil && len(stores) > 0 {
			return usageError("%v", err)
		}
		config.Print(c.Stdout, fs, cfg, sources)
		printStores(c.Stdout, stores)
		return nil
	}
	tuneGC()
	ready := newNotifier() // before any command runs: they must not inherit NOTIFY_SOCKET
	dcfg.Ready = func(status string) {
		ready.notify(log, "READY=1", fmt.Sprintf("MAINPID=%d", os.Getpid()), "STATUS="+status)
	}
	dcfg.Stopping = func() { ready.notify(log, "STOPPING=1") }
	d, err := daemon.Start(ctx, dcfg)
	switch {
	case errors.Is(err, daemon.ErrConfig):
		return usageError("%v", err)
	case err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled):
		log.Info("shutting down")
		return nil // stopped while standing by
	case err != nil:
		return err
	}
	return d.Run(ctx)
}

// servedStores are the stores to serve: those of the command line (each
// --store), else the config file's [[store]] tables, else $SCRIBE_STORE.
// --lock-file (or the top-level lock_file) names the store lock of one
// store only.
func servedStores(fset *flag.FlagSet, args storeList, one string, cfg *config.File, lockFile string) ([]storeSpec, error) {
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

// ownConfig names the keys of a store's own config file that the daemon
// does not read.
type ownConfig struct {
	store, file string
	keys        []string
}

// checkOwnConfigs looks at the own config files of the stores served that
// the daemon does not read: every store's for a daemon of several (it
// reads --config only), the store's for one given --config. The store's
// lock file must be the same in both: the daemon takes its own, the
// store's commands run with no daemon (a direct write, scribe lock) take
// the store's own file's, and two lock files exclude nothing. A daemon of
// one store that names no lock file takes the store file's (as it does
// without --config); any other difference stops the start. It returns,
// for a warning, the keys of each file it ignores.
func checkOwnConfigs(stores []storeSpec, cfg *config.File) ([]ownConfig, error) {
	var ignored []ownConfig
	for i := range stores {
		st := &stores[i]
		path := config.Path(st.path)
		if cfg != nil && lock.SameFile(path, cfg.Path) {
			continue // the file read
		}
		var own *config.File
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			if own, err = config.Read(path); err != nil {
				return nil, fmt.Errorf("store %s: %w", st.path, err)
			}
		}
		switch {
		case own != nil && own.LockFile != nil && st.lockFile == "" && len(stores) == 1:
			st.lockFile = *own.LockFile
		case own != nil && own.LockFile != nil:
			mine, _ := discovery.ResolveLockFile(st.path, st.lockFile)
			theirs, _ := discovery.ResolveLockFile(st.path, *own.LockFile)
			if st.lockFile == "" || !(mine == theirs || lock.SameFile(mine, theirs)) {
				where := "set it in the store's [[store]] table of --config (docs/config.md#several-stores)"
				if len(stores) == 1 {
					where = fmt.Sprintf("this daemon would take %s: give none, or the same", mine)
				}
				return nil, fmt.Errorf("store %s: its config file %s sets lock_file %s, which this daemon does not read: %s",
					st.path, path, *own.LockFile, where)
			}
		case st.lockFile != "" && len(stores) > 1:
			return nil, fmt.Errorf("store %s: its [[store]] table sets lock_file %s, which the store's commands run without the daemon do not read (they read %s): set lock_file = %s there too (docs/config.md#several-stores)",
				st.path, st.lockFile, path, strconv.Quote(st.lockFile))
		}
		if own == nil {
			continue
		}
		var keys []string // autostart is submit's, lock_file checked above
		for k := range own.Lines {
			if k != "lock_file" && k != "autostart" {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			slices.Sort(keys)
			ignored = append(ignored, ownConfig{st.path, path, keys})
		}
	}
	return ignored, nil
}

// embeddedOnly are serve's flags for the embedded queue only: they mean
// nothing for a queue on a shared NATS server, whose settings are its own.
var embeddedOnly = []string{"host", "port", "sync", "queue-dir", "exit-idle"}

// checkClusterFlags refuses flags given on the command line that a queue
// on a shared NATS server does not take.
func checkClusterFlags(given map[string]bool) error {
	var bad []string
	for _, name := range embeddedOnly {
		if given[name] {
			bad = append(bad, "--"+name)
		}
	}
	if len(bad) > 0 {
		return usageError("%s: for the embedded queue only, not with --nats-url or --nats-config (docs/cluster.md)", strings.Join(bad, ", "))
	}
	return nil
}
