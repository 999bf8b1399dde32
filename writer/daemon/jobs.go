package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/internal/fault"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// locateTimeout bounds one search of the queue (a locate or jobs
// request): the status service answers one request at a time. It starts
// once the journal has been read, which on a loaded machine can take a
// second of its own for big outcomes, so that the search still gets it.
const locateTimeout = time.Second

// scanLimit is queue.LocateScanLimit, lowered by tests.
var scanLimit = queue.LocateScanLimit

// handJob is a job of the batch, or exec run, that run has in hand.
type handJob struct {
	id  string
	seq uint64
	own bool // of the store's own stream
}

// noteHand records the jobs of the batch run has in hand, for Locate:
// acquire is given every batch before it is applied (exec runs included),
// and setInHand(false) forgets them.
func (w *Writer) noteHand(batch []jetstream.Msg) {
	hand := make([]handJob, 0, len(batch))
	for _, m := range batch {
		j := handJob{id: msgJobID(m.Headers(), m.Data()), own: w.classOf(m) != nil}
		if md, err := m.Metadata(); err == nil {
			j.seq = md.Sequence.Stream
		}
		hand = append(hand, j)
	}
	w.mu.Lock()
	w.hand = hand
	w.mu.Unlock()
}

// msgJobID is the job ID of a queued message: its Nats-Msg-Id, else the
// ID in its body (not every client sets the header), "" if it has none
// or several Nats-Msg-Id (queue.MsgID).
func msgJobID(h nats.Header, data []byte) string {
	id, one := queue.MsgID(h)
	if !one {
		return ""
	}
	if id != "" {
		return id
	}
	var j struct {
		ID string `json:"id"`
	}
	_ = jobHead(data, &j) // a message without a readable ID is found by no one
	return j.ID
}

// handState says whether job id is in the writer's hand and what the writer
// does with it. waiting is true while the writer has it but waits for the
// store lock: the job is then as good as queued.
func (w *Writer) handState(id string) (in, waiting bool, detail string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.running; r != nil {
		for i, job := range r.plan.Jobs() {
			if job != id {
				continue
			}
			if i == 0 {
				return true, false, "its command runs: " + r.String()
			}
			return true, false, fmt.Sprintf("it joined the run of job %s, whose command runs: %s", r.plan.Job().ID, r.String())
		}
	}
	if !slices.ContainsFunc(w.hand, func(j handJob) bool { return j.id == id }) {
		return false, false, ""
	}
	switch {
	case w.deferred != "":
		return true, false, "deferred: " + w.deferred
	case w.session == nil && w.waiting != "":
		return true, true, "the writer has it in hand but waits for the store: " + w.waiting
	case w.fault != "":
		return true, false, "being applied; the writer retries after an I/O fault: " + w.fault
	}
	return true, false, "being applied"
}

// inFlight is how many jobs the writer has in hand. w.mu must be held.
func (w *Writer) inFlight() int {
	n := len(w.hand)
	if w.running != nil {
		n = max(n, len(w.running.plan.Jobs()))
	}
	return n
}

// statusAnswer answers a status request whose body is not empty or
// DeadLettersRequest: a locate, a jobs listing, or a plain look-up.
func (w *Writer) statusAnswer(body string) any {
	ctx := context.Background() // Locate and Jobs bound their searches
	switch {
	case strings.HasPrefix(body, queue.LocateRequest):
		return w.Locate(ctx, strings.TrimPrefix(body, queue.LocateRequest))
	case body == queue.JobsRequest, strings.HasPrefix(body, queue.JobsRequest+" "):
		var q queue.JobsQuery
		if arg := strings.TrimSpace(strings.TrimPrefix(body, queue.JobsRequest)); arg != "" {
			if err := json.Unmarshal([]byte(arg), &q); err != nil {
				return queue.JobList{Error: fmt.Sprintf("jobs query: %v", err)}
			}
		}
		return w.Jobs(ctx, q)
	}
	return w.Lookup(body)
}

