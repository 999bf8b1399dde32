package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
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
	"github.com/scribehq/scribe/writer/journal"
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
	// QueueOps, if set, is the lock that restarting the queue's JetStream
	// holds (write) and the writer's JetStream API requests hold (read)
	// (embednats.Server.QueueOps): shared by the writers of one server.
	// A CheckQueue that may restart JetStream needs it. Without it the
	// writer's requests hold a lock of their own, which nothing else takes.
	QueueOps *sync.RWMutex
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
	// Moved, if set, says why the store this daemon locked is no longer at
	// Store's path (discovery.Lock.Moved): moved, removed or replaced
	// since, so that the path may now lead to another store. The writer
	// checks it each time it takes the store and before it marks or lifts
	// the stranded marker, and stops once it fails (Err says why).
	Moved func() error
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
	log     *slog.Logger
	// normal and high are the classes of the store's own stream; high is
	// nil on a stream without its subject (queue.HasHighSubject). Their
	// pumps deliver to their msgs, the former streams' to normal's.
	normal, high *class
	// ahead are the messages run has taken from the classes' msgs and
	// not yet processed, in order; taken counts them, to keep that order
	// when an exec run puts back jobs that joined it. Only run touches them.
	ahead    []item
	taken    uint64
	commands map[string]*exec.Command
	svc      micro.Service
	// cancels are the cancel requests waiting for run; cancelSub feeds
	// them (cancel.go).
	cancels   chan cancelRequest
	cancelSub *nats.Subscription
	// highRun counts the batches of high jobs decided in a row while
	// normal jobs waited (see pick). Only run touches it.
	highRun int
	cancel  context.CancelFunc
	done    chan struct{}
	started time.Time
	// reconsume asks run to consume afresh: the server's JetStream was
	// restarted (see WriterConfig.CheckQueue), or the consumer is gone.
	reconsume chan struct{}
	// stopPump and pumped stop the pump and wait for it. Only run (and
	// Start) touch them.
	stopPump context.CancelFunc
	pumped   chan struct{}
	// swept is closed once the start-up sweep of decided jobs is over
	// (sweepDecided): Queued waits for it a little.
	swept chan struct{}
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
	// up to the floor (see purge). purged is the floor of the last purge;
	// blocked says the last try found an older job undecided, and purged
	// nothing. purgeTimer (nil when stopped) runs while a purge is owed.
	// Only run touches them.
	purged     uint64
	blocked    bool
	failures   int // purges failed in a row: each waits longer (purgeRetry)
	lastPurge  time.Time
	purgeTimer *time.Timer
	// queueOps is held (read) by the writer's JetStream API requests
	// (purges, stream and consumer info, reading queued messages,
	// recreating consumers) and (write) by whatever restarts JetStream:
	// nats-server races with API requests that arrive while it starts
	// JetStream. It is WriterConfig.QueueOps, or one of the writer's own.
	queueOps *sync.RWMutex
	// floor is the sequence up to which every job of the store's own
	// stream is decided: purge removes them. Queued and scan read it.
	floor atomic.Uint64
	// decided are the sequences of the store's own stream decided and not
	// yet purged, with their sizes, which decidedBytes sums; purgeGen
	// counts purge requests begun and ended (see purgeBegins), so that
	// Queued counts a job once; purgedTo is the last purge's floor.
	// purging guards them, and is never held across a request.
	purging      sync.Mutex
	decided      map[uint64]int
	decidedBytes int64
	purgeGen     uint64
	purgedTo     uint64
	// lost says a message came with a later delivery sequence than its
	// class's next: deliveries were lost in transit. Only run touches it
	// (see take).
	lost bool

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
	cls *class // its class of the store's own stream; nil: a former path's
}

