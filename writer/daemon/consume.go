package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/scribehq/scribe/queue"
)

// formerStream is a stream of this store under a former path: see
// WriterConfig.OwnServer.
type formerStream struct {
	id     string // the store's former ID
	name   string
	stream jetstream.Stream
}

// startPump starts the pump under ctx.
func (w *Writer) startPump(ctx context.Context) {
	ctx, w.stopPump = context.WithCancel(ctx)
	w.pumped = make(chan struct{})
	go w.pump(ctx, w.pumped)
}

// pump moves messages into the classes' msgs, in order: those of the
// former streams, each drained and deleted in turn, into normal's, then
// those of each class of the store's own stream into its own.
func (w *Writer) pump(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for attempt := 0; ; {
		f := w.nextFormer()
		if f == nil {
			break
		}
		if err := w.drain(ctx, f); err != nil {
			if ctx.Err() != nil {
				return
			}
			w.log.Warn("drain the queue of a former path; retrying", "stream", f.name, "err", err)
			if !queue.Sleep(ctx, queue.Backoff(attempt)) {
				return
			}
			attempt++
			continue
		}
		attempt = 0
	}
	var wg sync.WaitGroup
	for _, c := range w.classes() {
		wg.Go(func() { w.pumpClass(ctx, c) })
	}
	wg.Wait()
}

// pumpClass moves the messages of one class into its msgs until ctx ends
// or its consumer is gone.
func (w *Writer) pumpClass(ctx context.Context, c *class) {
	for attempt := 0; ; attempt++ {
		err := w.consume(ctx, c)
		if ctx.Err() != nil {
			return
		}
		if w.consumerGone(ctx, c, err) {
			// Pulling from it again would wait for ever: run recreates it
			// and consumes afresh, which restarts the pump.
			w.log.Warn("the queue's consumer is gone; consuming afresh from the oldest undecided job", "consumer", c.name, "err", err)
			w.askReconsume()
			return
		}
		w.log.Warn("consume; retrying", "err", err)
		if !queue.Sleep(ctx, queue.Backoff(attempt)) {
			return
		}
	}
}

// consumerGone reports whether the class's consumer no longer exists on
// the server, after consume ended with err: the server said it was
// deleted, or it does not know it when asked. A consumer vanishes when
// the server loses it (its state is kept in memory) or someone deletes
// it; a new one with the same name starts from the oldest job.
func (w *Writer) consumerGone(ctx context.Context, c *class, err error) bool {
	if errors.Is(err, jetstream.ErrConsumerDeleted) {
		return true
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	w.queueOps.RLock()
	defer w.queueOps.RUnlock()
	_, err = c.cons.Info(ictx)
	return errors.Is(err, jetstream.ErrConsumerNotFound)
}

// askReconsume asks run to consume afresh, at most once pending.
func (w *Writer) askReconsume() {
	select {
	case w.reconsume <- struct{}{}:
	default:
	}
}

// consume moves the class's messages into its msgs until ctx ends or its
// consumer fails.
func (w *Writer) consume(ctx context.Context, c *class) error {
	// Buffer a batch's worth, but no more bytes than a batch takes (and
	// never less than the largest job, or the pull would stall).
	iter, err := c.cons.Messages(jetstream.PullMaxMessagesWithBytesLimit(w.cfg.BatchSize, max(maxBatchBytes, 2*(w.cfg.Limits.JobBytes()+4096))))
	if err != nil {
		return err
	}
	defer iter.Stop()
	defer context.AfterFunc(ctx, iter.Stop)()
	for {
		m, err := iter.Next()
		switch {
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return err
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrNoHeartbeat):
			// The iterator would go on pulling from a consumer that may
			// be gone: let pump find out.
			return err
		case err != nil:
			w.log.Warn("consume", "err", err)
			continue
		}
		if !deliver(ctx, c, m) {
			return ctx.Err()
		}
	}
}

// deliver hands a message to run through c's msgs. It returns false if
// ctx ended first, leaving the message unacked: JetStream delivers it again.
func deliver(ctx context.Context, c *class, m jetstream.Msg) bool {
	select {
	case c.msgs <- m:
		return true
	case <-ctx.Done():
		return false
	}
}