// Locate looks job id up in the journal and, when it has no outcome
// there, in the writer's hand and in the queue: its answer tells queued
// (with the job's position), in hand and unknown apart. Searching the
// queue reads it from the oldest job, at most queue.LocateScanLimit jobs
// and until ctx ends or locateTimeout has passed; a job not met by then
// is unknown, and the answer's Detail says how far the search went.
func (w *Writer) Locate(ctx context.Context, id string) queue.Lookup {
	if p := queue.IDProblem(id); p != "" {
		return queue.Lookup{State: queue.StateUnknown, Detail: p}
	}
	l := w.Lookup(id)
	if l.Found {
		return l
	}
	// The hand first, then the queue: a job leaves the hand only after
	// it is recorded and acked, so it cannot slip between the two.
	in, waiting, detail := w.handState(id)
	ctx, cancel := context.WithTimeout(ctx, locateTimeout)
	defer cancel()
	var pos uint64
	var ahead []queuedMsg
	scanned, complete, err := w.scan(ctx, scanLimit, func(m queuedMsg) bool {
		if m.id != id {
			m.data = nil // only its ID is needed
			ahead = append(ahead, m)
			return true
		}
		pos = m.pos
		return false
	})
	if pos > 0 {
		if left, err := w.undecided(ahead); err == nil {
			pos = uint64(len(left)) + 1
		}
	}
	total, _ := w.Queued(ctx)
	if in || pos > 0 {
		found := queue.Lookup{State: queue.StateQueued, Position: pos, Queued: max(total, pos), Detail: detail, PrunedBefore: l.PrunedBefore}
		if in && !waiting {
			found.State = queue.StateInHand
		}
		return found
	}
	// Not in the queue: it may have been decided meanwhile (a job is
	// acked only once the journal has its outcome), or never queued.
	if again := w.Lookup(id); again.Found || again.Error != "" {
		return again
	}
	l.State = queue.StateUnknown
	if !complete && err == nil && uint64(scanned) >= total {
		complete = true // stopped at the bound, having read every job
	}
	switch {
	case err != nil:
		l.Detail = fmt.Sprintf("no outcome recorded; the queue could not be searched: %v", err)
	case !complete:
		l.Detail = fmt.Sprintf("no outcome recorded, and not among the %d oldest of %d queued jobs (the search stops there)", scanned, total)
	case scanned == 0:
		l.Detail = "no outcome recorded, and nothing is queued"
	default:
		l.Detail = fmt.Sprintf("no outcome recorded, and not among the %d queued jobs", scanned)
	}
	return l
}

