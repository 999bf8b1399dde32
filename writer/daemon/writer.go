package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/claim"
	"github.com/scribehq/scribe/writer/exec"
	"github.com/scribehq/scribe/writer/internal/fault"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// Writer defaults.
const (
	DefaultBatchSize    = 256
	DefaultIdleRelease  = queue.DefaultIdleRelease
	DefaultWaitLog      = 10 * time.Second
	DefaultWarnAfter    = 30 * time.Second
	DefaultHandOffGrace = 250 * time.Millisecond
	// MaxLinger bounds how long the writer waits for more jobs before a
	// batch, when the last batch shows that several producers are
	// active (see Writer.linger).
	MaxLinger = 2 * time.Millisecond
)

// Settings are how a store's writer works; every store of a Daemon shares
// them. A zero field means its default.
type Settings struct {
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
	// writer.DefaultMaxFileBytes.
	MaxFileBytes int64
	// Retention is how long outcomes are kept; 0 means
	// journal.DefaultRetention.
	Retention time.Duration
	// SyncDelay, if positive, lets the fsync of a batch's files follow its
	// answer by up to this long (writer.Options.SyncDelay); 0 syncs them
	// first. A Daemon sets it to its queue's sync interval, unless it
	// syncs always.
	SyncDelay time.Duration
}

// WriterConfig configures a Writer. Store and Conn are required.
type WriterConfig struct {
	// Store is the store folder.
	Store string
	// LockPath is the store lock file; empty means lock.DefaultPath.
	LockPath string
	// Conn is the connection the writer consumes and publishes outcomes on.
	Conn *nats.Conn
	// Settings are how the writer works.
	Settings
	// Limits bounds the store's queue.
	Limits queue.Limits
	// Command describes the daemon in the lock file.
	Command string
	// Version is reported by the status service.
	Version string
	// Logger receives the writer's log; nil discards it.
	Logger *slog.Logger
	// OwnServer says that the NATS server holds this store's queue only:
	// the embedded server, whose JetStream folder lives in the store. Any
	// other scribe stream on it is then this store's queue under a former
	// path (the store's folder was moved or renamed, which changes its
	// ID), and the writer drains those streams first, in order, and
	// deletes them. Leave it false on a server that stores share.
	OwnServer bool
	// Commands is the exec allowlist: the commands exec jobs may run, by
	// name. It must pass exec.Index. Without it, exec jobs are rejected
	// queue.ReasonNotAllowed.
	Commands []exec.Command
	// CheckQueue, if set, is called every QueueCheckInterval to find and
	// repair a fault of the queue's server that its clients cannot see,
	// such as a stream's lasting write error after the disk filled up
	// (embednats.Server.CheckQueue). It returns the fault still present,
	// which the status report shows, and whether it restarted the
	// server's JetStream: then the writer consumes afresh, from the
	// oldest queued job.
	CheckQueue func(ctx context.Context) (restarted bool, err error)
	// Observer is told what the writer does, for metrics; nil observes
	// nothing (see Observer).
	Observer Observer
	// Claim, if set, is this daemon's claim on the store, whose queue
	// other daemons can reach too (a NATS cluster): the writer commits
	// nothing without it (writer.Options.Fence), and stops once it is
	// lost (Err says why). Take it with claim.Acquire before NewWriter,
	// which resets the store's consumer. The writer does not release it.
	// With a claim, NewWriter creates the store's stream if it is missing
	// and only verifies it otherwise (queue.VerifyStream).
	Claim *claim.Claim
}

// QueueCheckInterval is how often the writer calls WriterConfig.CheckQueue while
// the queue is healthy; while it is not, the interval grows to
// maxQueueCheckInterval.
const QueueCheckInterval = time.Second

const maxQueueCheckInterval = 10 * time.Second

