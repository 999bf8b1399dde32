package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/claim"
	"github.com/scribehq/scribe/writer/internal/fault"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// process applies a batch, acks it and publishes its outcomes. It returns
// false if ctx ended while it was waiting for the store, leaving the batch
// unacked in the queue.
func (w *Writer) process(ctx context.Context, items []item) bool {
	fault.Crash("fetched")
	batch, entries := split(items)
	if w.session != nil && lock.Demanded(w.store) {
		// A direct writer is waiting: the batch in hand can wait for it.
		w.log.Info("handing the store to a waiting direct writer", "grace", w.cfg.HandOffGrace)
		w.release()
		if !queue.Sleep(ctx, w.cfg.HandOffGrace) {
			return false
		}
	}
	results, ok := w.apply(ctx, batch, entries)
	if !ok {
		return false
	}
	fault.Crash("commit")
	w.answer(batch, entries, results)
	fault.Crash("published")
	w.maybePrune(ctx)
	return true
}

// split returns the messages and entries of items.
func split(items []item) ([]jetstream.Msg, []writer.Entry) {
	msgs, entries := make([]jetstream.Msg, len(items)), make([]writer.Entry, len(items))
	for i, it := range items {
		msgs[i], entries[i] = it.m, it.e
	}
	return msgs, entries
}

// entry decodes a message into the writer.Entry to apply.
func (w *Writer) entry(m jetstream.Msg) writer.Entry {
	job, err := queue.DecodeLimit(m.Data(), w.cfg.Limits.JobBytes())
	e := writer.Entry{Job: job, Err: err, Raw: m.Data()}
	md, mdErr := m.Metadata()
	if mdErr == nil {
		e.Seq = md.Sequence.Stream
	}
	// The journal records the outcome under the job's ID and JetStream
	// dedupes by Nats-Msg-Id: if the two disagree, either may be another
	// job's, so the message is recorded under neither, as a dead letter.
	// (A message without the header is fine: not every client sets it.)
	if hdr, one := queue.MsgID(m.Headers()); !one || hdr != "" && job.ID != "" && hdr != job.ID {
		e.Err = queue.Reject(queue.ReasonBadInput, "Nats-Msg-Id %q does not match job id %q", hdr, job.ID)
		if !one {
			e.Err = queue.Reject(queue.ReasonBadInput, "the message has %d Nats-Msg-Id headers, want one", len(m.Headers().Values(nats.MsgIdHdr)))
		}
		e.Job = &queue.Job{}
		return e
	}
	// A job queued under a former path of the store names the store by
	// its former ID: it is this store's (see WriterConfig.OwnServer).
	if err == nil && mdErr == nil && md.Stream != queue.StreamName(w.storeID) {
		if id, ok := queue.StreamStoreID(md.Stream); ok && job.Store == id {
			job.Store = w.storeID
		}
	}
	return e
}

// apply applies the batch under the store lock, waiting for the lock and
// retrying through I/O faults, until it succeeds or ctx ends (false: the
// batch stays unacked in the queue).
func (w *Writer) apply(ctx context.Context, batch []jetstream.Msg, entries []writer.Entry) (_ []writer.Result, done bool) {
	var lastFaultLog time.Time
	guarded := false
	defer func() {
		if guarded && !done {
			w.unguard(entries[0].Seq)
		}
	}()
	for attempt := 0; ; attempt++ {
		if err := w.acquire(ctx, batch); err != nil {
			return nil, false
		}
		if w.cautious > 0 && !guarded { // once per batch: I/O retries are not deaths
			if err := w.guardPoison(&entries[0]); err != nil {
				w.setFault(err.Error())
				if !queue.Sleep(ctx, queue.Backoff(attempt)) {
					return nil, false
				}
				continue
			}
			guarded = true
		}
		applyStart := time.Now()
		results, err := w.session.Apply(entries)
		if err == nil {
			w.lastBatch, w.lastApply = len(entries), time.Since(applyStart)
			w.observer().BatchApplied(len(entries), w.lastApply)
			w.spendCaution(results[0])
			if w.setFault(""); !lastFaultLog.IsZero() {
				w.log.Info("the store is writable again", "jobs", len(batch))
			}
			w.count(results)
			return results, true
		}
		// An I/O fault (disk full, read-only, EIO), or a claim not
		// renewed in time: nothing of this batch is recorded as applied
		// and nothing is acked. Keep the batch in hand and retry; the
		// next Apply first completes what was begun.
		if !w.retryAfterFault(ctx, err, attempt, batch, &lastFaultLog) {
			return nil, false
		}
	}
}

// retryAfterFault records and logs an I/O fault that kept a batch from
// being applied or recorded, and waits before the next attempt: the
// batch stays in hand, unacked. It returns false if ctx ended, or if the
// writer's claim on the store is lost: then it stops (Err).
func (w *Writer) retryAfterFault(ctx context.Context, err error, attempt int, batch []jetstream.Msg, lastLog *time.Time) bool {
	if errors.Is(err, claim.ErrLost) || errors.Is(err, journal.ErrFenced) {
		// Another daemon is the store's writer now: the jobs in hand are
		// its to apply.
		w.log.Error("the store's claim is lost: this writer stops without committing the jobs in hand", "err", err, "jobs", len(batch))
		w.stopFor(err)
		w.release()
		return false
	}
	w.setFault(err.Error())
	if errors.Is(err, writer.ErrStoreChanged) || errors.Is(err, claim.ErrExpired) {
		// The lock file or journal is no longer the one this hold
		// opened: another writer may hold the real one. Let go, and
		// take the store anew through its path.
		w.release()
	}
	if attempt == 0 || time.Since(*lastLog) >= w.cfg.WaitLog {
		*lastLog = time.Now()
		w.log.Error("apply batch failed; retrying", "err", err, "jobs", len(batch), "attempt", attempt+1)
	}
	if attempt > 0 && attempt%20 == 0 {
		for _, m := range batch {
			_ = m.InProgress()
		}
	}
	return queue.Sleep(ctx, queue.Backoff(attempt))
}