// Jobs lists recorded outcomes, newest first, and queued jobs, oldest
// first, as q selects: the answer to a JobsRequest. Listing queued jobs
// reads the queue as Locate does.
func (w *Writer) Jobs(ctx context.Context, q queue.JobsQuery) queue.JobList {
	list := queue.JobList{Outcomes: []*queue.Outcome{}, Queued: []queue.QueuedJob{}}
	if err := q.Normalize(); err != nil {
		list.Error = err.Error()
		return list
	}
	var errs []string
	if q.State != queue.StateQueued {
		err := w.withJournal(func(j *journal.Journal) error {
			if j == nil {
				return nil
			}
			outs, err := j.Recent(journal.OutcomeFilter{Status: queue.Status(q.State), Since: q.Since, Limit: q.Limit})
			list.Outcomes = append(list.Outcomes, outs...)
			return err
		})
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	if q.State == "" || q.State == queue.StateQueued {
		ctx, cancel := context.WithTimeout(ctx, locateTimeout)
		defer cancel()
		msgs, err := w.scanUndecided(ctx, min(q.Limit, scanLimit))
		if err != nil {
			errs = append(errs, err.Error())
		}
		for _, m := range msgs {
			j := describeQueued(m)
			if in, waiting, detail := w.handState(m.id); in {
				j.Detail = detail
				if !waiting {
					j.State = queue.StateInHand
				}
			}
			list.Queued = append(list.Queued, j)
		}
		if list.QueuedTotal, err = w.Queued(ctx); err != nil {
			errs = append(errs, err.Error())
		}
		list.QueuedTotal = max(list.QueuedTotal, uint64(len(list.Queued)))
	}
	list.Error = strings.Join(errs, "; ")
	return list
}

// scanUndecided reads up to limit queued messages, as scan does, less
// those whose jobs the journal has outcomes for (undecided): the sweep at
// start marks those it reaches, this the rest of a longer queue.
func (w *Writer) scanUndecided(ctx context.Context, limit int) ([]queuedMsg, error) {
	var msgs []queuedMsg
	if _, _, err := w.scan(ctx, limit, func(m queuedMsg) bool {
		msgs = append(msgs, m)
		return true
	}); err != nil {
		return msgs, fmt.Errorf("read the queue: %w", err)
	}
	left, err := w.undecided(msgs)
	return left, err
}

// sweepDecided marks decided, once at start, the jobs of the queue the
// journal has outcomes for (undecided): after a crash the queue still
// holds jobs decided before it and not yet purged, which the writer meets
// again only in their turn. Until then Queued, and with it the status
// report, the metrics and Close's stranded marker, would count them as
// queued. It reads as far as a search does (scanLimit), only IDs kept.
func (w *Writer) sweepDecided(ctx context.Context) {
	fault.Pause("sweep")
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !w.mayHoldDecided(ctx) {
		return
	}
	var msgs []queuedMsg
	_, _, err := w.scan(ctx, scanLimit, func(m queuedMsg) bool {
		if m.own {
			m.data = nil
			msgs = append(msgs, m)
		}
		return true
	})
	if err != nil {
		w.log.Debug("sweep the queue for decided jobs", "err", err)
	}
	for len(msgs) > 0 && ctx.Err() == nil {
		n := min(len(msgs), 512) // the journal is shared with the writer: a chunk at a time
		if _, err := w.undecided(msgs[:n]); err != nil {
			w.log.Debug("sweep the queue for decided jobs", "err", err)
			return
		}
		msgs = msgs[n:]
	}
}

// mayHoldDecided reports whether the store's own stream may hold jobs the
// journal has decided: not if its oldest job comes after the last one
// the journal decided, as after a clean stop, which purges them.
func (w *Writer) mayHoldDecided(ctx context.Context) bool {
	w.queueOps.RLock()
	info, err := w.stream.Info(ctx)
	w.queueOps.RUnlock()
	if err != nil {
		return true
	}
	var last uint64
	err = w.withJournal(func(j *journal.Journal) error {
		if j == nil {
			return nil
		}
		_, last, err = j.Meta()
		return err
	})
	return err != nil || info.State.FirstSeq <= last
}

// undecided returns msgs less the jobs the journal has outcomes for,
// their positions renumbered. After a restart
// the queue still holds the jobs decided before it, until the writer
// meets them again or a purge removes them: they are not queued. Those
// of the store's own stream are marked decided now (decide), so that
// Queued and scan leave them out too.
func (w *Writer) undecided(msgs []queuedMsg) ([]queuedMsg, error) {
	var done []bool
	err := w.withJournal(func(j *journal.Journal) error {
		if j == nil {
			return nil
		}
		done = make([]bool, len(msgs))
		for i, m := range msgs {
			if m.id == "" {
				continue
			}
			o, err := j.Outcome(m.id)
			if err != nil {
				return err
			}
			done[i] = o != nil
		}
		return nil
	})
	if err != nil || done == nil {
		return msgs, err
	}
	left := msgs[:0]
	for i, m := range msgs {
		if done[i] {
			if m.own {
				w.decide(m.seq, m.size)
			}
			continue
		}
		m.pos = uint64(len(left)) + 1
		left = append(left, m)
	}
	return left, nil
}

// describeQueued is a queued message as a JobList lists it.
func describeQueued(m queuedMsg) queue.QueuedJob {
	j := queue.QueuedJob{ID: m.id, Seq: m.seq, Position: m.pos, State: queue.StateQueued, Ops: []string{}}
	var body struct {
		Ops []struct {
			Op   string `json:"op"`
			Name string `json:"name"`
		} `json:"ops"`
		Submitted time.Time      `json:"submitted"`
		Priority  queue.Priority `json:"priority"`
	}
	if m.high {
		j.Priority = queue.PriorityHigh
	}
	if jobHead(m.data, &body) != nil {
		j.Detail = "not a valid job: it will be a dead letter, or rejected"
		return j
	}
	j.Submitted = body.Submitted
	if body.Priority == queue.PriorityHigh {
		j.Priority = queue.PriorityHigh
	}
	for _, op := range body.Ops {
		kind := op.Op
		if op.Op == string(queue.OpExec) && op.Name != "" {
			kind += " " + op.Name
		}
		j.Ops = append(j.Ops, kind)
	}
	return j
}

// jobHead decodes into v the JSON value a queued job starts with: all
// of a version 1 job, what comes before the raw data of a version 2 one.
func jobHead(data []byte, v any) error {
	return json.NewDecoder(bytes.NewReader(data)).Decode(v)
}

// queuedMsg is a message of the queue met by scan.
type queuedMsg struct {
	pos  uint64 // its place in the queue, from 1
	seq  uint64 // its stream sequence
	id   string // its job ID (msgJobID)
	data []byte
	size int  // len(data), kept where data is not
	high bool // of the high class's subject
	own  bool // of the store's own stream
}

// scan reads the queued messages in the order they will be applied: the
// jobs in hand, those of the store's former streams still to drain (see
// WriterConfig.OwnServer), then its own stream's, high jobs first, each
// class oldest first, one request each (a work-queue stream admits no
// other consumer of its subjects to read it with). That order is exact
// but for a batch of normal jobs that may go between high ones (see
// pick), and a job that joins an exec run. It calls fn
// on each until fn returns false, limit messages were read, or ctx ends;
// complete says it met every message. A ctx that ends is no error.
func (w *Writer) scan(ctx context.Context, limit int, fn func(queuedMsg) bool) (scanned int, complete bool, err error) {
	type source struct {
		stream  jetstream.Stream
		subject string
		from    uint64 // the first sequence that may be undecided
		high    bool
	}
	w.queueOps.RLock()
	defer w.queueOps.RUnlock()
	w.mu.Lock()
	hand := slices.Clone(w.hand)
	sources := make([]source, 0, len(w.former)+2)
	for _, f := range w.former {
		sources = append(sources, source{f.stream, ">", 1, false})
	}
	w.mu.Unlock()
	for _, c := range w.classes() { // high first: the order they are decided in
		sources = append(sources, source{w.stream, c.subject, w.floor.Load() + 1, c.high})
	}
	// The jobs in hand come first, whatever their class. (A former
	// stream's come first in its sweep.)
	inHand := map[uint64]bool{}
	for _, h := range hand {
		if !h.own {
			continue
		}
		if scanned >= limit {
			return scanned, false, nil
		}
		m, err := w.stream.GetMsg(ctx, h.seq)
		if err != nil {
			continue // decided and purged meanwhile; or an error the sweeps meet too
		}
		inHand[h.seq] = true
		scanned++
		high := w.high != nil && m.Subject == w.high.subject
		if !fn(queuedMsg{pos: uint64(scanned), seq: m.Sequence, id: msgJobID(m.Header, m.Data), data: m.Data, size: len(m.Data), high: high, own: true}) {
			return scanned, true, nil
		}
	}
	for _, s := range sources {
		for seq := s.from; ; {
			if scanned >= limit {
				return scanned, false, nil
			}
			m, err := s.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(s.subject))
			if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
				break // the end of this stream; or a former one, drained and deleted meanwhile
			}
			if err != nil {
				if ctx.Err() != nil {
					return scanned, false, nil
				}
				return scanned, false, err
			}
			if s.stream == w.stream && (inHand[m.Sequence] || w.isDecided(m.Sequence)) {
				seq = m.Sequence + 1
				continue
			}
			scanned++
			if !fn(queuedMsg{pos: uint64(scanned), seq: m.Sequence, id: msgJobID(m.Header, m.Data), data: m.Data, size: len(m.Data), high: s.high, own: s.stream == w.stream}) {
				return scanned, true, nil
			}
			seq = m.Sequence + 1
		}
	}
	return scanned, true, nil
}

