package daemon

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scribehq/scribe/queue"
)

// high reports whether the item is a high-priority job: one of the high
// class, or one that says it is high (queued by an older client, or on a
// stream without the high subject). A job that did not decode is normal.
func (it item) high() bool {
	return (it.cls != nil && it.cls.high) || (it.e.Err == nil && it.e.Job.High())
}

// pick chooses the class of the next batch from the jobs in ahead (not
// empty): high jobs first, but after queue.MaxHighBatches batches of
// them in a row while normal jobs wait, one batch of normal jobs, so
// that a flood of high jobs does not starve them. It reports whether it
// chose the high class.
func (w *Writer) pick() bool {
	var high, normal bool
	for _, it := range w.ahead {
		if it.high() {
			high = true
		} else {
			normal = true
		}
	}
	switch {
	case high && normal && w.highRun >= queue.MaxHighBatches:
		w.highRun = 0
		return false
	case high && normal:
		w.highRun++
		return true
	case !high:
		w.highRun = 0
	}
	return high
}

// takeBatch takes from ahead a batch of file jobs of one class (high or
// not), in order: up to its next exec job, which runs alone, within the
// batch's bounds. The jobs of the other class keep their places.
func (w *Writer) takeBatch(high bool) []item {
	var batch []item
	rest, size := w.ahead[:0:0], 0
	for i, it := range w.ahead {
		if it.high() != high {
			rest = append(rest, it)
			continue
		}
		size += len(it.m.Data())
		if it.isExec() || (len(batch) > 0 && (len(batch) >= w.cfg.BatchSize || w.cautious > 0 || size > maxBatchBytes)) {
			rest = append(rest, w.ahead[i:]...)
			break
		}
		batch = append(batch, it)
	}
	w.ahead = rest
	return batch
}

// class is one priority class of the store's own stream: the jobs of one
// subject, delivered in order by a consumer of their own, so that the
// writer sees a high job however many normal ones are queued ahead of it.
type class struct {
	high    bool
	subject string
	name    string             // of its durable consumer
	msgs    chan jetstream.Msg // its pump's deliveries (normal's: a former stream's too)
	cons    jetstream.Consumer // replaced by run while the pump is stopped
	// nextDelivery is the delivery (consumer) sequence its next message
	// must have (see take); lastTaken is the stream sequence of the last
	// message run took; pending is how many more its consumer had to
	// deliver then (next). Only run touches them.
	nextDelivery, lastTaken, pending uint64
}

func newClass(high bool, subject, consumer string, buffer int) *class {
	return &class{high: high, subject: subject, name: consumer, msgs: make(chan jetstream.Msg, buffer)}
}

// classes are the writer's classes: normal, and high if the stream has
// its subject.
func (w *Writer) classes() []*class {
	if w.high == nil {
		return []*class{w.normal}
	}
	return []*class{w.high, w.normal}
}

// classOf is the class of m, nil if it is not of the store's own stream.
func (w *Writer) classOf(m jetstream.Msg) *class {
	md, err := m.Metadata()
	switch {
	case err != nil || md.Stream != queue.StreamName(w.storeID):
		return nil
	case w.high != nil && m.Subject() == w.high.subject:
		return w.high
	}
	return w.normal
}

// deliveries is the channel of the class's pump; nil (never ready) for
// a class the stream does not have.
func (c *class) deliveries() <-chan jetstream.Msg {
	if c == nil {
		return nil
	}
	return c.msgs
}

// consumeFromStart (re)creates the class's consumer, which delivers from
// its oldest queued job.
func (c *class) consumeFromStart(ctx context.Context, stream jetstream.Stream) error {
	cons, err := queue.CreateConsumer(ctx, stream, c.name, c.subject)
	if err != nil {
		return err
	}
	c.cons, c.nextDelivery, c.lastTaken, c.pending = cons, 1, 0, 0
	return nil
}

// nextWait bounds how long next waits.
const nextWait = 500 * time.Millisecond

// next waits for class c's next delivery when its last one said more of
// its jobs are queued: with a small batch its pump holds few of them, and
// a writer back for its next batch before the pump's next pull has come
// would see none of the class in hand, and take a normal job ahead of a
// high one queued before it, or a fifth batch of high jobs while normal
// ones wait. A wait that ends without one forgets the count (the jobs
// may have been purged meanwhile).
func (w *Writer) next(c *class) (jetstream.Msg, bool) {
	if c == nil || c.pending == 0 {
		return nil, false
	}
	t := time.NewTimer(nextWait)
	defer t.Stop()
	select {
	case m := <-c.msgs:
		return m, true
	case <-t.C:
		c.pending = 0
		return nil, false
	}
}

// highWait bounds how long awaitHigh waits for the high class's first
// delivery.
const highWait = 2 * time.Second

// awaitHigh takes the high class's first delivery, waiting for it at most
// highWait, if the stream holds a high job: the two classes' consumers
// start together, and the first batch is not to be taken from the normal
// jobs before the high ones are seen. run calls it before its first batch
// and after consuming afresh. (Jobs of the store's former paths come
// first anyway: the classes' pumps start after them.)
func (w *Writer) awaitHigh(ctx context.Context) {
	if w.high == nil || w.nextFormer() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, highWait)
	defer cancel()
	w.queueOps.RLock()
	_, err := w.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(w.high.subject))
	w.queueOps.RUnlock()
	if err != nil {
		return // none queued, or no answer: decide what comes
	}
	select {
	case m := <-w.high.msgs:
		w.take(m)
	case <-ctx.Done():
	}
}
