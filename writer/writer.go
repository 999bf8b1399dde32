package writer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"scribe/queue"
)

// Writer defaults.
const (
	DefaultBatchSize    = 256
	DefaultIdleRelease  = 500 * time.Millisecond
	DefaultWaitLog      = 10 * time.Second
	DefaultWarnAfter    = 30 * time.Second
	DefaultHandOffGrace = 250 * time.Millisecond
)

// Config configures a Writer. Store and Conn are required.
type Config struct {
	// Store is the store folder.
	Store string
	// LockPath is the store lock file; empty means DefaultLockPath.
	LockPath string
	// Conn is the connection the writer consumes and publishes outcomes on.
	Conn *nats.Conn
	// BatchSize is the most jobs applied in one batch (one journal
	// transaction). 0 means DefaultBatchSize.
	BatchSize int
	// IdleRelease is how long the writer keeps the store lock with nothing
	// to do before releasing it to direct writers. 0 means
	// DefaultIdleRelease.
	IdleRelease time.Duration
	// WaitLog is how often, at most, the writer logs that it is waiting for
	// the store lock. 0 means DefaultWaitLog.
	WaitLog time.Duration
	// WarnAfter is how long the writer waits for another holder before
	// its log says so as a warning. 0 means DefaultWarnAfter.
	WarnAfter time.Duration
	// HandOffGrace is how long the writer stays away from the store after
	// letting go for a waiting direct writer. 0 means DefaultHandOffGrace.
	HandOffGrace time.Duration
	// MaxFileBytes limits a file's size after an op; 0 means
	// DefaultMaxFileBytes.
	MaxFileBytes int64
	// Limits bounds the store's queue.
	Limits queue.Limits
	// Retention is how long outcomes are kept; 0 means DefaultRetention.
	Retention time.Duration
	// Command describes the daemon in the lock file.
	Command string
	// Version is reported by the status service.
	Version string
	// Logger receives the writer's log; nil discards it.
	Logger *slog.Logger
}

// Writer owns one store for a daemon: it consumes the store's queue, holds
// the store lock while there is work (releasing it when idle), applies jobs
// in batches through a Session, acks them and publishes their outcomes.
type Writer struct {
	cfg     Config
	store   string
	storeID string
	js      jetstream.JetStream
	stream  jetstream.Stream
	log     *slog.Logger
	msgs    chan jetstream.Msg
	iter    jetstream.MessagesContext
	svc     micro.Service
	cancel  context.CancelFunc
	done    chan struct{}
	started time.Time
	// cautious counts the jobs still to apply one at a time, attempts
	// recorded, after start (see guardPoison). Only run touches it.
	cautious int
	// lastPrune is when run last considered pruning the journal.
	lastPrune time.Time

	mu       sync.Mutex // guards the fields below
	session  *Session
	epoch    uint64
	applied  uint64
	rejected uint64
	waiting  string
	fault    string
}

// New prepares a writer for a store: it creates (or updates) the store's
// stream and recreates its durable consumer, so that whatever a previous
// daemon left unacked is delivered again from the start, in stream order.
func New(ctx context.Context, cfg Config) (*Writer, error) {
	real, err := queue.ResolveStore(cfg.Store)
	if err != nil {
		return nil, err
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.IdleRelease <= 0 {
		cfg.IdleRelease = DefaultIdleRelease
	}
	if cfg.WaitLog <= 0 {
		cfg.WaitLog = DefaultWaitLog
	}
	if cfg.WarnAfter <= 0 {
		cfg.WarnAfter = DefaultWarnAfter
	}
	if cfg.HandOffGrace <= 0 {
		cfg.HandOffGrace = DefaultHandOffGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w := &Writer{cfg: cfg, store: real, storeID: queue.StoreID(real), log: cfg.Logger, started: time.Now(), cautious: cautiousJobs}
	if w.js, err = jetstream.New(cfg.Conn); err != nil {
		return nil, err
	}
	if w.stream, err = w.js.CreateOrUpdateStream(ctx, queue.StreamConfig(w.storeID, cfg.Limits)); err != nil {
		return nil, fmt.Errorf("create stream: %w", err)
	}
	if err := w.stream.DeleteConsumer(ctx, queue.ConsumerName); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("reset consumer: %w", err)
	}
	return w, nil
}

// Start begins consuming. Close stops it.
func (w *Writer) Start(ctx context.Context) error {
	cons, err := w.stream.CreateOrUpdateConsumer(ctx, queue.ConsumerConfig())
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	if w.iter, err = cons.Messages(jetstream.PullMaxMessages(w.cfg.BatchSize)); err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	if w.svc, err = w.serveStatus(); err != nil {
		w.iter.Stop()
		return err
	}
	w.msgs = make(chan jetstream.Msg, w.cfg.BatchSize)
	ctx, w.cancel = context.WithCancel(context.Background())
	w.done = make(chan struct{})
	pumped := make(chan struct{})
	go w.pump(ctx, pumped)
	go func() {
		defer close(w.done)
		w.run(ctx)
		_ = w.svc.Stop()
		w.iter.Stop()
		<-pumped
	}()
	return nil
}

// pump moves messages from the consumer into w.msgs, in order.
func (w *Writer) pump(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for {
		m, err := w.iter.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			w.log.Warn("consume", "err", err)
			continue
		}
		select {
		case w.msgs <- m:
		case <-ctx.Done():
			return // unacked: JetStream redelivers it to the next writer
		}
	}
}

