package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer/journal"
)

// Timeouts and pauses of Locate, Wait and Jobs.
const (
	// locateTimeout bounds one locate or jobs request: the daemon
	// searches its queue for about a second at most.
	locateTimeout = 5 * time.Second
	// waitPoll is how often Wait reads the journal while no daemon
	// serves the store.
	waitPoll = 250 * time.Millisecond
	// waitFindEvery is how often, while it reads the journal, Wait looks
	// for a daemon that started meanwhile, which keeps the journal open
	// while it works.
	waitFindEvery = 2 * time.Second
)

// ErrNotDecided is what Wait's error matches when ctx ended before the
// job's outcome was known: the job may be queued, in hand, or unknown
// (ask Locate), and may still be applied.
var ErrNotDecided = errors.New("outcome not known yet")

// Locate is Status with the job searched for in the queue too: the
// answer's State tells a job that is queued (its Position of Queued), in
// the writer's hand, or unknown apart, which Status cannot. The daemon
// reads its queue from the oldest job, at most queue.LocateScanLimit jobs;
// a job further back is unknown, its Detail saying so. Without a daemon
// nothing can read the queue: a job without an outcome is unknown.
func (c *Client) Locate(ctx context.Context, id string) (*queue.Lookup, error) {
	if p := queue.IDProblem(id); p != "" {
		return nil, queue.Reject(queue.ReasonBadInput, "%s", p)
	}
	return c.r.locate(ctx, id)
}

// Wait waits until the job's outcome is recorded and returns the look-up
// that found it (Found, with Outcome), applied or rejected. Through a
// daemon it listens for the outcome and asks the journal now and then (an
// outcome message is only a hint: anyone who may submit can publish
// there); when the daemon goes away it reads the journal itself, and
// goes back to a daemon that comes back. Without one, it reads the journal
// every 250 ms, and turns to a daemon that starts meanwhile.
//
// If ctx ends first, the error matches ErrNotDecided and ctx's error.
func (c *Client) Wait(ctx context.Context, id string) (*queue.Lookup, error) {
	if p := queue.IDProblem(id); p != "" {
		return nil, queue.Reject(queue.ReasonBadInput, "%s", p)
	}
	return c.r.waitFor(ctx, id)
}

// Jobs lists the journal's recorded outcomes, newest first, and the jobs
// queued, next first, as q selects. Without a daemon it reads the journal
// itself and lists no queued jobs (Queued is nil: nothing can read the
// queue); asking for queued jobs only (queue.StateQueued) is then
// ErrNoDaemon. A list whose Error is set is partial: the journal or the
// queue could not be read.
func (c *Client) Jobs(ctx context.Context, q queue.JobsQuery) (*queue.JobList, error) {
	if err := q.Normalize(); err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	return c.r.jobs(ctx, q)
}

// notDecided is Wait's error when ctx ended first.
func notDecided(ctx context.Context, id string) error {
	return fmt.Errorf("job %s: %w: %w", id, ErrNotDecided, ctx.Err())
}

func (q *queued) locate(ctx context.Context, id string) (*queue.Lookup, error) {
	ctx, cancel := context.WithTimeout(ctx, locateTimeout)
	defer cancel()
	var l queue.Lookup
	if err := q.request(ctx, []byte(queue.LocateRequest+id), &l); err != nil {
		if d := q.fromJournal(err); d != nil {
			return d.locate(ctx, id)
		}
		return nil, err
	}
	if l.Error != "" {
		return nil, fmt.Errorf("look up %s: %s", id, l.Error)
	}
	if l.State == "" {
		// A daemon that does not know locate requests took the body for
		// a job ID: ask plainly.
		return q.lookup(ctx, id)
	}
	return &l, nil
}

func (q *queued) jobs(ctx context.Context, jq queue.JobsQuery) (*queue.JobList, error) {
	body, err := json.Marshal(jq)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, locateTimeout)
	defer cancel()
	var list queue.JobList
	if err := q.request(ctx, []byte(queue.JobsRequest+" "+string(body)), &list); err != nil {
		if d := q.fromJournal(err); d != nil {
			return d.jobs(ctx, jq)
		}
		return nil, err
	}
	return &list, nil
}

