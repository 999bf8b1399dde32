package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scribehq/scribe/writer/internal/fault"
)

// Purging: how often, and after how many decided jobs or bytes of them,
// at most. Each purge first reads the oldest job of each class not taken
// yet, whole (1 MiB for a big put): once a second is cheap, and the
// bounds, with a sixteenth of the queue's limits, keep decided jobs from
// filling the queue meanwhile.
const (
	purgeEvery = time.Second
	purgeJobs  = 1024
	purgeBytes = 64 << 20
)

// purgeOwed reports whether the jobs decided and not yet purged pass a
// bound that makes a purge due before purgeEvery.
func (w *Writer) purgeOwed(jobs int, bytes int64) bool {
	l := w.cfg.Limits
	return int64(jobs) >= min(purgeJobs, max(l.Jobs()/16, 1)) || bytes >= min(purgeBytes, max(l.Bytes()/16, 1))
}

// purge removes from the store's own stream the jobs up to the floor
// (purgeFloor): those whose outcomes the journal has, below the oldest
// job still undecided. One purge, one sync, stands for the acks of all of
// them. Unless forced it waits until purgeEvery has passed or a bound is
// owed (purgeOwed, and the last try was not blocked), and arms purgeTimer
// meanwhile. Only run calls it, between
// batches. A purge that fails is retried later: the jobs it would have
// removed are only delivered again (after a restart) and found in the
// journal.
//
// It purges the whole stream up to a sequence, never one subject: a
// subject's purge removes its jobs one by one, and in the power-cut
// tests (tests/powerloss_test.go, nats-server 2.15) a cut after such
// purges lost jobs acknowledged after them.
func (w *Writer) purge(ctx context.Context, force bool) {
	w.purging.Lock()
	owed, owedBytes := len(w.decided), w.decidedBytes
	w.purging.Unlock()
	if owed == 0 {
		w.stopPurgeTimer()
		return
	}
	if !force && w.failures > 0 {
		return // purgeTimer retries it
	}
	if !force && (!w.purgeOwed(owed, owedBytes) || w.blocked) && time.Since(w.lastPurge) < purgeEvery {
		if w.purgeTimer == nil {
			w.purgeTimer = time.NewTimer(purgeEvery - time.Since(w.lastPurge))
		}
		return
	}
	w.stopPurgeTimer()
	if w.cfg.Claim != nil && w.cfg.Claim.Check() != nil {
		return // a writer that may have lost the store leaves the queue alone
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	w.queueOps.RLock()
	defer w.queueOps.RUnlock()
	w.lastPurge = time.Now()
	floor, err := w.purgeFloor(ctx)
	if err != nil {
		w.log.Warn("find the decided jobs to purge from the queue; retrying later", "err", err, "retry_in", purgeRetry(w.failures))
		w.retryPurge()
		return
	}
	if floor > w.floor.Load() {
		w.floor.Store(floor)
	}
	if w.blocked = floor <= w.purged; w.blocked {
		w.failures = 0
		return // an older job is undecided: the next purge looks again
	}
	fault.Crash("ack")
	w.purgeBegins()
	err = w.stream.Purge(ctx, jetstream.WithPurgeSequence(floor+1))
	w.purgeEnds(err == nil, floor)
	if err != nil {
		w.log.Warn("purge decided jobs from the queue; retrying later", "up_to_seq", floor, "err", err, "retry_in", purgeRetry(w.failures))
		w.retryPurge()
		return
	}
	fault.Crash("acked")
	w.purged, w.failures = floor, 0
}

// purgeBegins and purgeEnds bracket a purge request: purgeGen is odd
// while one is in flight, and the jobs up to floor leave decided once
// it succeeded (done).
func (w *Writer) purgeBegins() {
	w.purging.Lock()
	w.purgeGen++
	w.purging.Unlock()
}

func (w *Writer) purgeEnds(done bool, floor uint64) {
	w.purging.Lock()
	defer w.purging.Unlock()
	w.purgeGen++
	if !done {
		return
	}
	w.purgedTo = max(w.purgedTo, floor)
	for seq, size := range w.decided {
		if seq <= floor {
			delete(w.decided, seq)
			w.decidedBytes -= int64(size)
		}
	}
}

// retryPurge arms purgeTimer for the next try after a failed one, later
// for each failure in a row: a queue that fails (a full disk) is not
// asked again ten times a second.
func (w *Writer) retryPurge() {
	w.purgeTimer = time.NewTimer(purgeRetry(w.failures))
	w.failures++
}

// purgeRetry is how long the retry after n failed purges in a row waits.
func purgeRetry(n int) time.Duration {
	return min(purgeEvery<<min(n, 6), 5*time.Second)
}

// decide records that the job of the store's own stream at seq, of size
// bytes, is decided: the journal has its outcome. One purged already (a
// listing read it before a purge) is not: no purge would remove the mark.
func (w *Writer) decide(seq uint64, size int) {
	w.purging.Lock()
	if _, ok := w.decided[seq]; !ok && seq > w.purgedTo {
		w.decided[seq] = size
		w.decidedBytes += int64(size)
	}
	w.purging.Unlock()
}

// purgeFloor is the highest sequence of the store's own stream up to
// which every job is decided (floorBelow): it asks the stream for each
// class's oldest job not taken yet. Its consumer delivers in order, so
// the class's jobs not taken come after its last one taken.
func (w *Writer) purgeFloor(ctx context.Context) (uint64, error) {
	var lastTaken uint64
	var untaken []uint64
	for _, c := range w.classes() {
		lastTaken = max(lastTaken, c.lastTaken)
		m, err := w.stream.GetMsg(ctx, c.lastTaken+1, jetstream.WithGetMsgSubject(c.subject))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return 0, err
		default:
			untaken = append(untaken, m.Sequence)
		}
	}
	return floorBelow(lastTaken, untaken, w.ahead), nil
}

// floorBelow is the highest sequence of the store's own stream up to
// which every job is decided, given the last sequence taken (of any
// class), the oldest not taken yet of each class that has one, and the
// jobs taken but not decided (ahead). Jobs are decided in order, but not
// strictly: high jobs are decided before normal ones queued ahead of
// them, and jobs that join an exec run before other jobs queued between
// them (docs/exec.md); those must stay in the queue until decided. A
// class with no job left to take has none up to lastTaken: a job queued
// later has a later sequence.
func floorBelow(lastTaken uint64, untaken []uint64, ahead []item) uint64 {
	floor := lastTaken
	for _, seq := range untaken {
		floor = min(floor, seq-1)
	}
	for _, it := range ahead {
		if it.cls != nil && it.e.Seq != 0 {
			floor = min(floor, it.e.Seq-1)
		}
	}
	return floor
}

// purgeDue is the channel of purgeTimer, nil when no purge is owed.
func (w *Writer) purgeDue() <-chan time.Time {
	if w.purgeTimer == nil {
		return nil
	}
	return w.purgeTimer.C
}

func (w *Writer) stopPurgeTimer() {
	if w.purgeTimer != nil {
		w.purgeTimer.Stop()
		w.purgeTimer = nil
	}
}
