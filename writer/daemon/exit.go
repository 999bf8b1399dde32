package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer/internal/fault"
)

// shutdown stops what Start started, in order.
func (d *Daemon) shutdown() error {
	if d.cfg.Stopping != nil {
		d.cfg.Stopping()
	}
	d.log.Info("shutting down")
	// Callers stop finding the daemon; the writers stop, each marking
	// what it leaves queued (the stranded mark); then those connected are
	// cut off, and the queues counted again for a job queued meanwhile.
	// The writers stop first because the server's reload that cuts
	// clients off rewires, unlocked, the JetStream API import every
	// writer's pulls go through (a data race in the server).
	d.withdraw()
	var errs []error
	if err := d.closeWriters(); err != nil {
		errs = append(errs, fmt.Errorf("stop writer: %w", err))
	}
	fault.Pause("unserved")
	if d.srv != nil && !d.refused {
		if err := d.srv.RefuseSubmitters(); err != nil {
			d.log.Warn("refuse new jobs while stopping", "err", err)
		}
	}
	fault.Pause("stopped")
	d.withdraw()
	d.markStranded()
	errs = append(errs, d.release())
	return errors.Join(errs...)
}

// release lets go of everything the daemon holds: the claims after the
// locks, so that a standby takes over once this daemon is gone, and
// before the connection they are released through. It is safe on a
// daemon whose start failed half way, and after the writers stopped.
func (d *Daemon) release() error {
	var errs []error
	_ = d.closeWriters() // stopped already, unless the start failed
	if d.watch != nil {
		d.watch.Close()
	}
	if d.srv != nil {
		d.withdraw() // clients stop coming before the server goes
		errs = append(errs, d.srv.Close())
	}
	if d.qd != nil {
		errs = append(errs, d.qd.Close())
	}
	for _, st := range d.stores {
		if st.lk != nil {
			errs = append(errs, st.lk.Close())
		}
	}
	for _, st := range d.stores {
		if st.claim != nil {
			if err := st.claim.Release(); err != nil {
				d.log.Warn("release claim", "err", err)
			}
		}
	}
	if d.nc != nil {
		d.nc.Close()
	}
	if d.node != nil {
		d.node.Close()
	}
	if d.ms != nil {
		d.ms.Close()
	}
	return errors.Join(errs...)
}

// announce writes every store's discovery file; it withdraws them all if
// one fails.
func (d *Daemon) announce() error {
	for _, st := range d.stores {
		if err := st.lk.Announce(&st.d); err != nil {
			d.withdraw()
			return err
		}
	}
	return nil
}

func (d *Daemon) withdraw() {
	for _, st := range d.stores {
		if st.lk != nil {
			st.lk.Withdraw()
		}
	}
}

// closeWriters stops the writers, all at once: each finishes its batch
// in hand. A writer closed already is not closed again.
func (d *Daemon) closeWriters() error {
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

// reportUnserved logs the jobs the shared queue folder keeps for stores
// the daemon does not serve, and marks those stores stranded: their
// status says where the jobs are (a daemon that serves such a store
// takes them over).
func (d *Daemon) reportUnserved() {
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

// markStranded marks stranded each store whose jobs stay queued at the
// stop, counted once no job can come any more (a writer counts when it
// stops), saying where they are when that is the shared queue folder.
func (d *Daemon) markStranded() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, st := range d.stores {
		if st.w == nil {
			continue
		}
		n, err := st.w.Queued(ctx)
		if err != nil || n == 0 {
			continue // the writer's own marker stands
		}
		if st.lk.Moved() != nil {
			continue // the marker at the path is another store's
		}
		why := fmt.Sprintf("daemon pid %d stopped with %d jobs queued", os.Getpid(), n)
		if d.shared {
			why = fmt.Sprintf("daemon pid %d stopped with %d jobs queued for this store in the shared queue folder %s; a daemon serving the store takes them over",
				os.Getpid(), n, d.qd.Dir())
		}
		if err := queue.MarkStranded(st.path, why); err != nil {
			d.log.Warn("mark the store stranded", "store", st.path, "err", err)
		}
	}
}

// waitIdle returns when ctx ends, Close is called or, with an exit-idle
// period, once the daemon has been idle that long: every store's writer
// has had no job in hand for that long and every queue is empty. Before
// it returns for idleness it keeps jobs from coming that it would leave
// behind: it withdraws the discovery files, so that new clients stop
// coming, then gives the submitters new credentials, which cuts off those
// still connected (a client that read a discovery file a moment before
// could otherwise queue a job after the writers stop, and nothing would
// apply it until some later client started a daemon), and looks again a
// tick later. A job queued by then keeps the daemon: it announces itself
// again, with the new credentials, and serves on. A client cut off in
// the middle of a submit does not know whether its job was queued and
// submits it again, with the same ID, through discovery (and autostart).
//
// It reports whether it returned for idleness, submitters refused.
func (d *Daemon) waitIdle(ctx context.Context) (refused bool) {
	exitIdle := d.cfg.ExitIdle
	if exitIdle <= 0 {
		select {
		case <-ctx.Done():
		case <-d.stop:
		}
		return false
	}
	every := min(max(exitIdle/4, 10*time.Millisecond), time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	idle := func() bool {
		for _, st := range d.stores {
			if st.w.Idle() < exitIdle {
				return false
			}
			if n, err := st.w.Queued(ctx); err != nil || n > 0 {
				return false
			}
		}
		return true
	}
	// tock waits for the next tick; false: ctx ended, or Close was called.
	tock := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-d.stop:
			return false
		case <-tick.C:
			return true
		}
	}
	for {
		if !tock() {
			return false
		}
		if !idle() {
			continue
		}
		d.withdraw()
		fault.Pause("withdrawn")
		err := d.srv.RefuseSubmitters()
		if err == nil {
			// The server closes a cut-off connection's socket after the
			// reload returns, in its own time, and takes what it reads
			// from it until then: look again a tick later, so that a job
			// that came that way keeps the daemon instead of staying
			// behind.
			tick.Reset(every) // a whole tick from now, not one due meanwhile
			if !tock() {
				return false
			}
			if idle() {
				d.log.Info("idle; exiting", "exit_idle", exitIdle)
				return true
			}
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
			select {
			case <-ctx.Done():
			case <-d.stop:
			}
			return false
		}
	}
}
