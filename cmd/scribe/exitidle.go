package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/daemon"
	"github.com/scribehq/scribe/writer"
)

// waitIdle returns when ctx ends or, with exitIdle > 0, once the daemon
// has been idle for exitIdle: its writer has had no job in hand for that
// long and the queue is empty. Before it returns for idleness it withdraws
// the discovery file, so that new clients stop coming, and looks again:
// a job that came in meanwhile keeps the daemon (announced again). One
// that a client still connected queues after that is left stranded by the
// shutdown and applied by the next daemon (a client with autostart starts
// it).
func waitIdle(ctx context.Context, w *writer.Writer, lk *daemon.Lock, d *queue.Discovery, exitIdle time.Duration, log *slog.Logger) {
	if exitIdle <= 0 {
		<-ctx.Done()
		return
	}
	tick := time.NewTicker(min(max(exitIdle/4, 10*time.Millisecond), time.Second))
	defer tick.Stop()
	idle := func() bool {
		if w.Idle() < exitIdle {
			return false
		}
		n, err := w.Queued(ctx)
		return err == nil && n == 0
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !idle() {
			continue
		}
		lk.Withdraw()
		if idle() {
			log.Info("idle; exiting", "exit_idle", exitIdle)
			return
		}
		if err := lk.Announce(d); err != nil {
			log.Error("announce again", "err", err)
			return
		}
	}
}
