package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/scribehq/scribe/embednats"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/daemon"
	"github.com/scribehq/scribe/writer"
)

// ServeCommand runs the daemon for one store.
type ServeCommand struct{ *Main }

// Run parses flags and serves until ctx ends (SIGINT/SIGTERM), then shuts
// down gracefully: the batch in hand is finished and the lock released.
func (c *ServeCommand) Run(ctx context.Context, args []string) error {
	fs := c.newFlagSet("serve", "--store DIR [flags]")
	store := storeFlag(fs)
	host := fs.String("host", "127.0.0.1", "listen `address` (non-loopback addresses are warned about)")
	port := fs.Int("port", 0, "listen `port` (0: a free one)")
	syncFlag := fs.String("sync", "always", "queue durability: `always` (fsync each stored job) or an interval such as 1s (faster; a power loss can lose jobs queued in it)")
	lockFile := fs.String("lock-file", "", "store lock `file` (default <store>/.scribe/lock); share an existing tool's lock")
	batch := fs.Int("batch", writer.DefaultBatchSize, "most `jobs` per batch")
	idle := fs.Duration("idle-release", writer.DefaultIdleRelease, "release the store lock after this long `idle`")
	grace := fs.Duration("hand-off-grace", writer.DefaultHandOffGrace, "stay away this `long` after letting a waiting direct writer in")
	warnAfter := fs.Duration("warn-after", writer.DefaultWarnAfter, "warn when another holder has kept the store this `long`")
	maxJobs := fs.Int64("max-jobs", queue.DefaultMaxJobs, "most `jobs` queued per store")
	maxBytes := fs.Int64("max-bytes", queue.DefaultMaxBytes, "most `bytes` queued per store, reserved on disk up front (JetStream lets all streams reserve 75% of the free space)")
	retention := fs.Duration("retention", writer.DefaultRetention, "keep job outcomes this `long` (a resubmitted ID older than this would apply again)")
	level := fs.String("log-level", "info", "log `level`: debug, info, warn, error")
	logFormat := fs.String("log-format", "text", "log `format` on stderr: text or json (one JSON object a line)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics, such as :9464 (on 127.0.0.1; non-loopback hosts are warned about); off when empty")
	exitIdle := fs.Duration("exit-idle", 0, "exit cleanly once no job has been in hand and the queue has been empty this `long` (0: never; autostarted daemons get submit's --exit-idle)")
	configFile := fs.String("config", "", "TOML config `file` (default <store>/.scribe/config.toml when present); flags given override it (docs/config.md)")
	checkConfig := fs.Bool("check-config", false, "check the config file, print the settings serve would run with and where each comes from, and exit")
	if err := parse(fs, args); err != nil {
		return err
	}
	if !*checkConfig {
		if err := requireStore(*store); err != nil {
			return err
		}
	}
	if fs.NArg() > 0 {
		return usageError("serve takes no arguments, got %q", fs.Args())
	}
	cfg, sources, err := applyConfig(fs, *store, *configFile)
	if err != nil {
		return reportConfigErrors(c.Stderr, err)
	}
	if err := cfg.CheckCommandLocks(storeLockPaths(*store, *lockFile)); err != nil {
		return reportConfigErrors(c.Stderr, err)
	}
	if err := checkLockFileFolder(*lockFile); err != nil {
		return err // else the writer would wait for ever for a lock it cannot take
	}
	var commands []writer.Command // the exec allowlist: none without a file
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
	if *checkConfig {
		printConfig(c.Stdout, fs, cfg, sources)
		return nil
	}
	ready := newNotifier() // before any command runs: they must not inherit NOTIFY_SOCKET
	var ms *metricsServer
	var met *metrics
	var observer writer.Observer // nil, not a nil *metrics, without metrics
	if *metricsAddr != "" {
		if ms, err = listenMetrics(*metricsAddr, log); err != nil {
			return err
		}
		defer ms.Close()
		met = newMetrics()
		observer = met
	}
	if fsName := writer.NetworkFilesystem(*store); fsName != "" {
		log.Warn("the store is on a network filesystem, where flock(2) may not exclude writers on other machines; keep stores on a local disk", "store", *store, "fs", fsName)
	}
	// The daemon lock first: it makes this the store's only daemon and
	// checks the .scribe folder; the queue's server runs under it.
	lk, err := daemon.Take(ctx, *store, log)
	if err != nil {
		return err
	}
	defer lk.Close()
	srv, err := embednats.Start(ctx, lk, embednats.Config{
		Host: *host, Port: *port, SyncInterval: syncInterval, Version: Version, Logger: log,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	defer lk.Withdraw() // clients stop coming before the server goes
	w, err := writer.New(ctx, writer.Config{
		Store: *store, LockPath: *lockFile, Conn: srv.Conn(), BatchSize: *batch, IdleRelease: *idle,
		HandOffGrace: *grace, WarnAfter: *warnAfter,
		Limits: queue.Limits{MaxJobs: *maxJobs, MaxBytes: *maxBytes}, Retention: *retention,
		Command: "scribe " + strings.Join(os.Args[1:], " "), Version: Version, Logger: log,
		OwnServer: true, CheckQueue: srv.CheckQueue, Commands: commands, Observer: observer,
	})
	if errors.Is(err, queue.ErrNoSpace) {
		log.Debug("create stream", "err", err)
		return noSpaceError(srv.Space(), *maxBytes)
	}
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Close() // on every early return; a second Close is a no-op
	d := srv.Discovery()
	// Direct writers given no lock file take this one (daemon.LockFile).
	if d.LockFile, err = daemon.ResolveLockFile(d.Store, *lockFile); err != nil {
		return err
	}
	d.IdleReleaseMS = idle.Milliseconds()
	if ms != nil { // before the announcement: a ready daemon answers scrapes
		met.started(d.Started, Version, d.Store, commands)
		met.watchQueue(w)
		ms.Serve(met.reg, log)
		log.Info("serving metrics", "addr", ms.Addr(), "url", "http://"+ms.Addr()+"/metrics")
	}
	if err := lk.Announce(&d); err != nil {
		return err
	}
	log.Info("serving", "store", d.Store, "store_id", d.StoreID, "url", d.URL, "pid", d.PID, "sync", *syncFlag, "exec_commands", len(commands))
	ready.notify(log, "READY=1", fmt.Sprintf("MAINPID=%d", d.PID), "STATUS=serving "+d.Store)
	waitIdle(ctx, w, lk, &d, *exitIdle, log)
	ready.notify(log, "STOPPING=1")
	log.Info("shutting down")
	if err := w.Close(); err != nil {
		return fmt.Errorf("stop writer: %w", err)
	}
	lk.Withdraw()
	if err := srv.Close(); err != nil {
		return err
	}
	return lk.Close()
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