func (q *queued) waitFor(ctx context.Context, id string) (*queue.Lookup, error) {
	nc, sub, err := q.subscribe(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return nil, notDecided(ctx, id)
		}
		return nil, fmt.Errorf("job %s: listen for its outcome: %w", id, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	subject := queue.OutcomeSubject(q.storeID, id)
	for down := 0; ; {
		if now, _ := q.conn(); now != nc { // redialled: listen on the new connection
			nc = now
			_ = sub.Unsubscribe()
			if sub, err = nc.SubscribeSync(subject); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				return nil, fmt.Errorf("job %s: listen for its outcome: %w", id, err)
			}
		}
		if !nc.IsConnected() {
			q.redial(ctx)
			if now, _ := q.conn(); now == nc {
				// No daemon to ask now: nobody but a direct writer has
				// the journal open, so read it, if the store is here.
				if q.store != "" {
					if l, err := (&direct{store: q.store}).lookup(ctx, id); err == nil && l.Found {
						return l, nil
					}
				}
				if q.isClosed() {
					return nil, fmt.Errorf("job %s: %w: %w", id, ErrNotDecided, nats.ErrConnectionClosed)
				}
				if q.gone(nc) {
					return nil, fmt.Errorf("job %s: %w: %w", id, ErrNotDecided, q.goneErr(nc))
				}
				if !queue.Sleep(ctx, queue.Backoff(down)) {
					return nil, notDecided(ctx, id)
				}
				down++
			}
			continue
		}
		down = 0
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		l, err := q.lookup(lctx, id)
		cancel()
		if err == nil && l.Found {
			return l, nil
		}
		// Sleep until an outcome message comes (any: only the journal's
		// answer counts), or outcomePoll passes, then ask again.
		wctx, cancel := context.WithTimeout(ctx, outcomePoll)
		_, err = sub.NextMsgWithContext(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, notDecided(ctx, id)
		case err == nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrBadSubscription),
			errors.Is(err, nats.ErrSlowConsumer):
		default:
			return nil, fmt.Errorf("job %s: listen for its outcome: %w", id, err)
		}
	}
}

func (d *direct) locate(ctx context.Context, id string) (*queue.Lookup, error) {
	l, err := d.lookup(ctx, id)
	if err != nil || l.Found {
		return l, err
	}
	l.State = queue.StateUnknown
	l.Detail = "no outcome recorded, and no daemon serves the store to search its queue"
	if st, err := queue.ReadStranded(d.store); err == nil && st != nil {
		l.Detail += fmt.Sprintf(" (jobs may be waiting in it: %s; start scribe serve to apply them)", st.Why)
	}
	return l, nil
}

func (d *direct) jobs(_ context.Context, q queue.JobsQuery) (*queue.JobList, error) {
	if q.State == queue.StateQueued {
		return nil, fmt.Errorf("%s: queued jobs can be listed only by the store's daemon: %w", d.store, ErrNoDaemon)
	}
	list := &queue.JobList{Outcomes: []*queue.Outcome{}}
	j, err := journal.OpenReadOnly(queue.Layout{Root: d.store}.Journal(), journalOpenTimeout)
	if errors.Is(err, fs.ErrNotExist) {
		return list, nil // nothing was ever applied to this store
	}
	if err != nil {
		return nil, err
	}
	defer j.Close()
	outs, err := j.Recent(journal.OutcomeFilter{Status: queue.Status(q.State), Since: q.Since, Limit: q.Limit})
	if err != nil {
		return nil, fmt.Errorf("list outcomes: %w", err)
	}
	list.Outcomes = append(list.Outcomes, outs...)
	return list, nil
}

func (d *direct) waitFor(ctx context.Context, id string) (*queue.Lookup, error) {
	var lastFind time.Time
	for {
		l, err := d.lookup(ctx, id)
		if err == nil && l.Found {
			return l, nil
		}
		if errors.Is(err, queue.ErrInsecure) {
			return nil, err // waiting changes nothing of it
		}
		// A daemon that started meanwhile keeps the journal open while
		// it works, and tells its outcomes at once: turn to it.
		if time.Since(lastFind) >= waitFindEvery {
			lastFind = time.Now()
			if found, ferr := discovery.Find(d.store); ferr == nil && found != nil {
				q, err := openQueued(ctx, d.store, queue.StoreID(d.store), options{connectTimeout: defaultConnectTimeout, log: d.log})
				if err == nil && q != nil {
					defer q.close()
					return q.waitFor(ctx, id)
				}
			}
		}
		if !queue.Sleep(ctx, waitPoll) {
			return nil, notDecided(ctx, id)
		}
	}
}