// Writer owns one store for a daemon: it consumes the store's queue, holds
// the store lock while there is work (releasing it when idle), applies jobs
// in batches through a writer.Session, acks them and publishes their outcomes.
type Writer struct {
	cfg     WriterConfig
	store   string
	storeID string
	js      jetstream.JetStream
	stream  jetstream.Stream
	cons    jetstream.Consumer // the stream's; replaced by run while the pump is stopped
	log     *slog.Logger
	msgs    chan jetstream.Msg
	// ahead are the messages run has taken from msgs and not yet
	// processed, in order; taken counts them, to keep that order when an
	// exec run puts back jobs that joined it. Only run touches them.
	ahead    []item
	taken    uint64
	commands map[string]*exec.Command
	svc      micro.Service
	cancel   context.CancelFunc
	done     chan struct{}
	started  time.Time
	// reconsume asks run to consume afresh: the server's JetStream was
	// restarted (see WriterConfig.CheckQueue), or the consumer is gone.
	reconsume chan struct{}
	// stopPump and pumped stop the pump and wait for it. Only run (and
	// Start) touch them.
	stopPump context.CancelFunc
	pumped   chan struct{}
	// cautious counts the jobs still to apply one at a time, attempts
	// recorded, after start (see guardPoison). Only run touches it.
	cautious int
	// lastPrune is when run last considered pruning the journal.
	lastPrune time.Time
	// obs is what observing holds needs (observe.go). Only run touches it.
	obs observeState
	// lastBatch and lastApply are the size and apply time of the last
	// batch of file jobs: the load linger expects. Only run touches them.
	lastBatch int
	lastApply time.Duration
	// pace is the recent spacing of jobs taken (a moving average of the
	// gaps shorter than a lull), lastTaken when the last was taken: how
	// long linger may expect the next to take. Only run touches them.
	pace      time.Duration
	lastTaken time.Time
	// The store's own stream is never acked message by message: each ack
	// would cost JetStream a synced delete record. Instead run purges it
	// up to the floor (see purge). committed is the highest sequence of
	// it whose outcome the journal has, purged the floor of the last
	// purge, purgeTimer (nil when stopped) runs while a purge is owed.
	// Only run touches them.
	committed, purged uint64
	lastPurge         time.Time
	purgeTimer        *time.Timer
	// floor is the sequence up to which every job of the store's own
	// stream is decided: purge removes them. Queued and scan read it.
	floor atomic.Uint64
	// nextDelivery is the delivery (consumer) sequence the next message
	// of the store's own stream must have; lost says one came with a
	// later one: deliveries were lost in transit. Only run touches them
	// (see take).
	nextDelivery uint64
	lost         bool

	// opening serialises opening the store's journal: bbolt's flock makes
	// a look-up's read-only open wait for the writer's own session (and
	// time out) while acquire or finishInterrupted is opening it, so a
	// look-up takes it before it decides which journal to read.
	opening  sync.Mutex
	mu       sync.Mutex // guards the fields below
	session  *writer.Session
	epoch    uint64
	applied  uint64
	rejected uint64
	waiting  string
	fault    string
	// queueFault is the fault WriterConfig.CheckQueue reports, "" if none.
	queueFault string
	// former are the streams of the store's former IDs still to drain,
	// oldest jobs first.
	former []*formerStream
	// inHand says run has taken a batch it has not finished; lastDone is
	// when it last finished one (or started). See Idle.
	inHand   bool
	lastDone time.Time
	// running is the exec run in progress, deferred why the job in hand
	// is deferred; for the status report.
	running  *running
	deferred string
	// hand are the jobs of the batch (or exec run) in hand, for Locate.
	hand []handJob
	// stopErr is why the writer stopped on its own (see Err).
	stopErr error
}

// item is a message taken from the queue, decoded.
type item struct {
	m   jetstream.Msg
	e   writer.Entry
	n   uint64 // the order it was taken in
	own bool   // of the store's own stream (not a former path's)
}

// isExec reports whether the item is an exec job, which runs alone.
func (it item) isExec() bool { return it.e.Err == nil && it.e.Job.IsExec() }

