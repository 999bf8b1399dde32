package client_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/embednats"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// journalFake plays the daemon's writer and status service on an embedded
// server: it keeps the first outcome of each ID with its job's digest, and
// answers a later job with that ID and another digest with an id_conflict
// notice that it does not record.
type journalFake struct {
	nc      *nats.Conn
	storeID string

	mu       sync.Mutex
	outcomes map[string]*queue.Outcome
	subjects map[string]string // the subject each job ID came on
	seq      uint64
}

// startFake starts a server on a new store, with the fake writer.
func startFake(t *testing.T) (*journalFake, string) {
	t.Helper()
	return startFakeOn(t, false)
}

// startFakeOn is startFake, with the store's stream made as an older
// version made it if older: with the normal jobs subject alone.
func startFakeOn(t *testing.T, older bool) (*journalFake, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	require.NoError(t, os.Mkdir(dir, 0o755))
	ctx := t.Context()
	lk, err := discovery.Take(ctx, dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Close() })
	srv, err := embednats.Start(ctx, lk, embednats.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	f := &journalFake{nc: srv.Conn(), storeID: srv.Discovery().StoreID, outcomes: map[string]*queue.Outcome{}, subjects: map[string]string{}}
	js, err := jetstream.New(f.nc)
	require.NoError(t, err)
	cfg := queue.StreamConfig(f.storeID, queue.Limits{})
	if older {
		cfg.Subjects = []string{queue.JobsSubject(f.storeID)}
	}
	stream, err := js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	cons, err := stream.CreateOrUpdateConsumer(ctx, queue.ConsumerConfig(queue.ConsumerName, ""))
	require.NoError(t, err)
	cc, err := cons.Consume(f.apply)
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
	_, err = f.nc.Subscribe(queue.StatusSubject(f.storeID), func(m *nats.Msg) {
		f.mu.Lock()
		o := f.outcomes[string(m.Data)]
		f.mu.Unlock()
		b, _ := json.Marshal(queue.Lookup{Found: o != nil, Outcome: o})
		_ = m.Respond(b)
	})
	require.NoError(t, err)
	d := srv.Discovery()
	require.NoError(t, lk.Announce(&d))
	return f, dir
}

func (f *journalFake) apply(m jetstream.Msg) {
	defer func() { _ = m.Ack() }()
	job, err := queue.Decode(m.Data())
	if err != nil {
		return
	}
	digest := job.Digest()
	f.mu.Lock()
	f.seq++
	f.subjects[job.ID] = m.Subject()
	if job.Meta["front-run"] != "" && f.outcomes[job.ID] == nil {
		// Another submitter saw this ID queued and had a job of its own
		// applied under it first.
		theirs := &queue.Outcome{V: queue.Version, ID: job.ID, Status: queue.StatusApplied, Epoch: 1, Seq: f.seq, Mode: "daemon",
			At: time.Now().UTC(), Digest: "sha256:" + strings.Repeat("f", 64)}
		f.outcomes[job.ID] = theirs
		f.publish(theirs)
	}
	o := f.outcomes[job.ID]
	switch {
	case o == nil:
		o = &queue.Outcome{V: queue.Version, ID: job.ID, Status: queue.StatusApplied, Epoch: 1, Seq: f.seq, Mode: "daemon", At: time.Now().UTC(), Digest: digest}
		f.outcomes[job.ID] = o
	case o.Digest != digest:
		rej := o.Conflict(digest)
		o = &queue.Outcome{V: queue.Version, ID: job.ID, Status: queue.StatusRejected, Reason: rej.Reason, Detail: rej.Detail, Epoch: 1, Seq: f.seq, Mode: "daemon", At: time.Now().UTC(), Digest: digest}
	}
	f.mu.Unlock()
	if strings.HasPrefix(job.ID, "noise-") {
		// Someone else's conflict notice for this ID arrives first.
		f.publish(&queue.Outcome{V: queue.Version, ID: job.ID, Status: queue.StatusRejected, Reason: queue.ReasonIDConflict,
			Detail: "not yours", Mode: "daemon", At: time.Now().UTC(), Digest: "sha256:" + strings.Repeat("0", 64)})
	}
	f.publish(o)
}

func (f *journalFake) publish(o *queue.Outcome) {
	b, err := queue.EncodeOutcome(o)
	if err == nil {
		_ = f.nc.Publish(queue.OutcomeSubject(f.storeID, o.ID), b)
	}
}

// record puts an outcome in the journal without the queue, as one that
// left JetStream's dedupe window long ago.
func (f *journalFake) record(job *queue.Job) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outcomes[job.ID] = &queue.Outcome{V: queue.Version, ID: job.ID, Status: queue.StatusApplied, Epoch: 1, Mode: "daemon", At: time.Now().UTC(), Digest: job.Digest()}
}

func appendJob(id, data string) *queue.Job {
	return &queue.Job{ID: id, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "f.txt", Data: []byte(data)}}}
}

