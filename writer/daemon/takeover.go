package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scribehq/scribe/embednats"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// target is where a store's queued jobs move to, and how the store's
// queue-home note is to read once they are there.
type target struct {
	// into moves the jobs of t.From in (embednats.Server.TakeOver, or
	// embednats.TakeOverInto).
	into func(ctx context.Context, t embednats.TakeOverConfig) (int, error)
	// dir is the shared queue folder the jobs move to, "" for the store's
	// own folder or a cluster: what the note says once they are there.
	dir string
	// own says that the store's own queue folder is a source: it is not
	// the target's own server.
	own bool
	// verify, if set, runs first: the store's stream must be right where
	// the jobs go.
	verify func(ctx context.Context) error
}

// embeddedTarget is the embedded server, for st: a daemon of one store
// keeps its queue in the store's own folder, a daemon of several in its
// shared queue folder.
func (d *Daemon) embeddedTarget(st *store) target {
	t := target{into: d.srv.TakeOver}
	if d.qd != nil {
		t.dir, t.own = d.qd.Dir(), true
	}
	return t
}

// clusterTarget is the shared NATS server: the store's stream there must
// exist as the writer wants it, or be free to create, and no writer there
// drains the queues of the store's former paths.
func (d *Daemon) clusterTarget(js jetstream.JetStream, st *store) target {
	return target{
		own: true,
		into: func(ctx context.Context, t embednats.TakeOverConfig) (int, error) {
			return embednats.TakeOverInto(ctx, js, t)
		},
		verify: func(ctx context.Context) error {
			for attempt := 0; ; attempt++ {
				_, err := queue.VerifyStream(ctx, js, st.id, d.cfg.Queue.Limits)
				if err == nil {
					return nil
				}
				if !queue.Transient(err) || ctx.Err() != nil {
					return fmt.Errorf("store %s: %w", st.path, err)
				}
				d.log.Info("the store's stream cannot be placed yet; retrying", "store", st.path, "err", err)
				if !queue.Sleep(ctx, retryPause(attempt)) {
					return ctx.Err()
				}
			}
		},
	}
}

// takeOver moves st's queued jobs into the queue it is served from now,
// to, from wherever they are kept, before its writer starts: from the
// shared queue folder of the daemon of several stores that served it last
// (its queue-home note names it), holding that folder meanwhile, and from
// the store's own folder, where a daemon of the store alone kept them
// (whatever the note says: one of a version without notes may have
// served it). The note is changed to say where they are before their old
// queue is deleted (embednats.TakeOverConfig.Moved), and once more at the
// end, so that a crash at any instant leaves it naming a queue that holds
// them (jobs copied twice are duplicates the journal recognises). This is
// the one take-over, for every kind of queue.
func (d *Daemon) takeOver(ctx context.Context, st *store, to target) error {
	if to.verify != nil {
		if err := to.verify(ctx); err != nil {
			return err
		}
	}
	note := func() error {
		if to.dir == "" {
			return st.lk.ClearQueueHome()
		}
		return st.lk.SetQueueHome(to.dir)
	}
	home, err := discovery.ReadQueueHome(st.path)
	if err != nil {
		return err
	}
	switch {
	case home == nil:
	case home.Dir != to.dir:
		if err := d.takeOverFromShared(ctx, st, home, to, note); err != nil {
			return err
		}
	case home.StoreID != st.id:
		// Moved while served from this folder: its former queue is the
		// account of its former ID, here.
		for _, u := range d.srv.Unserved() {
			if u.StoreID == home.StoreID {
				return fmt.Errorf("store %s: %w: %d jobs of the store, queued under its former ID %s, wait in %s; serve the store alone once to apply them (scribe serve --store %s --exit-idle 1s), then add it again",
					st.path, embednats.ErrFormerQueue, u.Jobs, u.StoreID, to.dir, shellQuote(st.path))
			}
		}
	}
	if to.own {
		own := embednats.QueueSource{Dir: queue.Layout{Root: st.path}.Queue(), StoreID: st.id}
		n, err := to.into(ctx, embednats.TakeOverConfig{StoreID: st.id, From: own, Limits: d.cfg.Queue.Limits, Moved: note, Logger: d.log})
		if err != nil {
			return fmt.Errorf("store %s: %w", st.path, err)
		}
		d.tookOver(st, n, own.Dir, "took over the store's queued jobs from its own queue folder")
	}
	if err := note(); err != nil {
		return err
	}
	if to.dir != "" {
		return d.qd.Remember(st.id, st.path)
	}
	return nil
}

// takeOverFromShared takes a store's jobs over from the shared queue
// folder home names, holding that folder meanwhile: a daemon that uses it
// (and does not serve the store) keeps them there, and this start stops,
// saying where they are.
func (d *Daemon) takeOverFromShared(ctx context.Context, st *store, home *discovery.QueueHome, to target, note func() error) error {
	src := embednats.QueueSource{Dir: home.JetStream(), StoreID: home.StoreID, Shared: true}
	has, err := src.HasQueue()
	if err != nil || !has {
		return err
	}
	qd, err := discovery.TakeQueueDir(ctx, home.Dir, []string{st.path}, d.log)
	switch {
	case errors.Is(err, discovery.ErrQueueDirBusy):
		return fmt.Errorf("store %s: its queued jobs are kept in the shared queue folder of the daemon that served it last, and %w, which does not serve the store: add the store to that daemon, or stop it, so that this one takes the jobs over (docs/running.md#several-stores)",
			st.path, err)
	case err != nil:
		return fmt.Errorf("store %s: its queued jobs are in the shared queue folder %s: %w", st.path, home.Dir, err)
	}
	defer qd.Close()
	n, err := to.into(ctx, embednats.TakeOverConfig{StoreID: st.id, From: src, Limits: d.cfg.Queue.Limits, Moved: note, Logger: d.log})
	if err != nil {
		return fmt.Errorf("store %s: %w", st.path, err)
	}
	d.tookOver(st, n, home.Dir, "took over the store's queued jobs from the shared queue folder")
	return qd.Remember(home.StoreID, "")
}

// tookOver logs that n of st's jobs moved from dir: on a cluster, into
// the shared queue; else as msg says.
func (d *Daemon) tookOver(st *store, n int, from, msg string) {
	if n == 0 {
		return
	}
	if d.cfg.Queue.cluster() {
		msg = "moved the store's queued jobs into the shared queue"
	}
	d.log.Info(msg, "store", st.path, "jobs", n, "from", from)
}
