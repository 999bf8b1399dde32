package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/scribehq/scribe/writer/exec"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scribehq/scribe/embednats"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/claim"
)

// clusterServe is what serve needs to serve stores whose queues are on a
// NATS server or cluster that other daemons reach too: an operator's
// (--nats-url), or a node this process runs (--nats-config).
type clusterServe struct {
	remote     queue.Remote
	natsConfig string // a nats-server config file to run a node from
	claimTTL   time.Duration
	limits     queue.Limits
	writerCfg  writer.Config // the settings every store's writer shares
	idle       time.Duration // the idle release, for discovery
	metrics    *metricsServer
	met        *metrics
	commands   []exec.Command
	log        *slog.Logger
	ready      *notifier
}

// serveCluster serves stores through a shared NATS server. Each store's
// writer first takes the store's claim (claim.Acquire): while
// another daemon holds it, this one stands by, and takes over when that
// one stops or stops renewing. Then it takes the store's daemon lock,
// waiting while a former holder on this host leaves, moves the jobs the
// store's embedded queue still holds into the shared one, and serves. A
// writer that loses its claim stops the daemon with an error (a
// supervisor restarts it as a standby). Without stores, a node only
// serves its part of the cluster.
func (cs *clusterServe) run(ctx context.Context, stores []storeSpec) error {
	log := cs.log
	if cs.natsConfig != "" {
		node, err := embednats.StartNode(ctx, embednats.NodeConfig{ConfigFile: cs.natsConfig, Logger: log})
		if err != nil {
			return err
		}
		defer node.Close()
		if cs.remote.URL == "" {
			cs.remote.URL = node.ClientURL()
		}
		if len(stores) == 0 {
			cs.ready.notify(log, "READY=1", fmt.Sprintf("MAINPID=%d", os.Getpid()), "STATUS=NATS node "+node.Name())
			<-ctx.Done()
			cs.ready.notify(log, "STOPPING=1")
			log.Info("shutting down")
			return nil
		}
		if err := node.WaitJetStream(ctx); err != nil {
			return err
		}
	}
	nc, err := cs.remote.Connect(nats.Name("scribe-daemon"), nats.CustomInboxPrefix(queue.DaemonInboxPrefix),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("NATS", "err", err) }),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if !c.IsClosed() { // not this daemon's own Close
				log.Warn("NATS connection lost; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "url", c.ConnectedUrlRedacted()) }))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := waitJetStream(ctx, js, log); err != nil {
		return err
	}

	d := &served{log: log}
	claims := make([]*claim.Claim, len(stores))
	defer func() { // last: a standby takes over once this daemon is gone
		for _, c := range claims {
			if c != nil {
				if err := c.Release(); err != nil {
					log.Warn("release claim", "err", err)
				}
			}
		}
	}()
	defer d.closeLocks()
	defer d.closeWriters()
	// Each store on its own: one held by another daemon must not keep
	// this one from serving the others. One that fails stops the start.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i, spec := range stores {
		wg.Go(func() {
			st, claim, err := cs.serveStore(sctx, nc, js, spec)
			mu.Lock()
			defer mu.Unlock()
			claims[i] = claim
			if st != nil {
				d.stores = append(d.stores, st)
			}
			if err != nil && firstErr == nil && sctx.Err() == nil {
				firstErr = err
				cancel()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if ctx.Err() != nil {
		log.Info("shutting down")
		return nil // stopped while standing by
	}
	if cs.metrics != nil {
		d.watchMetrics(cs.met, cs.commands)
		cs.metrics.Serve(cs.met.reg, log)
	}
	cs.ready.notify(log, "READY=1", fmt.Sprintf("MAINPID=%d", os.Getpid()), "STATUS=serving "+d.stores[0].path+" through "+cs.remote.URL)
	// Until stopped, or until a writer stops on its own: its claim lost.
	lost := make(chan error, len(d.stores))
	for _, st := range d.stores {
		go func() {
			select {
			case <-st.w.Done():
				if err := st.w.Err(); err != nil {
					lost <- fmt.Errorf("store %s: %w", st.path, err)
				}
			case <-ctx.Done():
			}
		}()
	}
	var stopErr error
	select {
	case <-ctx.Done():
	case stopErr = <-lost:
		log.Error("stopping: another daemon is the store's writer now", "err", stopErr)
	}
	cs.ready.notify(log, "STOPPING=1")
	log.Info("shutting down")
	d.withdraw()
	if err := d.closeWriters(); err != nil && stopErr == nil {
		stopErr = fmt.Errorf("stop writer: %w", err)
	}
	return stopErr
}

// serveStore takes one store's claim, daemon lock and queued jobs, and
// starts its writer and announces it.
func (cs *clusterServe) serveStore(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, spec storeSpec) (*servedStore, *claim.Claim, error) {
	real, err := queue.ResolveStore(spec.path)
	if err != nil {
		return nil, nil, err
	}
	id := queue.StoreID(real)
	log := cs.log.With("store", real, "store_id", id)
	claim, err := claim.Acquire(ctx, js, id, claim.Config{
		TTL: cs.claimTTL, Replicas: cs.limits.Replicas, Logger: log,
		Holder: "scribe serve --store " + shellQuote(real),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store %s: claim: %w", real, err)
	}
	log.Info("holding the store's claim", "token", claim.Token(), "claim_ttl", claim.TTL())
	lk, err := takeDaemonLock(ctx, real, log)
	if err != nil {
		return nil, claim, err
	}
	st := &servedStore{lk: lk, path: real, id: id, lockFile: spec.lockFile}
	if err := cs.moveEmbeddedJobs(ctx, js, st); err != nil {
		return st, claim, err
	}
	cfg := cs.writerCfg
	cfg.Store, cfg.LockPath, cfg.Conn, cfg.Claim, cfg.Limits = real, spec.lockFile, nc, claim, cs.limits
	if st.w, err = writer.New(ctx, cfg); err != nil {
		return st, claim, fmt.Errorf("store %s: %w", real, err)
	}
	if err := st.w.Start(ctx); err != nil {
		return st, claim, err
	}
	st.d = queue.Discovery{
		URL: cs.remote.URL, PID: os.Getpid(), Version: Version, Store: real, StoreID: id,
		Started: time.Now().UTC(), IdleReleaseMS: cs.idle.Milliseconds(), MaxJobBytes: cs.limits.JobBytes(),
		Queue: queue.QueueNATS,
	}
	if st.d.LockFile, err = discovery.ResolveLockFile(real, spec.lockFile); err != nil {
		return st, claim, err
	}
	if err := lk.Announce(&st.d); err != nil {
		return st, claim, err
	}
	log.Info("serving", "url", cs.remote.URL, "pid", st.d.PID, "replicas", max(cs.limits.Replicas, 1), "exec_commands", len(cs.commands))
	return st, claim, nil
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
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

// moveEmbeddedJobs moves the jobs the store's embedded queue still holds
// (its own folder's, or a daemon of several stores' shared folder the
// store's note names) into the shared server, oldest first, before the
// writer starts: a store moved to a cluster keeps its queued jobs.
func (cs *clusterServe) moveEmbeddedJobs(ctx context.Context, js jetstream.JetStream, st *servedStore) error {
	for attempt := 0; ; attempt++ {
		_, err := queue.VerifyStream(ctx, js, st.id, cs.limits)
		if err == nil {
			break
		}
		if !queue.Transient(err) || ctx.Err() != nil {
			return fmt.Errorf("store %s: %w", st.path, err)
		}
		cs.log.Info("the store's stream cannot be placed yet; retrying", "store", st.path, "err", err)
		if !sleepCtx(ctx, retryPause(attempt)) {
			return ctx.Err()
		}
	}
	move := func(src embednats.QueueSource) error {
		n, err := embednats.TakeOverInto(ctx, js, st.id, src, cs.limits, nil, false, cs.log)
		if err != nil {
			return fmt.Errorf("store %s: %w", st.path, err)
		}
		if n > 0 {
			cs.log.Info("moved the store's queued jobs into the shared queue", "store", st.path, "jobs", n, "from", src.Dir)
		}
		return nil
	}
	home, err := discovery.ReadQueueHome(st.path)
	if err != nil {
		return err
	}
	if home != nil {
		src := embednats.QueueSource{Dir: home.JetStream(), StoreID: home.StoreID, Shared: true}
		if has, err := src.HasQueue(); err != nil {
			return err
		} else if has {
			qd, err := discovery.TakeQueueDir(ctx, home.Dir, []string{st.path}, cs.log)
			if err != nil {
				return fmt.Errorf("store %s: its queued jobs are in the shared queue folder %s: %w", st.path, home.Dir, err)
			}
			err = move(src)
			if err == nil {
				err = qd.Remember(home.StoreID, "")
			}
			qd.Close()
			if err != nil {
				return err
			}
		}
	}
	if err := move(embednats.QueueSource{Dir: queue.Layout{Root: st.path}.Queue(), StoreID: st.id}); err != nil {
		return err
	}
	return st.lk.ClearQueueHome()
}

// retryPause is how long to wait before the next attempt at something a
// cluster in transition refuses: 100 ms more each time, up to 1 s.
func retryPause(attempt int) time.Duration {
	return min(time.Duration(attempt+1)*100*time.Millisecond, time.Second)
}

// waitJetStream waits until the server answers JetStream requests: a
// cluster elects its meta leader once a majority of its nodes are up.
func waitJetStream(ctx context.Context, js jetstream.JetStream, log *slog.Logger) error {
	var last time.Time
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
			return fmt.Errorf("the NATS server has no JetStream for this user's account: %w", err)
		}
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			log.Info("waiting for JetStream (a cluster needs a majority of its nodes up)", "err", err)
		}
		if !sleepCtx(ctx, retryPause(attempt)) {
			return ctx.Err()
		}
	}
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
		return usageError("%s: not with --nats-url or --nats-config (the NATS server's own settings decide; docs/cluster.md)", strings.Join(bad, ", "))
	}
	return nil
}