// findFormer looks for the streams of the store under former paths (see
// WriterConfig.OwnServer): it deletes the empty ones, lifts the others' byte
// reservations (no one can publish to them any more, and the store's own
// stream needs its reservation) and lists them, oldest jobs first.
func (w *Writer) findFormer(ctx context.Context) error {
	lister := w.js.StreamNames(ctx)
	var names []string
	for name := range lister.Name() {
		if id, ok := queue.StreamStoreID(name); ok && id != w.storeID {
			names = append(names, name)
		}
	}
	if err := lister.Err(); err != nil {
		return err
	}
	type found struct {
		f     *formerStream
		first time.Time
	}
	var streams []found
	for _, name := range names {
		id, _ := queue.StreamStoreID(name)
		s, err := w.js.Stream(ctx, name)
		if err != nil {
			return err
		}
		info := s.CachedInfo()
		if info.State.Msgs == 0 {
			if err := w.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return err
			}
			w.log.Info("deleted the empty queue of the store's former path", "stream", name)
			continue
		}
		if info.Config.MaxBytes > 0 {
			cfg := info.Config
			cfg.MaxBytes = -1
			if updated, err := w.js.UpdateStream(ctx, cfg); err != nil {
				w.log.Warn("lift the byte reservation of a former path's queue", "stream", name, "err", err)
			} else {
				s = updated
			}
		}
		w.log.Warn(fmt.Sprintf("store moved from ID %s: draining %d queued jobs before those of ID %s", id, info.State.Msgs, w.storeID), "stream", name)
		streams = append(streams, found{&formerStream{id: id, name: name, stream: s}, info.State.FirstTime})
	}
	slices.SortStableFunc(streams, func(a, b found) int { return a.first.Compare(b.first) })
	for _, s := range streams {
		w.former = append(w.former, s.f)
	}
	return nil
}

// nextFormer is the former stream to drain next, nil if none is left.
func (w *Writer) nextFormer() *formerStream {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.former) == 0 {
		return nil
	}
	return w.former[0]
}

// drain delivers a former stream's jobs, in order, from a fresh consumer,
// until the stream is seen empty (every job acked), then deletes it.
func (w *Writer) drain(ctx context.Context, f *formerStream) error {
	if err := f.stream.DeleteConsumer(ctx, queue.ConsumerName); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("reset consumer: %w", err)
	}
	cons, err := queue.CreateConsumer(ctx, f.stream, queue.ConsumerName, "")
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	for idle := 0; ; {
		batch, err := cons.FetchNoWait(w.cfg.BatchSize)
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if !deliver(ctx, w.normal, m) {
				return ctx.Err()
			}
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if n > 0 {
			idle = 0
			continue
		}
		info, err := f.stream.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs == 0 {
			break
		}
		// The rest is in the writer's hand, or waits for redelivery.
		if !queue.Sleep(ctx, queue.Backoff(idle)) {
			return ctx.Err()
		}
		idle++
	}
	if err := w.js.DeleteStream(ctx, f.name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete drained stream: %w", err)
	}
	w.log.Info("drained and deleted the queue of the store's former path", "from_id", f.id, "stream", f.name)
	w.mu.Lock()
	w.former = slices.DeleteFunc(w.former, func(o *formerStream) bool { return o == f })
	w.mu.Unlock()
	return nil
}

// watch calls WriterConfig.CheckQueue now and then, keeps the fault it reports
// for the status report, and asks run to consume afresh when it restarted
// the server's JetStream.
func (w *Writer) watch(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	if w.cfg.CheckQueue == nil {
		return
	}
	var lastLog time.Time
	wait := QueueCheckInterval
	for queue.Sleep(ctx, wait) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		restarted, err := w.cfg.CheckQueue(cctx) // a restart takes QueueOps itself
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		was := w.queueFault
		w.queueFault = ""
		if err != nil {
			w.queueFault = err.Error()
		}
		w.mu.Unlock()
		switch {
		case err != nil:
			if was == "" || time.Since(lastLog) >= w.cfg.WaitLog {
				lastLog = time.Now()
				w.log.Error("the queue is failing", "err", err)
			}
			wait = min(2*wait, maxQueueCheckInterval)
		case was != "":
			w.log.Info("the queue is working again")
			fallthrough
		default:
			wait = QueueCheckInterval
		}
		if restarted {
			w.log.Info("the queue restarted")
			w.askReconsume()
		}
	}
}

// consumeAfresh restarts consumption after the server's JetStream was
// restarted, which lost the pull requests in flight and may have brought
// back jobs whose acks it could not record: the messages taken but not yet
// applied are dropped (unacked), and the consumers are recreated, so that
// every queued job is delivered again from the oldest, in order. Jobs
// already applied come back as duplicates, which the journal recognises.
// It returns false if ctx ended.
func (w *Writer) consumeAfresh(ctx context.Context) bool {
	w.stopPump()
	<-w.pumped
	w.ahead, w.lost = nil, false
	for _, c := range w.classes() {
		for drained := false; !drained; {
			select {
			case <-c.msgs:
			default:
				drained = true
			}
		}
		for attempt := 0; ; attempt++ {
			w.queueOps.RLock()
			err := w.stream.DeleteConsumer(ctx, c.name)
			if err == nil || errors.Is(err, jetstream.ErrConsumerNotFound) {
				err = c.consumeFromStart(ctx, w.stream)
			}
			w.queueOps.RUnlock()
			if err == nil {
				break
			}
			w.log.Warn("recreate the consumer; retrying", "consumer", c.name, "err", err)
			if !queue.Sleep(ctx, queue.Backoff(attempt)) {
				return false
			}
		}
	}
	w.log.Info("consuming afresh from the oldest queued job")
	w.startPump(ctx)
	w.awaitHigh(ctx)
	return true
}