// isExec reports whether the item is an exec job, which runs alone.
func (it item) isExec() bool { return it.e.Err == nil && it.e.Job.IsExec() }

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
	w := &Writer{cfg: cfg, store: real, storeID: queue.StoreID(real), log: cfg.Logger, started: time.Now(), cautious: cautiousJobs, decided: map[uint64]int{},
		queueOps: cfg.QueueOps}
	if w.queueOps == nil {
		w.queueOps = new(sync.RWMutex)
	}
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
	w.normal = newClass(false, queue.JobsSubject(w.storeID), queue.ConsumerName, cfg.BatchSize)
	if queue.HasHighSubject(w.stream.CachedInfo().Config, w.storeID) {
		w.high = newClass(true, queue.HighJobsSubject(w.storeID), queue.HighConsumerName, cfg.BatchSize)
	} else {
		w.log.Warn("the queue's stream has no subject for high-priority jobs: they are decided first only among the jobs taken (nats stream edit adds it)",
			"stream", queue.StreamName(w.storeID), "subject", queue.HighJobsSubject(w.storeID))
	}
	for _, name := range []string{queue.ConsumerName, queue.HighConsumerName} {
		if err := w.stream.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("reset consumer: %w", err)
		}
	}
	return w, nil
}

// Start begins consuming: first the streams of the store's former paths,
// if any (WriterConfig.OwnServer), then its own. Close stops it.
func (w *Writer) Start(ctx context.Context) error {
	w.swept = make(chan struct{}) // before the status service reads it
	for _, c := range w.classes() {
		if err := c.consumeFromStart(ctx, w.stream); err != nil {
			return fmt.Errorf("create consumer: %w", err)
		}
	}
	w.finishInterrupted()
	w.mu.Lock()
	w.lastDone = time.Now()
	w.mu.Unlock()
	var err error
	if w.svc, err = w.serveStatus(); err != nil {
		return err
	}
	w.cancels = make(chan cancelRequest, maxCancelsWaiting)
	if w.cancelSub, err = w.serveCancel(); err != nil {
		_ = w.svc.Stop()
		return fmt.Errorf("serve cancel requests: %w", err)
	}
	w.reconsume = make(chan struct{}, 1)
	ctx, w.cancel = context.WithCancel(context.Background())
	w.done = make(chan struct{})
	w.startPump(ctx)
	watched := make(chan struct{})
	go w.watch(ctx, watched)
	go func() {
		defer close(w.swept)
		w.sweepDecided(ctx)
	}()
	go func() {
		defer close(w.done)
		w.run(ctx)
		_ = w.svc.Stop()
		_ = w.cancelSub.Unsubscribe()
		w.refuseCancels()
		w.stopPump()
		<-w.pumped
		<-watched
		<-w.swept
	}()
	return nil
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
	if merr := w.moved(); merr != nil {
		w.log.Warn("stopping with jobs still queued in a store that moved; they apply when a daemon serves it at its new path", "jobs", n, "err", err, "moved", merr)
		return nil
	}
	w.log.Warn("stopping with jobs still queued; they apply when a daemon serves the store again", "jobs", n, "err", err)
	return queue.MarkStranded(w.store, fmt.Sprintf("daemon pid %d stopped with %d jobs queued", os.Getpid(), n))
}

// moved is WriterConfig.Moved's answer: nil without it.
func (w *Writer) moved() error {
	if w.cfg.Moved == nil {
		return nil
	}
	return w.cfg.Moved()
}

// liftStranded removes the stranded marker once the queue, former
// streams included, is seen empty: nothing is left for direct writes to
// overtake.
func (w *Writer) liftStranded(ctx context.Context) {
	if n, err := w.Queued(ctx); err != nil || n > 0 {
		return
	}
	if w.stopIfMoved() != nil {
		return // the marker at the path is another store's
	}
	if err := queue.LiftStranded(w.store); err != nil {
		w.log.Warn("remove stranded marker", "err", err)
	}
}