// formerStream is a stream of this store under a former path: see
// WriterConfig.OwnServer.
type formerStream struct {
	id     string // the store's former ID
	name   string
	stream jetstream.Stream
}

// NewWriter prepares a writer for a store: it creates (or updates) the
// store's stream and recreates its durable consumer, so that whatever a
// previous daemon left unacked is delivered again from the start, in
// stream order. Start starts it.
func NewWriter(ctx context.Context, cfg WriterConfig) (*Writer, error) {
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
	if err := cfg.Limits.Check(); err != nil {
		return nil, err
	}
	w := &Writer{cfg: cfg, store: real, storeID: queue.StoreID(real), log: cfg.Logger, started: time.Now(), cautious: cautiousJobs}
	if w.commands, err = exec.Index(cfg.Commands, lockPathOf(real, cfg.LockPath), queue.Layout{Root: real}.Meta()); err != nil {
		return nil, err
	}
	if w.js, err = jetstream.New(cfg.Conn); err != nil {
		return nil, err
	}
	if cfg.OwnServer {
		// Before the stream is created: its byte limit may need the
		// space the former streams reserve.
		if err := w.findFormer(ctx); err != nil {
			return nil, fmt.Errorf("look for the queues of the store's former paths: %w", err)
		}
	}
	if cfg.Claim != nil {
		// A server other daemons reach: the stream is the operator's
		// to change, not this daemon's.
		w.stream, err = queue.VerifyStream(ctx, w.js, w.storeID, cfg.Limits)
	} else {
		w.stream, err = queue.CreateStream(ctx, w.js, w.storeID, cfg.Limits)
	}
	if errors.Is(err, queue.ErrNoSpace) {
		// JetStream refuses to change an existing stream's limits while
		// the disk is short of what all streams reserve, even to lower
		// them: serving the queue as it is beats refusing to start.
		if s, serr := w.js.Stream(ctx, queue.StreamName(w.storeID)); serr == nil {
			w.log.Warn("the queue keeps its former limits: JetStream cannot reserve new ones now", "max_jobs", s.CachedInfo().Config.MaxMsgs, "max_bytes", s.CachedInfo().Config.MaxBytes, "err", err)
			w.stream, err = s, nil
		}
	}
	if err != nil {
		return nil, err
	}
	if err := w.stream.DeleteConsumer(ctx, queue.ConsumerName); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("reset consumer: %w", err)
	}
	return w, nil
}

// Start begins consuming: first the streams of the store's former paths,
// if any (WriterConfig.OwnServer), then its own. Close stops it.
func (w *Writer) Start(ctx context.Context) error {
	cons, err := w.stream.CreateOrUpdateConsumer(ctx, queue.ConsumerConfig())
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	w.cons, w.nextDelivery = cons, 1
	w.finishInterrupted()
	w.mu.Lock()
	w.lastDone = time.Now()
	w.mu.Unlock()
	if w.svc, err = w.serveStatus(); err != nil {
		return err
	}
	w.msgs = make(chan jetstream.Msg, w.cfg.BatchSize)
	w.reconsume = make(chan struct{}, 1)
	ctx, w.cancel = context.WithCancel(context.Background())
	w.done = make(chan struct{})
	w.startPump(ctx)
	watched := make(chan struct{})
	go w.watch(ctx, watched)
	go func() {
		defer close(w.done)
		w.run(ctx)
		_ = w.svc.Stop()
		w.stopPump()
		<-w.pumped
		<-watched
	}()
	return nil
}

// startPump starts the pump under ctx.
func (w *Writer) startPump(ctx context.Context) {
	ctx, w.stopPump = context.WithCancel(ctx)
	w.pumped = make(chan struct{})
	go w.pump(ctx, w.pumped)
}

