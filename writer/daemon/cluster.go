package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/scribehq/scribe/embednats"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer/claim"
)

// startCluster serves the stores through a shared NATS server. Each
// store's writer first takes the store's claim (claim.Acquire): while
// another daemon holds it, this one stands by, and takes over when that
// one stops or stops renewing. Then it takes the store's daemon lock,
// waiting while a former holder on this host leaves, moves the jobs the
// store's embedded queue still holds into the shared one, and serves.
// Without stores, a node only serves its part of the cluster.
func (d *Daemon) startCluster(ctx context.Context) error {
	cfg := d.cfg
	remote := cfg.Queue.Remote
	if cfg.Queue.NodeConfig != "" {
		node, err := embednats.StartNode(ctx, embednats.NodeConfig{ConfigFile: cfg.Queue.NodeConfig, Logger: d.log})
		if err != nil {
			return err
		}
		d.node = node
		if remote.URL == "" {
			remote.URL = node.ClientURL()
			d.cfg.Queue.Remote.URL = remote.URL
		}
		if len(cfg.Stores) == 0 {
			return nil
		}
		if err := node.WaitJetStream(ctx); err != nil {
			return err
		}
	}
	log := d.log
	nc, err := remote.Connect(nats.Name("scribe-daemon"), nats.CustomInboxPrefix(queue.DaemonInboxPrefix),
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
	d.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := waitJetStream(ctx, js, log); err != nil {
		return err
	}
	// Each store on its own: one held by another daemon must not keep
	// this one from serving the others. One that fails stops the start.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, spec := range cfg.Stores {
		wg.Go(func() {
			st, err := d.serveClusterStore(sctx, js, spec)
			mu.Lock()
			defer mu.Unlock()
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
	return ctx.Err() // stopped while standing by
}

// serveClusterStore takes one store's claim, daemon lock and queued jobs,
// and starts its writer. The store it returns, even with an error, holds
// what must be let go.
func (d *Daemon) serveClusterStore(ctx context.Context, js jetstream.JetStream, spec Store) (*store, error) {
	real, err := queue.ResolveStore(spec.Path)
	if err != nil {
		return nil, err
	}
	id := queue.StoreID(real)
	log := d.log.With("store", real, "store_id", id)
	c, err := claim.Acquire(ctx, js, id, claim.Config{
		TTL: d.cfg.Queue.ClaimTTL, Replicas: d.cfg.Queue.Limits.Replicas, Logger: d.log.With("store", real), // the claim's lines name the store ID
		Holder: "scribe serve --store " + shellQuote(real),
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: claim: %w", real, err)
	}
	st := &store{path: real, id: id, lockFile: spec.LockFile, claim: c}
	log.Info("holding the store's claim", "token", c.Token(), "claim_ttl", c.TTL())
	if st.lk, err = takeDaemonLock(ctx, real, log); err != nil {
		return st, err
	}
	if err := d.takeOver(ctx, st, d.clusterTarget(js, st)); err != nil {
		return st, err
	}
	cfg := d.writerConfig(st)
	cfg.Conn, cfg.Claim = d.nc, c
	if st.w, err = NewWriter(ctx, cfg); err != nil {
		return st, fmt.Errorf("store %s: %w", real, err)
	}
	if err := st.w.Start(ctx); err != nil {
		return st, err
	}
	st.d = queue.Discovery{
		URL: d.cfg.Queue.Remote.URL, PID: os.Getpid(), Version: d.cfg.Version, Store: real, StoreID: id,
		Started: time.Now().UTC(), IdleReleaseMS: d.cfg.Writer.idleRelease().Milliseconds(), MaxJobBytes: d.cfg.Queue.Limits.JobBytes(),
		Queue: queue.QueueNATS,
	}
	if st.d.LockFile, err = discovery.ResolveLockFile(real, spec.LockFile); err != nil {
		return st, err
	}
	if err := st.lk.Announce(&st.d); err != nil {
		return st, err
	}
	log.Info("serving", "url", d.cfg.Queue.Remote.URL, "pid", st.d.PID, "replicas", d.cfg.Queue.Limits.Replicas, "exec_commands", len(d.cfg.Commands))
	return st, nil
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
		if !queue.Sleep(ctx, retryPause(attempt)) {
			return ctx.Err()
		}
	}
}