// count adds a batch's outcomes to the status report's counters.
func (w *Writer) count(results []writer.Result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range results {
		switch {
		case r.Duplicate:
		case r.Outcome.Applied():
			w.applied++
		default:
			w.rejected++
		}
	}
}

// answer marks a committed batch as done in the queue and then publishes
// each job's outcome. The store's own stream forgets the jobs at the next
// purge; a former path's stream is acked message by message.
func (w *Writer) answer(batch []jetstream.Msg, entries []writer.Entry, results []writer.Result) {
	// The journal has every outcome: now the queue may forget the jobs.
	for i, m := range batch {
		if w.classOf(m) != nil {
			w.decide(entries[i].Seq, len(m.Data()))
			continue
		}
		if err := m.Ack(); err != nil {
			w.log.Warn("ack", "err", err) // redelivery is harmless: the journal has the outcome
		}
	}
	for i, r := range results {
		w.observeOutcome(entries[i], r)
		o := r.Outcome
		if o.ID == "" {
			w.log.Warn("dead-lettered a job with no readable ID", "seq", entries[i].Seq, "reason", o.Reason, "detail", o.Detail)
			continue
		}
		if o.Status == queue.StatusRejected && !r.Duplicate {
			w.log.Info("job rejected", "id", o.ID, "reason", o.Reason, "detail", o.Detail)
		}
		w.publishOutcome(o)
	}
}

// publishOutcome tells a job's outcome to whoever waits for it.
func (w *Writer) publishOutcome(o *queue.Outcome) {
	b, err := queue.EncodeOutcome(o)
	if limit := min(queue.MaxOutcomeBytes, w.replyLimit()); err == nil && len(b) > limit {
		// A duplicate's outcome may have been recorded by a version
		// that did not bound it; a server may carry less than the bound.
		b, err = queue.EncodeOutcome(o.Fit(limit))
	}
	if err == nil {
		if err := w.cfg.Conn.Publish(queue.OutcomeSubject(w.storeID, o.ID), b); err != nil {
			w.log.Warn("publish outcome", "id", o.ID, "err", err)
		}
	}
}

// guardPoison records the attempt of a one-job batch (its entry e), or
// turns it into a rejection if it has killed the writer maxAttempts times.
// It is the one check of both kinds of job: a batch of file ops (apply)
// and an exec job's run (processExec).
func (w *Writer) guardPoison(e *writer.Entry) error {
	j := w.session.Journal()
	if e.Job != nil && e.Job.ID != "" {
		// A job decided before (delivered again after a crash) kills
		// nothing: it must not take the mark from the job that may.
		if prev, err := j.Outcome(e.Job.ID); err != nil || prev != nil {
			return err
		}
	}
	attempts, err := j.Attempts(e.Seq)
	if err != nil {
		return err
	}
	if attempts >= maxAttempts {
		w.log.Error("a job killed the writer repeatedly; rejecting it", "seq", e.Seq, "attempts", attempts)
		if e.Err == nil {
			e.Err = queue.Reject(queue.ReasonInternal, "the writer died %d times applying this job", attempts)
		}
		return nil
	}
	return j.SetAttempts(e.Seq, attempts+1)
}

// unguard takes back the attempt guardPoison recorded for the job at seq
// when the writer lets the job go alive (it stops, its context ends):
// only deaths count. It needs no hold of the store, which another process
// may have taken meanwhile. A writer whose claim on the store is lost
// leaves the mark alone, to the store's writer now.
func (w *Writer) unguard(seq uint64) {
	if w.claimLost() != nil {
		return
	}
	var err error
	if w.session != nil {
		err = w.session.Journal().GiveBack(seq)
	} else {
		err = journal.GiveBackAttempt(w.store, seq)
	}
	if err != nil {
		w.log.Warn("the attempt of the job given up stays counted", "seq", seq, "err", err)
	}
}

// spendCaution counts a cautious batch, or exec run, as done, by the
// result of its (first) job. A duplicate does not count: after a crash the
// queue delivers again the jobs decided before it and not yet purged,
// which kill nothing, and poison behind them must still meet a cautious
// writer.
func (w *Writer) spendCaution(r writer.Result) {
	if w.cautious > 0 && !r.Duplicate {
		w.cautious--
	}
}

// Poison that kills the process (not a panic, which the applier recovers:
// a runaway allocation, a fatal runtime error) would be redelivered after
// every restart and kill the daemon for ever. So a starting writer is
// cautious: it applies its first cautiousJobs jobs one at a time, each
// after recording its sequence and attempt count in the journal. A job
// found there with maxAttempts attempts already has killed the writer that
// often: it is rejected instead of tried again.
const (
	cautiousJobs = 16
	maxAttempts  = 3
)