// pump moves messages into w.msgs, in order: those of the former streams,
// each drained and deleted in turn, then those of the store's own stream.
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
			if !sleep(ctx, backoff(attempt)) {
				return
			}
			attempt++
			continue
		}
		attempt = 0
	}
	for attempt := 0; ; attempt++ {
		err := w.consume(ctx, w.cons)
		if ctx.Err() != nil {
			return
		}
		if w.consumerGone(ctx, err) {
			// Pulling from it again would wait for ever: run recreates it
			// and consumes afresh, which restarts the pump.
			w.log.Warn("the queue's consumer is gone; consuming afresh from the oldest undecided job", "err", err)
			w.askReconsume()
			return
		}
		w.log.Warn("consume; retrying", "err", err)
		if !sleep(ctx, backoff(attempt)) {
			return
		}
	}
}

// consumerGone reports whether the writer's consumer no longer exists on
// the server, after consume ended with err: the server said it was
// deleted, or it does not know it when asked. A consumer vanishes when
// the server loses it (its state is kept in memory) or someone deletes
// it; a new one with the same name starts from the oldest job.
func (w *Writer) consumerGone(ctx context.Context, err error) bool {
	if errors.Is(err, jetstream.ErrConsumerDeleted) {
		return true
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = w.cons.Info(ictx)
	return errors.Is(err, jetstream.ErrConsumerNotFound)
}

// askReconsume asks run to consume afresh, at most once pending.
func (w *Writer) askReconsume() {
	select {
	case w.reconsume <- struct{}{}:
	default:
	}
}

// consume moves the consumer's messages into w.msgs until ctx ends or the
// consumer fails.
func (w *Writer) consume(ctx context.Context, cons jetstream.Consumer) error {
	// Buffer a batch's worth, but no more bytes than a batch takes (and
	// never less than the largest job, or the pull would stall).
	iter, err := cons.Messages(jetstream.PullMaxMessagesWithBytesLimit(w.cfg.BatchSize, max(maxBatchBytes, 2*(w.cfg.Limits.JobBytes()+4096))))
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
		if !w.deliver(ctx, m) {
			return ctx.Err()
		}
	}
}

