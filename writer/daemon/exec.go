package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/exec"
	"github.com/scribehq/scribe/writer/internal/fault"
	"github.com/scribehq/scribe/writer/lock"
)

// running is the exec run in progress, for the status report.
type running struct {
	plan  *writer.ExecPlan
	pid   int
	since time.Time
}

func (r *running) String() string {
	joined := ""
	if n := len(r.plan.Jobs()) - 1; n > 0 {
		joined = " (and " + strconv.Itoa(n) + " jobs that joined it)"
	}
	return fmt.Sprintf("job %s%s: command %s, pid %d, for %s", r.plan.Job().ID, joined, r.plan.Command().Name, r.pid, time.Since(r.since).Round(time.Millisecond))
}

// Deferral backoff: an exec job whose command is busy is tried again after
// minDeferral, doubling to maxDeferral.
const (
	minDeferral = 100 * time.Millisecond
	maxDeferral = 5 * time.Second
)

// processExec runs an exec job and those that join it, acks them and
// publishes their outcomes. While the command's own lock is held, or the
// command says it is busy, the job is deferred: the store is let go for
// direct writers, the jobs behind it wait (order), and it is tried again
// with backoff, never rejected for it. It returns false if ctx ended
// first: the job stays unacked in the queue (if its command was running,
// it was stopped, and the next holder of the store settles its run
// record). A cautious writer counts the lead's attempt first, as for a
// batch (guardPoison): a command that kills the daemon is poison too.
func (w *Writer) processExec(ctx context.Context, lead item) (done bool) {
	fault.Crash("fetched")
	var joined []item // the jobs that joined the lead, kept across deferrals
	defer w.setDeferred("")
	var lastFaultLog, deferredSince, lastDeferLog time.Time
	deferrals := 0
	// The attempt counts from the guard to the run's end: a job deferred
	// (its command did not start, or said it was busy) or given up alive
	// has killed nothing, and gets it back.
	guarded := false
	giveBack := func() {
		if guarded {
			w.unguard(lead.e.Seq)
			guarded = false
		}
	}
	defer func() {
		if !done {
			giveBack()
		}
	}()
	for attempt := 0; ; {
		items := append([]item{lead}, joined...)
		msgs, _ := split(items)
		if err := w.acquire(ctx, msgs); err != nil {
			return false
		}
		if w.cautious > 0 && !guarded {
			if err := w.guardPoison(&lead.e); err != nil {
				if !w.retryAfterFault(ctx, err, attempt, msgs, &lastFaultLog) {
					return false
				}
				attempt++
				continue
			}
			guarded = true
		}
		res, plan, err := w.session.PlanExec(lead.e, w.commands)
		if err != nil {
			if !w.retryAfterFault(ctx, err, attempt, msgs, &lastFaultLog) {
				return false
			}
			attempt++
			continue
		}
		if plan == nil { // decided without a run
			w.putBack(joined)
			w.spendCaution(res)
			w.count([]writer.Result{res})
			w.answer(msgs[:1], []writer.Entry{lead.e}, []writer.Result{res})
			return true
		}
		if joined, err = w.gather(plan, joined); err != nil {
			if !w.retryAfterFault(ctx, err, attempt, msgs, &lastFaultLog) {
				return false
			}
			attempt++
			continue
		}
		items = append([]item{lead}, joined...)
		msgs, entries := split(items)
		err = w.session.StartExec(plan)
		var de *writer.DeferError
		if errors.As(err, &de) {
			giveBack()
			if !w.deferExec(ctx, plan, msgs, de, &deferrals, &deferredSince, &lastDeferLog) {
				return false
			}
			continue
		}
		if err != nil {
			if !w.retryAfterFault(ctx, err, attempt, msgs, &lastFaultLog) {
				return false
			}
			attempt++
			continue
		}
		w.setDeferred("")
		r, ok := w.runHeld(ctx, plan, msgs)
		if !ok {
			return false
		}
		fault.Crash("ran")
		for {
			if err := w.acquire(ctx, msgs); err != nil {
				return false
			}
			results, err := w.session.FinishExec(plan, r)
			if errors.As(err, &de) {
				giveBack()
				if !w.deferExec(ctx, plan, msgs, de, &deferrals, &deferredSince, &lastDeferLog) {
					return false
				}
				break // plan again: more jobs may join
			}
			var ns *writer.NotStartedError
			if errors.As(err, &ns) {
				if !w.retryAfterFault(ctx, ns.Err, attempt, msgs, &lastFaultLog) {
					return false
				}
				attempt++
				break // plan again
			}
			if err != nil {
				if !w.retryAfterFault(ctx, err, attempt, msgs, &lastFaultLog) {
					return false
				}
				attempt++
				continue
			}
			w.spendCaution(results[0])
			w.setFault("")
			w.count(results)
			fault.Crash("commit")
			w.answer(msgs, entries, results)
			fault.Crash("published")
			return true
		}
	}
}