// Close stops the writer: the batch in hand is finished, acked and
// answered, the store lock is released, and Close waits for all of it.
// Jobs not yet taken stay queued.
// If jobs are left in the queue, Close leaves the stranded marker, so that
// direct writes of the prefer route do not overtake them until a daemon
// has drained them; if none are, it lifts the marker.
func (w *Writer) Close() error {
	if w.cancel == nil {
		return nil
	}
	w.cancel()
	<-w.done
	w.cancel = nil
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := w.Queued(ctx)
	if err == nil && n == 0 {
		w.liftStranded(ctx)
		return nil
	}
	w.log.Warn("stopping with jobs still queued; they apply when a daemon serves the store again", "jobs", n, "err", err)
	return queue.MarkStranded(w.store, fmt.Sprintf("daemon pid %d stopped with %d jobs queued", os.Getpid(), n))
}

// liftStranded removes the stranded marker once the queue is seen empty:
// nothing is left for direct writes to overtake.
func (w *Writer) liftStranded(ctx context.Context) {
	if n, err := w.Queued(ctx); err != nil || n > 0 {
		return
	}
	if err := os.Remove(queue.StrandedPath(w.store)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.log.Warn("remove stranded marker", "err", err)
	}
}

func (w *Writer) run(ctx context.Context) {
	idle := time.NewTimer(w.cfg.IdleRelease)
	defer idle.Stop()
	defer w.release()
	for {
		select {
		case <-ctx.Done():
			return
		case <-idle.C:
			w.release()
			w.liftStranded(ctx)
		case m := <-w.msgs:
			batch := []jetstream.Msg{m}
		fill:
			for len(batch) < w.cfg.BatchSize && w.cautious == 0 {
				select {
				case m := <-w.msgs:
					batch = append(batch, m)
				default:
					break fill
				}
			}
			if !w.process(ctx, batch) {
				return
			}
			idle.Reset(w.cfg.IdleRelease)
		}
	}
}

// process applies a batch, acks it and publishes its outcomes. It returns
// false if ctx ended while it was waiting for the store, leaving the batch
// unacked in the queue.
func (w *Writer) process(ctx context.Context, batch []jetstream.Msg) bool {
	crashPoint("fetched")
	entries := make([]Entry, len(batch))
	for i, m := range batch {
		job, err := queue.Decode(m.Data())
		entries[i] = Entry{Job: job, Err: err, Raw: m.Data()}
		if md, err := m.Metadata(); err == nil {
			entries[i].Seq = md.Sequence.Stream
		}
	}
	if w.session != nil && Demanded(w.store) {
		// A direct writer is waiting: the batch in hand can wait for it.
		w.log.Info("handing the store to a waiting direct writer", "grace", w.cfg.HandOffGrace)
		w.release()
		if !sleep(ctx, w.cfg.HandOffGrace) {
			return false
		}
	}
	results, ok := w.apply(ctx, batch, entries)
	if !ok {
		return false
	}
	crashPoint("commit")
	w.answer(batch, entries, results)
	crashPoint("published")
	w.maybePrune(ctx)
	return true
}