// Promise 10 on the client's side: an ID reused for a different job is an
// id_conflict rejection, whether Apply or Submit, whether JetStream still
// holds the first job (a duplicate publish) or only the journal knows it;
// the same job again is a retry; a conflict notice for someone else's job
// is not taken for ours.
func TestIDConflictSeenByClient(t *testing.T) {
	f, store := startFake(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cl, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	defer cl.Close()

	isConflict := func(t *testing.T, o *queue.Outcome, job *queue.Job) {
		t.Helper()
		assert.Equal(t, job.ID, o.ID)
		assert.Equal(t, queue.StatusRejected, o.Status)
		assert.Equal(t, queue.ReasonIDConflict, o.Reason, o.Detail)
		assert.Equal(t, job.Digest(), o.Digest, "the caller's digest")
		assert.Contains(t, o.Detail, "already used by a different job")
	}
	isConflictErr := func(t *testing.T, err error) {
		t.Helper()
		require.Error(t, err)
		assert.ErrorIs(t, err, client.ErrRejected)
		var rej *queue.RejectError
		require.ErrorAs(t, err, &rej)
		assert.Equal(t, queue.ReasonIDConflict, rej.Reason, rej.Detail)
	}

	a := appendJob("nightly-1", "a\n")
	out, err := cl.Apply(ctx, a)
	require.NoError(t, err)
	require.True(t, out.Applied(), "%+v", out)
	assert.Equal(t, a.Digest(), out.Digest)

	t.Run("Apply, the first job still in the dedupe window", func(t *testing.T) {
		b := appendJob("nightly-1", "b\n")
		out, err := cl.Apply(ctx, b)
		require.NoError(t, err)
		isConflict(t, out, b)
	})
	t.Run("Apply, the same job again", func(t *testing.T) {
		out, err := cl.Apply(ctx, appendJob("nightly-1", "a\n"))
		require.NoError(t, err)
		assert.True(t, out.Applied(), "%+v", out)
	})
	t.Run("Submit, the first job still in the dedupe window", func(t *testing.T) {
		isConflictErr(t, cl.Submit(ctx, appendJob("nightly-1", "b\n")))
	})
	t.Run("Submit, the same job again", func(t *testing.T) {
		assert.NoError(t, cl.Submit(ctx, appendJob("nightly-1", "a\n")))
	})

	old := appendJob("weekly-1", "old\n")
	f.record(old)
	t.Run("Submit, only the journal knows the ID", func(t *testing.T) {
		isConflictErr(t, cl.Submit(ctx, appendJob("weekly-1", "new\n")))
	})
	t.Run("Apply, only the journal knows the ID", func(t *testing.T) {
		c := appendJob("weekly-1", "newer\n")
		out, err := cl.Apply(ctx, c)
		require.NoError(t, err)
		isConflict(t, out, c)
	})
	t.Run("Submit, the same job again, only the journal knows it", func(t *testing.T) {
		assert.NoError(t, cl.Submit(ctx, appendJob("weekly-1", "old\n")))
	})

	t.Run("someone else's conflict notice is not ours", func(t *testing.T) {
		n := appendJob("noise-1", "n\n")
		out, err := cl.Apply(ctx, n)
		require.NoError(t, err)
		assert.True(t, out.Applied(), "%+v", out)
		assert.Equal(t, n.Digest(), out.Digest)
	})
	t.Run("Apply, a job changed after an Apply gave it an ID", func(t *testing.T) {
		// The ID is the caller's now: the changed job is another one.
		j := appendJob("", "first\n")
		out, err := cl.Apply(ctx, j)
		require.NoError(t, err)
		require.True(t, out.Applied(), "%+v", out)
		assert.Equal(t, j.Digest(), out.Digest, "the writer's outcome has its digest")
		j.Ops[0].Data = []byte("second\n")
		out, err = cl.Apply(ctx, j)
		require.NoError(t, err)
		isConflict(t, out, j)
	})
	t.Run("Apply, an ID the client made, taken first by another job", func(t *testing.T) {
		j := appendJob("", "mine\n")
		j.Meta = map[string]string{"front-run": "1"}
		out, err := cl.Apply(ctx, j)
		require.NoError(t, err)
		isConflict(t, out, j)
	})
	t.Run("a queued job is not mistaken for a conflict", func(t *testing.T) {
		// No ID from the caller, no look-up: a plain Submit.
		j := appendJob("", "fresh\n")
		require.NoError(t, cl.Submit(ctx, j))
		assert.NotEmpty(t, j.ID)
	})
}

// A high job is queued on the high subject; on a stream of an older
// version, without that subject, on the normal one, and applied all the
// same.
func TestHighJobSubject(t *testing.T) {
	for _, tt := range []struct {
		name  string
		older bool
	}{{"current stream", false}, {"older stream", true}} {
		t.Run(tt.name, func(t *testing.T) {
			f, store := startFakeOn(t, tt.older)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cl, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire))
			require.NoError(t, err)
			defer cl.Close()
			for _, p := range []queue.Priority{queue.PriorityHigh, queue.PriorityNormal} {
				job := appendJob("j-"+p.String(), "x\n")
				job.Priority = p
				o, err := cl.Apply(ctx, job)
				require.NoError(t, err)
				assert.Equal(t, queue.StatusApplied, o.Status)
				want := queue.SubjectFor(f.storeID, p)
				if tt.older {
					want = queue.JobsSubject(f.storeID)
				}
				f.mu.Lock()
				assert.Equal(t, want, f.subjects[job.ID], p.String())
				f.mu.Unlock()
			}
		})
	}
}