// gather re-joins the jobs that joined the run before (the plan is made
// anew on each attempt) and adds those of ahead that may join it now.
// A job that can no longer join goes back to ahead, in its place.
func (w *Writer) gather(plan *writer.ExecPlan, joined []item) ([]item, error) {
	var keep, back []item
	for _, it := range joined {
		ok, err := w.session.Join(plan, it.e, w.commands)
		if err != nil {
			return joined, err
		}
		if ok {
			keep = append(keep, it)
		} else {
			back = append(back, it)
		}
	}
	w.putBack(back)
	if plan.Job().Coalesce == "" {
		return keep, nil
	}
	w.fill()
	rest := w.ahead[:0:0]
	for i, it := range w.ahead {
		ok, err := w.session.Join(plan, it.e, w.commands)
		if err != nil {
			w.ahead = append(rest, w.ahead[i:]...)
			return keep, err
		}
		if ok {
			keep = append(keep, it)
		} else {
			rest = append(rest, it)
		}
	}
	w.ahead = rest
	return keep, nil
}

// putBack returns items to ahead, each in its place by the order taken.
func (w *Writer) putBack(items []item) {
	if len(items) == 0 {
		return
	}
	w.ahead = append(w.ahead, items...)
	slices.SortStableFunc(w.ahead, func(a, b item) int { return cmpUint(a.n, b.n) })
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// deferExec lets the store go, says why the job waits (status and, now and
// then, the log), keeps its messages from being redelivered and waits the
// deferral's backoff. It returns false if ctx ended.
func (w *Writer) deferExec(ctx context.Context, plan *writer.ExecPlan, msgs []jetstream.Msg, de *writer.DeferError, n *int, since, lastLog *time.Time) bool {
	w.release()
	w.observer().Deferred(plan.Command().Name)
	if *n == 0 {
		*since = time.Now()
	}
	wait := min(minDeferral<<min(*n, 10), maxDeferral)
	*n++
	w.setDeferred(fmt.Sprintf("job %s (command %s), waiting since %s (tries: %d): %s; next try in %s",
		plan.Job().ID, plan.Command().Name, since.Format(time.RFC3339), *n, de.Why, wait))
	if time.Since(*lastLog) >= w.cfg.WaitLog {
		*lastLog = time.Now()
		w.log.Info("exec job deferred", "id", plan.Job().ID, "command", plan.Command().Name, "why", de.Why, "times", *n)
	}
	for _, m := range msgs {
		_ = m.InProgress()
	}
	return w.sleepServing(ctx, wait)
}

// setDeferred records why the job in hand is deferred ("" when it is not).
func (w *Writer) setDeferred(why string) {
	w.mu.Lock()
	w.deferred = why
	w.mu.Unlock()
}

// runHeld runs the plan's command with the store lock held and handed
// down to it, the journal closed so that scribe commands it runs may
// open it, and the messages kept from redelivery while it runs; then it
// opens the session again, under the same hold. It returns false if ctx
// ended, leaving the run record for the next holder.
func (w *Writer) runHeld(ctx context.Context, plan *writer.ExecPlan, msgs []jetstream.Msg) (*exec.Result, bool) {
	// A nested hold keeps the flock while the session, and with it the
	// journal, is closed.
	hold, err := lock.Acquire(ctx, w.store, lock.Options{LockPath: w.cfg.LockPath, Mode: queue.ModeDaemon, Command: w.cfg.Command})
	if err != nil {
		plan.Run().CloseOutput()
		w.log.Error("keep the store for a command", "err", err)
		return nil, false
	}
	defer hold.Unlock()
	w.releaseKeeping()
	since := time.Now()
	// Meanwhile the jobs in hand keep their place in the queue, and cancel
	// requests are answered at once: nothing can be recorded while the
	// command has the store (the command itself may be the one asking).
	done := make(chan struct{})
	var meanwhile sync.WaitGroup
	stop := sync.OnceFunc(func() { close(done); meanwhile.Wait() })
	defer stop()
	meanwhile.Go(func() {
		t := time.NewTicker(queue.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, m := range msgs {
					_ = m.InProgress()
				}
			case r := <-w.cancels:
				w.refuseCancelDuringRun(r)
			}
		}
	})
	w.log.Debug("running command", "id", plan.Job().ID, "command", plan.Command().Name, "jobs", len(plan.Jobs()))
	env := []string{"SCRIBE_STORE=" + w.store, "SCRIBE_JOB_ID=" + plan.Job().ID}
	r := plan.Run().Exec(ctx.Done(), hold, env, func(pid int) {
		w.mu.Lock()
		w.running = &running{plan: plan, pid: pid, since: since}
		w.mu.Unlock()
	})
	stop() // run reads the cancel requests again
	w.mu.Lock()
	w.running = nil
	w.mu.Unlock()
	w.observer().ExecRan(plan.Command().Name, r.Ended(), r.Took)
	if r.Stopped {
		return nil, false
	}
	// Take the journal back before the nested hold goes: the run record
	// is this hold's only while the hold stands.
	if err := w.acquire(ctx, msgs); err != nil {
		return nil, false
	}
	return r, true
}
