package daemon

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/claim"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// finishInterrupted finishes a batch that a writer killed before its
// intent was dropped left standing, if the store is free: until a holder
// redoes it, its outcomes are provisional and look-ups do not show them,
// and without jobs to apply the writer would never take the store. If
// the store is held, its holder has finished the batch already (opening
// a session does); a failure here is only logged, and the next batch
// tries again.
func (w *Writer) finishInterrupted() {
	w.opening.Lock()
	defer w.opening.Unlock()
	j, err := journal.OpenReadOnly(journal.Path(w.store), 500*time.Millisecond)
	if err != nil {
		return // no journal yet, or held by a writer, which finishes it
	}
	in, err := j.Pending()
	_ = j.Close()
	if err != nil || in == nil {
		return
	}
	s, err := writer.Open(context.Background(), w.store, w.sessionOptions())
	if err != nil {
		w.log.Warn("finish an interrupted batch at start; it is finished before the next batch", "err", err)
		return
	}
	if err := s.Close(); err != nil {
		w.log.Warn("release store", "err", err)
	}
}

// sessionOptions are the options of the writer's sessions.
func (w *Writer) sessionOptions() writer.Options {
	o := writer.Options{
		LockPath: w.cfg.LockPath, Mode: queue.ModeDaemon, Command: w.cfg.Command,
		MaxFileBytes: w.cfg.MaxFileBytes, Retention: cmp.Or(w.cfg.Retention, journal.DefaultRetention), Logger: w.log,
		SyncDelay: w.cfg.SyncDelay,
	}
	if w.cfg.Claim != nil { // not a nil *claim.Claim in the interface
		o.Fence = w.cfg.Claim
	}
	return o
}

// claimLost returns, once the writer's claim on the store is lost (or the
// journal was written under a later one), why; nil while it holds or
// without a claim. The writer then stops: see Err.
func (w *Writer) claimLost() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopErr == nil && w.cfg.Claim != nil {
		if err := w.cfg.Claim.Check(); errors.Is(err, claim.ErrLost) {
			w.stopErr = err
		}
	}
	return w.stopErr
}

// acquire makes sure the writer holds the store, waiting while someone else
// does. Waiting is a deferral: the batch stays in hand, unacked, and its
// ack deadline is pushed back.
func (w *Writer) acquire(ctx context.Context, batch []jetstream.Msg) error {
	w.noteHand(batch)
	if w.session != nil {
		return nil
	}
	var lastLog time.Time
	start := time.Now()
	faulted := false
	for attempt := 0; ; attempt++ {
		if err := w.claimLost(); err != nil {
			return err
		}
		err := w.open()
		if err == nil {
			if faulted {
				w.setFault("")
			}
			w.observeAcquired(start)
			return nil
		}
		// Another holder is a wait; anything else (a full disk refuses the
		// holder identity, say) is a fault, reported as apply's are.
		w.mu.Lock()
		if !errors.Is(err, lock.ErrLocked) {
			w.fault, w.waiting, faulted = err.Error(), "", true
		} else {
			if faulted {
				w.fault = ""
			}
			w.waiting, faulted = err.Error(), false
		}
		w.mu.Unlock()
		// Waiting is a deferral, not a fault: the jobs stay queued. Say so
		// once per WaitLog, and warn once the holder has kept the store
		// past WarnAfter (it may be wedged: it is never robbed).
		if waited := time.Since(start); time.Since(lastLog) >= w.cfg.WaitLog {
			lastLog = time.Now()
			switch {
			case !errors.Is(err, lock.ErrLocked):
				// Not another holder: taking the store itself fails (a
				// full disk refuses the holder identity, say).
				w.log.Warn("taking the store failed; retrying", "waited", waited.Round(time.Second), "err", err, "jobs", len(batch))
			case waited >= w.cfg.WarnAfter:
				w.log.Warn("the store has been held by another process for long; still waiting", "waited", waited.Round(time.Second), "err", err, "jobs", len(batch))
			default:
				w.log.Info("waiting for the store", "err", err, "jobs", len(batch))
			}
		}
		if attempt > 0 && attempt%20 == 0 {
			for _, m := range batch {
				_ = m.InProgress() // push back the ack deadline
			}
		}
		// Cancel requests are answered meanwhile (busy: the store is
		// another's), so that their callers hear why at once.
		if !w.sleepServing(ctx, queue.Backoff(attempt)) {
			return ctx.Err()
		}
	}
}

// open takes the store without waiting: it opens the writer's session.
func (w *Writer) open() error {
	w.opening.Lock()
	defer w.opening.Unlock()
	if err := w.stopIfMoved(); err != nil {
		return err
	}
	s, err := writer.Open(context.Background(), w.store, w.sessionOptions())
	if err != nil {
		return err
	}
	// Again once the session holds what is at the path: a store moved
	// while it opened is seen, and one moved later by the session's own
	// check of its files before each batch (writer.ErrStoreChanged),
	// after which the writer comes back here.
	if err := w.stopIfMoved(); err != nil {
		_ = s.Close()
		return err
	}
	w.mu.Lock()
	w.session, w.epoch, w.waiting = s, s.Epoch(), ""
	w.mu.Unlock()
	return nil
}

// stopIfMoved stops the writer once its store is no longer at its path
// (WriterConfig.Moved): the jobs in hand stay queued, in the store's
// queue, wherever the store went.
func (w *Writer) stopIfMoved() error {
	err := w.moved()
	if err != nil {
		w.log.Error("the store was moved or removed: this writer stops without applying the jobs in hand", "err", err)
		w.stopFor(err)
	}
	return err
}

// setFault records the I/O fault the writer is retrying on ("" when
// none), for the status report.
func (w *Writer) setFault(f string) {
	w.mu.Lock()
	w.fault = f
	w.mu.Unlock()
}

// release closes the session, if any, releasing the store lock.
func (w *Writer) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.session == nil {
		return
	}
	if err := w.session.Close(); err != nil {
		w.log.Warn("release store", "err", err)
	}
	w.observeReleased()
	w.session = nil
}

// lockPathOf is the lock file of a store a writer takes: lockPath, or
// the store's default.
func lockPathOf(store, lockPath string) string {
	if lockPath != "" {
		return lockPath
	}
	return lock.DefaultPath(store)
}