// deliver hands a message to run. It returns false if ctx ended first,
// leaving the message unacked: JetStream delivers it again.
func (w *Writer) deliver(ctx context.Context, m jetstream.Msg) bool {
	select {
	case w.msgs <- m:
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
	cons, err := f.stream.CreateOrUpdateConsumer(ctx, queue.ConsumerConfig())
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
			if !w.deliver(ctx, m) {
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
		if !sleep(ctx, backoff(idle)) {
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
	for sleep(ctx, wait) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		restarted, err := w.cfg.CheckQueue(cctx)
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
	for drained := false; !drained; {
		select {
		case <-w.msgs:
		default:
			drained = true
		}
	}
	for attempt := 0; ; attempt++ {
		err := w.stream.DeleteConsumer(ctx, queue.ConsumerName)
		if err == nil || errors.Is(err, jetstream.ErrConsumerNotFound) {
			var cons jetstream.Consumer
			if cons, err = w.stream.CreateOrUpdateConsumer(ctx, queue.ConsumerConfig()); err == nil {
				w.cons, w.nextDelivery = cons, 1
				break
			}
		}
		w.log.Warn("recreate the consumer; retrying", "err", err)
		if !sleep(ctx, backoff(attempt)) {
			return false
		}
	}
	w.log.Info("consuming afresh from the oldest queued job")
	w.startPump(ctx)
	return true
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

// liftStranded removes the stranded marker once the queue, former
// streams included, is seen empty: nothing is left for direct writes to
// overtake.
func (w *Writer) liftStranded(ctx context.Context) {
	if n, err := w.Queued(ctx); err != nil || n > 0 {
		return
	}
	if err := queue.LiftStranded(w.store); err != nil {
		w.log.Warn("remove stranded marker", "err", err)
	}
}

func (w *Writer) run(ctx context.Context) {
	idle := time.NewTimer(w.cfg.IdleRelease)
	defer idle.Stop()
	defer w.release()
	for {
		select {
		case <-w.reconsume:
			if !w.consumeAfresh(ctx) {
				return
			}
		default:
			if w.lost && !w.consumeAfresh(ctx) {
				return
			}
		}
		if w.claimLost() != nil {
			return
		}
		if len(w.ahead) == 0 {
			select {
			case <-ctx.Done():
				w.purge(context.Background(), true)
				return
			case <-w.lostClaim():
				continue // stops at the top
			case <-w.purgeDue():
				w.purge(ctx, true)
			case <-w.syncDue():
				if err := w.session.Sync(); err != nil {
					w.log.Warn("sync the files of answered batches", "err", err)
				}
			case <-idle.C:
				w.purge(ctx, true)
				w.release()
				w.liftStranded(ctx)
			case <-w.reconsume:
				if !w.consumeAfresh(ctx) {
					return
				}
			case m := <-w.msgs:
				w.take(m)
			}
			continue
		}
		w.setInHand(true)
		w.fill()
		var ok bool
		if head := w.ahead[0]; head.isExec() {
			w.purge(ctx, true) // the run may take long
			w.ahead = w.ahead[1:]
			ok = w.processExec(ctx, head)
		} else {
			// File jobs up to the next exec job, which runs alone.
			w.linger()
			n, size := 1, len(w.ahead[0].m.Data())
			for n < len(w.ahead) && n < w.cfg.BatchSize && w.cautious == 0 && !w.ahead[n].isExec() {
				if size += len(w.ahead[n].m.Data()); size > maxBatchBytes {
					break
				}
				n++
			}
			batch := slices.Clone(w.ahead[:n])
			w.ahead = w.ahead[n:]
			ok = w.process(ctx, batch)
		}
		w.setInHand(false)
		if !ok {
			return // ctx ended with a batch in hand: not decided, so no purge
		}
		w.purge(ctx, false)
		idle.Reset(w.cfg.IdleRelease)
	}
}

// syncDue fires when the files of the batches the writer answered
// before syncing them are due to be synced; nil (never ready) if there
// are none.
func (w *Writer) syncDue() <-chan time.Time {
	if w.session == nil {
		return nil
	}
	by := w.session.SyncBy()
	if by.IsZero() {
		return nil
	}
	return time.After(time.Until(by))
}

// lostClaim is closed once the claim is lost; nil (never ready) without
// a claim.
func (w *Writer) lostClaim() <-chan struct{} {
	if w.cfg.Claim == nil {
		return nil
	}
	return w.cfg.Claim.Lost()
}

// take decodes a message and appends it to ahead, and updates pace.
//
// Purging the stream up to the jobs decided is right only if no job
// before them is still on its way, so take checks that the store's own
// stream's messages come without a gap in their delivery sequence, which
// JetStream raises with every delivery, redeliveries included. A gap
// means deliveries were lost on the way (a connection to a cluster node
// dropped with messages in flight, or nats.go dropped some from a full
// subscription): JetStream would redeliver them only after AckWait, after
// later jobs were applied and purged past them. take then drops m and
// sets lost, and run consumes afresh from the oldest undecided job.
func (w *Writer) take(m jetstream.Msg) {
	md, err := m.Metadata()
	own := err == nil && md.Stream == queue.StreamName(w.storeID) // isOwn
	if own {
		d := md.Sequence.Consumer
		if d > w.nextDelivery {
			w.log.Warn("deliveries were lost on the way from the queue; consuming afresh from the oldest undecided job",
				"delivery", d, "expected", w.nextDelivery, "seq", md.Sequence.Stream)
			w.lost = true
			return
		}
		w.nextDelivery = d + 1 // lower after a consumer leader change: redeliveries
	}
	now := time.Now()
	if d := now.Sub(w.lastTaken); d < 10*maxLingerGap { // longer: a lull, not a pace
		w.pace += (d - w.pace) / 8
	}
	w.lastTaken = now
	w.taken++
	w.ahead = append(w.ahead, item{m: m, e: w.entry(m), n: w.taken, own: own})
}

// isOwn reports whether m is of the store's own stream.
func (w *Writer) isOwn(m jetstream.Msg) bool {
	md, err := m.Metadata()
	return err == nil && md.Stream == queue.StreamName(w.storeID)
}

// fill takes the messages already delivered, without waiting, until ahead
// holds a batch's worth.
func (w *Writer) fill() {
	for len(w.ahead) < w.cfg.BatchSize && !w.lost {
		select {
		case m := <-w.msgs:
			w.take(m)
		default:
			return
		}
	}
}

// maxBatchBytes bounds the jobs' bytes in one batch (at least one job):
// the batch's new file contents are held in memory and in its intent.
const maxBatchBytes = 64 << 20

// Purging: how often, and after how many decided jobs, at most.
const (
	purgeEvery = 100 * time.Millisecond
	purgeJobs  = 1024
)

// purge removes from the store's own stream the jobs up to the floor:
// those whose outcomes the journal has, below the oldest job still
// undecided. One purge, one sync, stands for the acks of all of them.
// Unless forced it waits until purgeEvery has passed or purgeJobs are
// owed, and arms purgeTimer meanwhile. Only run calls it, between batches.
// A purge that fails is retried later: the jobs it would have removed
// are only delivered again (after a restart) and found in the journal.
func (w *Writer) purge(ctx context.Context, force bool) {
	if floor := purgeFloor(w.committed, w.ahead); floor > w.floor.Load() {
		w.floor.Store(floor)
	}
	floor := w.floor.Load()
	if floor <= w.purged {
		w.stopPurgeTimer()
		return
	}
	if !force && floor-w.purged < purgeJobs && time.Since(w.lastPurge) < purgeEvery {
		if w.purgeTimer == nil {
			w.purgeTimer = time.NewTimer(purgeEvery - time.Since(w.lastPurge))
		}
		return
	}
	w.stopPurgeTimer()
	if w.cfg.Claim != nil && w.cfg.Claim.Check() != nil {
		return // a writer that may have lost the store leaves the queue alone
	}
	fault.Crash("ack")
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	w.lastPurge = time.Now()
	if err := w.stream.Purge(ctx, jetstream.WithPurgeSequence(floor+1)); err != nil {
		w.log.Warn("purge decided jobs from the queue; retrying later", "up_to_seq", floor, "err", err)
		w.purgeTimer = time.NewTimer(purgeEvery)
		return
	}
	fault.Crash("acked")
	w.purged = floor
}

// purgeFloor is the highest sequence of the store's own stream that may
// be purged: at most the highest decided one, and below every job taken
// but not decided (ahead). Jobs are decided in order, but not strictly:
// jobs that join an exec run are decided before other jobs queued between
// them (docs/exec.md), and those must stay in the queue until decided.
// Jobs not taken yet come after every job taken: the consumer delivers in
// order.
func purgeFloor(committed uint64, ahead []item) uint64 {
	floor := committed
	for _, it := range ahead {
		if it.own && it.e.Seq != 0 && it.e.Seq <= floor {
			floor = it.e.Seq - 1
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

// Linger bounds: the pause after which no more jobs are expected, as a
// multiple of the producers' recent pace, and its floor and ceiling.
const (
	lingerPaces  = 3
	minLingerGap = 100 * time.Microsecond
	maxLingerGap = time.Millisecond
)

// linger waits briefly for more jobs before a batch of file jobs, so that
// the batch, and the journal write and fsyncs it costs, is shared by
// more of them: group commit. It waits only when the last batch had
// several jobs (producers are active and come back as their outcomes
// reach them), and only while jobs keep coming: it stops at a pause of
// lingerPaces times their recent spacing (within minLingerGap and
// maxLingerGap), at twice the last batch's size, or after as long as
// the last batch took to apply, at most MaxLinger.
func (w *Writer) linger() {
	if w.lastBatch <= 1 || w.cautious > 0 {
		return
	}
	want := min(2*w.lastBatch, w.cfg.BatchSize)
	deadline := time.Now().Add(min(w.lastApply, MaxLinger))
	gap := min(max(lingerPaces*w.pace, minLingerGap), maxLingerGap)
	t := time.NewTimer(gap)
	defer t.Stop()
	for len(w.ahead) < want {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		t.Reset(min(gap, left))
		select {
		case m := <-w.msgs:
			w.take(m)
		case <-t.C:
			return
		}
	}
}

// setInHand records that run took a batch (true) or finished one (false).
func (w *Writer) setInHand(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inHand = on
	if !on {
		w.hand = nil
		w.lastDone = time.Now()
	}
}

// Idle returns how long the writer has had no job in hand: since it
// finished its last batch, or since Start if it has applied none. It is 0
// while a batch is in hand (applying it, or waiting for the store lock).
// Jobs still queued but not yet taken do not count: ask Queued too.
func (w *Writer) Idle() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inHand || w.lastDone.IsZero() {
		return 0
	}
	return time.Since(w.lastDone)
}

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
		if !sleep(ctx, w.cfg.HandOffGrace) {
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
	if hdr := m.Headers().Get(nats.MsgIdHdr); hdr != "" && job.ID != "" && hdr != job.ID {
		e.Err = queue.Reject(queue.ReasonBadInput, "Nats-Msg-Id %q does not match job id %q", hdr, job.ID)
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
func (w *Writer) apply(ctx context.Context, batch []jetstream.Msg, entries []writer.Entry) ([]writer.Result, bool) {
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
		applyStart := time.Now()
		results, err := w.session.Apply(entries)
		if err == nil {
			w.lastBatch, w.lastApply = len(entries), time.Since(applyStart)
			w.observer().BatchApplied(len(entries), w.lastApply)
			if w.cautious > 0 {
				w.cautious--
			}
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
	return sleep(ctx, backoff(attempt))
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
		if seq := entries[i].Seq; w.isOwn(m) {
			w.committed = max(w.committed, seq)
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
}

// maybePrune prunes the journal now and then, keeping every outcome the
// queue could still redeliver: those at or after the stream's first
// remaining sequence.
func (w *Writer) maybePrune(ctx context.Context) {
	if time.Since(w.lastPrune) < journal.PruneEvery || w.session == nil {
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

// stopFor records why the writer stops on its own (its claim lost).
func (w *Writer) stopFor(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopErr == nil {
		w.stopErr = err
	}
}

// Done is closed once the writer has stopped: by Close, or on its own
// when its claim on the store was lost (Err).
func (w *Writer) Done() <-chan struct{} { return w.done }

// Err is why the writer stopped on its own: its claim on the store lost
// to another daemon (claim.ErrLost, journal.ErrFenced); nil otherwise.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
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
	for attempt := 0; ; attempt++ {
		if err := w.claimLost(); err != nil {
			return err
		}
		w.opening.Lock()
		s, err := writer.Open(context.Background(), w.store, w.sessionOptions())
		if err == nil {
			w.mu.Lock()
			w.session, w.epoch, w.waiting = s, s.Epoch(), ""
			w.mu.Unlock()
			w.opening.Unlock()
			w.observeAcquired(start)
			return nil
		}
		w.opening.Unlock()
		w.mu.Lock()
		w.waiting = err.Error()
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
func (w *Writer) guardPoison(entries []writer.Entry) error {
	j := w.session.Journal()
	seq := entries[0].Seq
	attempts, err := j.Attempts(seq)
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
	return j.SetAttempts(seq, attempts+1)
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

// withJournal runs fn on the store's journal: the writer's session's when
// it holds the store, else a read-only open (which fails after a moment
// while a direct writer has it). fn gets nil if there is no journal yet.
func (w *Writer) withJournal(fn func(*journal.Journal) error) error {
	w.opening.Lock()
	defer w.opening.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.session != nil {
		return fn(w.session.Journal())
	}
	ro, err := journal.OpenReadOnly(journal.Path(w.store), 500*time.Millisecond)
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
	err := w.withJournal(func(j *journal.Journal) error {
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
	err := w.withJournal(func(j *journal.Journal) error {
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
				// submitters may subscribe to: _INBOX.> on the embedded
				// server, the store's own prefix on a shared one), never onto
				// the queue's API or another caller's outcome subject
				// (docs/security.md).
				if r := req.Reply(); !strings.HasPrefix(r, "_INBOX.") && !strings.HasPrefix(r, queue.ClientInboxPrefix(w.storeID)+".") {
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
				default: // a job ID, or a locate or jobs request (jobs.go)
					v = w.statusAnswer(body)
				}
				if b, err := w.reply(v); err == nil {
					_ = req.Respond(b)
				}
			}),
		},
	})
}

// replyLimit is the most bytes a message the writer sends may take: the
// status service's bound, or less if the server carries less.
func (w *Writer) replyLimit() int {
	limit := int64(queue.MaxReplyBytes)
	if mp := w.cfg.Conn.MaxPayload(); mp > 0 {
		limit = min(limit, mp-1024)
	}
	return int(max(limit, queue.MinFitBytes))
}

// reply encodes a status answer, cut to fit one message (replyLimit):
// an outcome recorded by a version that did not bound it, a listing of
// many outcomes, a report of long strings.
func (w *Writer) reply(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	limit := w.replyLimit()
	if err != nil || len(b) <= limit {
		return b, err
	}
	switch x := v.(type) {
	case *queue.StatusReport:
		x.Fit(limit)
	case queue.DeadLetters:
		x.Fit(limit)
		v = x
	case queue.Lookup:
		x.Fit(limit)
		v = x
	case queue.JobList:
		x.Fit(limit)
		v = x
	}
	return json.Marshal(v)
}

// Queued returns how many jobs wait in the store's stream and in the
// streams of its former paths still to drain.
func (w *Writer) Queued(ctx context.Context) (uint64, error) {
	info, err := w.stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	n := info.State.Msgs
	// Jobs decided but not yet purged are not queued any more.
	if first := max(info.State.FirstSeq, 1); info.State.Msgs > 0 {
		if floor := w.floor.Load(); floor >= first {
			n -= min(n, floor-first+1)
		}
	}
	w.mu.Lock()
	former := slices.Clone(w.former)
	w.mu.Unlock()
	for _, f := range former {
		info, err := f.stream.Info(ctx)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // drained and deleted meanwhile
		}
		if err != nil {
			return 0, err
		}
		n += info.State.Msgs
	}
	return n, nil
}

// Report describes the writer and its queue.
func (w *Writer) Report(ctx context.Context) *queue.StatusReport {
	r := &queue.StatusReport{V: queue.Version, PID: os.Getpid(), Version: w.cfg.Version, Started: w.started}
	w.mu.Lock()
	r.Holding, r.Epoch, r.Applied, r.Rejected, r.Waiting = w.session != nil, w.epoch, w.applied, w.rejected, w.waiting
	r.Fault = joinFaults(w.fault, w.queueFault)
	r.Deferred = w.deferred
	if w.running != nil {
		r.Running = w.running.String()
		r.Holding = true // through the hold the command was handed
	}
	w.mu.Unlock()
	r.Store, r.StoreID = w.store, w.storeID
	r.Queued, _ = w.Queued(ctx)
	w.fillReport(r) // the lock, the journal, what is in hand (jobs.go)
	return r
}

// joinFaults joins the faults that are set.
func joinFaults(faults ...string) string {
	return strings.Join(slices.DeleteFunc(faults, func(f string) bool { return f == "" }), "; ")
}

func lockPathOf(store, lockPath string) string {
	if lockPath != "" {
		return lockPath
	}
	return lock.DefaultPath(store)
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