// isDecided reports whether the job at seq of the store's own stream is
// decided, and waits only to be purged.
func (w *Writer) isDecided(seq uint64) bool {
	w.purging.Lock()
	defer w.purging.Unlock()
	_, ok := w.decided[seq]
	return ok
}

// fillReport adds to a status report what the store's lock file and
// journal say: who holds the lock (as the kernel tells it: see
// ProbeLock), the journal's numbers, its dead letters and any interrupted
// batch.
func (w *Writer) fillReport(r *queue.StatusReport) {
	w.mu.Lock()
	r.InFlight = w.inFlight()
	w.mu.Unlock()
	r.LockFile = lockPathOf(w.store, w.cfg.LockPath)
	if held, _, h := lock.ProbeLock(r.LockFile); held {
		r.Holder = h
	}
	err := w.withJournal(func(j *journal.Journal) error {
		if j == nil {
			r.Journal = &queue.JournalInfo{Path: journal.Path(w.store)}
			return nil
		}
		info, err := j.Info()
		if err != nil {
			return err
		}
		r.Journal = &info
		if _, total, err := j.DeadLetters(0); err == nil {
			r.Dead = uint64(total)
		}
		r.Interrupted, err = j.Interrupted()
		return err
	})
	if err != nil {
		r.Journal = &queue.JournalInfo{Path: journal.Path(w.store), Error: err.Error()}
	}
}