// apply applies the batch under the store lock, waiting for the lock and
// retrying through I/O faults, until it succeeds or ctx ends (false: the
// batch stays unacked in the queue).
func (w *Writer) apply(ctx context.Context, batch []jetstream.Msg, entries []Entry) ([]Result, bool) {
	var lastFaultLog time.Time
	guarded := false
	for attempt := 0; ; attempt++ {
		if err := w.acquire(ctx, batch); err != nil {
			return nil, false
		}
		if w.cautious > 0 && !guarded { // once per batch: I/O retries are not deaths
			if err := w.guardPoison(entries); err != nil {
				w.setFault(err.Error())
				if !sleep(ctx, backoff(attempt)) {
					return nil, false
				}
				continue
			}
			guarded = true
		}
		results, err := w.session.Apply(entries)
		if err == nil {
			if w.cautious > 0 {
				w.cautious--
			}
			if w.setFault(""); !lastFaultLog.IsZero() {
				w.log.Info("the store is writable again", "jobs", len(batch))
			}
			w.count(results)
			return results, true
		}
		// An I/O fault (disk full, read-only, EIO): nothing of this batch
		// is recorded as applied and nothing is acked. Keep the batch in
		// hand and retry; the next Apply first completes what was begun.
		w.setFault(err.Error())
		if attempt == 0 || time.Since(lastFaultLog) >= w.cfg.WaitLog {
			lastFaultLog = time.Now()
			w.log.Error("apply batch failed; retrying", "err", err, "jobs", len(batch), "attempt", attempt+1)
		}
		if attempt > 0 && attempt%20 == 0 {
			for _, m := range batch {
				_ = m.InProgress()
			}
		}
		if !sleep(ctx, backoff(attempt)) {
			return nil, false
		}
	}
}