func (w *Writer) run(ctx context.Context) {
	idle := time.NewTimer(w.cfg.IdleRelease)
	defer idle.Stop()
	defer w.release()
	w.awaitHigh(ctx)
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
		w.serveCancels(ctx)
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
			case m := <-w.normal.msgs:
				w.take(m)
			case m := <-w.high.deliveries():
				w.take(m)
			case r := <-w.cancels:
				w.handleCancel(ctx, r)
			}
			continue
		}
		w.setInHand(true)
		w.fill()
		var ok bool
		high := w.pick()
		if i := slices.IndexFunc(w.ahead, func(it item) bool { return it.high() == high }); w.ahead[i].isExec() {
			head := w.ahead[i]
			w.purge(ctx, true) // the run may take long
			w.ahead = slices.Delete(w.ahead, i, i+1)
			ok = w.processExec(ctx, head)
		} else {
			w.linger()
			ok = w.process(ctx, w.takeBatch(high))
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
	c := w.classOf(m)
	if c != nil {
		md, _ := m.Metadata() // classOf read it
		d := md.Sequence.Consumer
		if d > c.nextDelivery {
			w.log.Warn("deliveries were lost on the way from the queue; consuming afresh from the oldest undecided job",
				"delivery", d, "expected", c.nextDelivery, "seq", md.Sequence.Stream, "subject", c.subject)
			w.lost = true
			return
		}
		c.nextDelivery = d + 1 // lower after a consumer leader change: redeliveries
		c.lastTaken, c.pending = md.Sequence.Stream, md.NumPending
	}
	now := time.Now()
	if d := now.Sub(w.lastTaken); d < 10*maxLingerGap { // longer: a lull, not a pace
		w.pace += (d - w.pace) / 8
	}
	w.lastTaken = now
	w.taken++
	w.ahead = append(w.ahead, item{m: m, e: w.entry(m), n: w.taken, cls: c})
}

// fill takes the messages delivered: high ones until ahead holds a
// batch's worth of them, however many normal ones it holds, then normal
// ones until it holds a batch's worth in all, and at least one, so that
// pick sees that normal jobs wait (else a flood of high ones would starve
// them). It waits for no delivery, except, through next, for one of a
// class with none in hand while its queue holds more.
func (w *Writer) fill() {
	high, normal := 0, 0
	for _, it := range w.ahead {
		if it.high() {
			high++
		} else {
			normal++
		}
	}
	for ; high < w.cfg.BatchSize && !w.lost; high++ {
		m, ok := delivered(w.high.deliveries())
		if !ok && high == 0 {
			m, ok = w.next(w.high)
		}
		if !ok {
			break
		}
		w.take(m)
	}
	for (len(w.ahead) < w.cfg.BatchSize || normal == 0) && !w.lost {
		m, ok := delivered(w.normal.msgs)
		if !ok && normal == 0 {
			m, ok = w.next(w.normal)
		}
		if !ok {
			return
		}
		n := len(w.ahead)
		w.take(m)
		if len(w.ahead) > n && !w.ahead[n].high() {
			normal++
		}
	}
}

// delivered is the next message of ch, without waiting; false if none.
func delivered(ch <-chan jetstream.Msg) (jetstream.Msg, bool) {
	select {
	case m := <-ch:
		return m, true
	default:
		return nil, false
	}
}

// maxBatchBytes bounds the jobs' bytes in one batch (at least one job):
// the batch's new file contents are held in memory and in its intent.
const maxBatchBytes = 64 << 20

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
		case m := <-w.normal.msgs:
			w.take(m)
		case m := <-w.high.deliveries():
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

// maybePrune prunes the journal now and then, keeping every outcome the
// queue could still redeliver: those at or after the stream's first
// remaining sequence.
func (w *Writer) maybePrune(ctx context.Context) {
	if time.Since(w.lastPrune) < journal.PruneEvery || w.session == nil {
		return
	}
	w.lastPrune = time.Now()
	w.queueOps.RLock()
	info, err := w.stream.Info(ctx)
	w.queueOps.RUnlock()
	if err != nil {
		return
	}
	floor := info.State.LastSeq
	if info.State.Msgs > 0 {
		floor = info.State.FirstSeq - 1
	}
	w.session.MaybePrune(floor)
}

// stopFor records why the writer stops on its own (its claim lost, its
// store moved).
func (w *Writer) stopFor(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopErr == nil {
		w.stopErr = err
	}
}

// Done is closed once the writer has stopped: by Close, or on its own
// when its claim on the store was lost or its store moved (Err).
func (w *Writer) Done() <-chan struct{} { return w.done }

// Err is why the writer stopped on its own: its claim on the store lost
// to another daemon (claim.ErrLost, journal.ErrFenced), or its store no
// longer at its path (WriterConfig.Moved); nil otherwise.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopErr
}