// count adds a batch's outcomes to the status report's counters.
func (w *Writer) count(results []Result) {
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

// answer acks a committed batch and then publishes each job's outcome.
func (w *Writer) answer(batch []jetstream.Msg, entries []Entry, results []Result) {
	// The journal has every outcome: now the queue may forget the jobs.
	for i, m := range batch {
		if err := m.Ack(); err != nil {
			w.log.Warn("ack", "err", err) // redelivery is harmless: the journal has the outcome
		}
		if i == 0 {
			crashPoint("ack")
		}
	}
	crashPoint("acked")
	for i, r := range results {
		o := r.Outcome
		if o.ID == "" {
			w.log.Warn("dead-lettered a job with no readable ID", "seq", entries[i].Seq, "reason", o.Reason, "detail", o.Detail)
			continue
		}
		if o.Status == queue.StatusRejected && !r.Duplicate {
			w.log.Info("job rejected", "id", o.ID, "reason", o.Reason, "detail", o.Detail)
		}
		if b, err := queue.EncodeOutcome(o); err == nil {
			if err := w.cfg.Conn.Publish(queue.OutcomeSubject(w.storeID, o.ID), b); err != nil {
				w.log.Warn("publish outcome", "id", o.ID, "err", err)
			}
		}
	}
}

// maybePrune prunes the journal now and then, keeping every outcome the
// queue could still redeliver: those at or after the stream's first
// remaining sequence.
func (w *Writer) maybePrune(ctx context.Context) {
	if time.Since(w.lastPrune) < pruneEvery || w.session == nil {
		return
	}
	w.lastPrune = time.Now()
	info, err := w.stream.Info(ctx)
	if err != nil {
		return
	}
	floor := info.State.LastSeq
	if info.State.Msgs > 0 {
		floor = info.State.FirstSeq - 1
	}
	w.session.MaybePrune(floor)
}

// acquire makes sure the writer holds the store, waiting while someone else
// does. Waiting is a deferral: the batch stays in hand, unacked, and its
// ack deadline is pushed back.
func (w *Writer) acquire(ctx context.Context, batch []jetstream.Msg) error {
	if w.session != nil {
		return nil
	}
	var lastLog time.Time
	start := time.Now()
	for attempt := 0; ; attempt++ {
		s, err := OpenSession(w.store, SessionOptions{
			LockPath: w.cfg.LockPath, Mode: ModeDaemon, Command: w.cfg.Command,
			MaxFileBytes: w.cfg.MaxFileBytes, Retention: cmp.Or(w.cfg.Retention, DefaultRetention), Logger: w.log,
		})
		if err == nil {
			w.mu.Lock()
			w.session, w.epoch, w.waiting = s, s.Epoch(), ""
			w.mu.Unlock()
			return nil
		}
		w.mu.Lock()
		w.waiting = err.Error()
		w.mu.Unlock()
		// Waiting is a deferral, not a fault: the jobs stay queued. Say so
		// once per WaitLog, and warn once the holder has kept the store
		// past WarnAfter (it may be wedged: it is never robbed).
		if waited := time.Since(start); time.Since(lastLog) >= w.cfg.WaitLog {
			lastLog = time.Now()
			if waited >= w.cfg.WarnAfter {
				w.log.Warn("the store has been held by another process for long; still waiting", "waited", waited.Round(time.Second), "err", err, "jobs", len(batch))
			} else {
				w.log.Info("waiting for the store", "err", err, "jobs", len(batch))
			}
		}
		if attempt > 0 && attempt%20 == 0 {
			for _, m := range batch {
				_ = m.InProgress() // push back the ack deadline
			}
		}
		if !sleep(ctx, backoff(attempt)) {
			return ctx.Err()
		}
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

// guardPoison records the attempt of a one-job batch, or turns it into a
// rejection if it has killed the writer maxAttempts times.
func (w *Writer) guardPoison(entries []Entry) error {
	j := w.session.Journal()
	seq := entries[0].Seq
	attempts, err := j.attempts(seq)
	if err != nil {
		return err
	}
	if attempts >= maxAttempts {
		w.log.Error("a job killed the writer repeatedly; rejecting it", "seq", seq, "attempts", attempts)
		if entries[0].Err == nil {
			entries[0].Err = queue.Reject(queue.ReasonInternal, "the writer died %d times applying this job", attempts)
		}
		return nil
	}
	return j.setAttempts(seq, attempts+1)
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
	w.session = nil
}

// withJournal runs fn on the store's journal: the writer's session's when
// it holds the store, else a read-only open (which fails after a moment
// while a direct writer has it). fn gets nil if there is no journal yet.
func (w *Writer) withJournal(fn func(*Journal) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.session != nil {
		return fn(w.session.Journal())
	}
	ro, err := OpenJournalReadOnly(JournalPath(w.store), 500*time.Millisecond)
	if errors.Is(err, fs.ErrNotExist) {
		return fn(nil) // nothing was ever applied to this store
	}
	if err != nil {
		return err
	}
	defer ro.Close()
	return fn(ro)
}

// Lookup returns the recorded outcome of a job.
func (w *Writer) Lookup(id string) queue.Lookup {
	var l queue.Lookup
	err := w.withJournal(func(j *Journal) error {
		if j == nil {
			return nil
		}
		var err error
		l, err = j.Lookup(id)
		return err
	})
	if err != nil {
		return queue.Lookup{Error: err.Error()}
	}
	return l
}

// DeadLetters returns the most recent dead letters (at most 100).
func (w *Writer) DeadLetters() (queue.DeadLetters, error) {
	var d queue.DeadLetters
	err := w.withJournal(func(j *Journal) error {
		if j == nil {
			return nil
		}
		var err error
		d.Letters, d.Total, err = j.DeadLetters(100)
		return err
	})
	return d, err
}

// serveStatus answers status requests on the store's status subject: an
// empty request gets a StatusReport, DeadLettersRequest gets DeadLetters,
// a job ID gets a Lookup.
func (w *Writer) serveStatus() (micro.Service, error) {
	return micro.AddService(w.cfg.Conn, micro.Config{
		Name:        "scribe",
		Version:     "1.0.0",
		Description: "scribe store " + w.storeID,
		Endpoint: &micro.EndpointConfig{
			Subject: queue.StatusSubject(w.storeID),
			Handler: micro.HandlerFunc(func(req micro.Request) {
				// The requester picks the reply subject, and this connection
				// may publish anywhere: answer only into an inbox (all that
				// submitters may subscribe to), never onto the queue's API
				// or another caller's outcome subject (docs/security.md).
				if !strings.HasPrefix(req.Reply(), "_INBOX.") {
					return
				}
				var v any
				switch body := string(req.Data()); body {
				case "":
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					v = w.Report(ctx)
				case queue.DeadLettersRequest:
					d, err := w.DeadLetters()
					if err != nil {
						d.Error = err.Error()
					}
					v = d
				default:
					v = w.Lookup(body)
				}
				_ = req.RespondJSON(v)
			}),
		},
	})
}

// Queued returns how many jobs wait in the store's stream.
func (w *Writer) Queued(ctx context.Context) (uint64, error) {
	info, err := w.stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// Report describes the writer and its queue.
func (w *Writer) Report(ctx context.Context) *queue.StatusReport {
	r := &queue.StatusReport{V: queue.Version, PID: os.Getpid(), Version: w.cfg.Version, Started: w.started}
	w.mu.Lock()
	r.Holding, r.Epoch, r.Applied, r.Rejected, r.Waiting, r.Fault = w.session != nil, w.epoch, w.applied, w.rejected, w.waiting, w.fault
	w.mu.Unlock()
	r.Store, r.StoreID = w.store, w.storeID
	r.Queued, _ = w.Queued(ctx)
	if h, err := ReadHolder(lockPathOf(w.store, w.cfg.LockPath)); err == nil {
		r.Holder = h
	}
	if d, err := w.DeadLetters(); err == nil {
		r.Dead = uint64(d.Total)
	}
	return r
}

func lockPathOf(store, lockPath string) string {
	if lockPath != "" {
		return lockPath
	}
	return DefaultLockPath(store)
}

// backoff is the wait before retry n: 10 ms doubling to 500 ms.
func backoff(n int) time.Duration {
	d := 10 * time.Millisecond << min(n, 6)
	return min(d, 500*time.Millisecond)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
