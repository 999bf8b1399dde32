package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/claim"
	"github.com/scribehq/scribe/writer/daemon"
	"github.com/scribehq/scribe/writer/journal"
)

// startJetStream starts a single-node JetStream server without a listener
// and returns an in-process connection to it.
func startJetStream(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: t.TempDir(), DontListen: true, NoSigs: true, SyncAlways: true})
	require.NoError(t, err)
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.True(t, ns.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// writerStore makes a store folder and returns its real path and ID.
func writerStore(t *testing.T) (string, string) {
	t.Helper()
	store, err := queue.ResolveStore(t.TempDir())
	require.NoError(t, err)
	return store, queue.StoreID(store)
}

// startWriter starts a writer on store, closed when the test ends.
func startWriter(t *testing.T, store string, nc *nats.Conn, configure func(*daemon.WriterConfig)) *daemon.Writer {
	t.Helper()
	cfg := daemon.WriterConfig{Store: store, Conn: nc, Settings: daemon.Settings{IdleRelease: 50 * time.Millisecond}}
	if configure != nil {
		configure(&cfg)
	}
	w, err := daemon.NewWriter(t.Context(), cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { assert.NoError(t, w.Close()) })
	return w
}

// wireJob is the wire form of a one-append job.
func wireJob(t *testing.T, storeID, id, line string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"v": queue.Version, "id": id, "store": storeID,
		"ops": []queue.Op{{Kind: queue.OpAppend, Path: "log.txt", Data: []byte(line + "\n")}}})
	require.NoError(t, err)
	return b
}

// publishJob queues raw bytes on storeID's subject, with msgID as
// Nats-Msg-Id unless it is empty.
func publishJob(t *testing.T, js jetstream.JetStream, storeID, msgID string, body []byte) {
	t.Helper()
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	_, err := js.Publish(t.Context(), queue.JobsSubject(storeID), body, opts...)
	require.NoError(t, err)
}

// outcomeOf waits for the job's recorded outcome.
func outcomeOf(t *testing.T, w *daemon.Writer, id string) *queue.Outcome {
	t.Helper()
	var l queue.Lookup
	require.Eventually(t, func() bool { l = w.Lookup(id); return l.Found }, 10*time.Second, 10*time.Millisecond, "outcome of %s", id)
	return l.Outcome
}

// storeLog is the store's log.txt.
func storeLog(t *testing.T, store string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(store, "log.txt"))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	require.NoError(t, err)
	return string(b)
}

// A message whose Nats-Msg-Id and job ID disagree is recorded under
// neither: it becomes a dead letter. One without the header is accepted.
func TestWriterChecksMsgID(t *testing.T) {
	nc, js := startJetStream(t)
	store, sid := writerStore(t)
	w := startWriter(t, store, nc, nil)

	publishJob(t, js, sid, "a", wireJob(t, sid, "a", "a"))
	publishJob(t, js, sid, "header-id", wireJob(t, sid, "body-id", "mismatched"))
	publishJob(t, js, sid, "other-id", []byte(`{"id":"garbled-id", "v":`)) // an ID salvaged from a broken job
	publishJob(t, js, sid, "", wireJob(t, sid, "no-header", "no header"))
	publishJob(t, js, sid, "last", wireJob(t, sid, "last", "last"))

	assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, "last").Status)
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, "no-header").Status)
	assert.Equal(t, "a\nno header\nlast\n", storeLog(t, store))
	for _, id := range []string{"body-id", "header-id", "garbled-id", "other-id"} {
		assert.False(t, w.Lookup(id).Found, "no outcome under %s", id)
	}
	d, err := w.DeadLetters()
	require.NoError(t, err)
	require.Equal(t, 2, d.Total)
	for _, l := range d.Letters {
		assert.Equal(t, queue.ReasonBadInput, l.Reason)
		assert.Contains(t, l.Detail, "does not match job id")
	}
	assert.Contains(t, d.Letters[1].Detail, `Nats-Msg-Id "header-id" does not match job id "body-id"`, "oldest last")
}

// A writer on its own server drains the streams of the store's former IDs
// (a moved store) first, oldest first, in order, accepting their jobs'
// former store ID, then deletes them; only then its own stream.
func TestWriterDrainsFormerStreams(t *testing.T) {
	nc, js := startJetStream(t)
	store, sid := writerStore(t)
	const older, newer, stranger = "00000000000000a1", "00000000000000b2", "00000000000000c3"
	for _, id := range []string{older, newer, sid} {
		_, err := queue.CreateStream(t.Context(), js, id, queue.Limits{MaxBytes: 1 << 20})
		require.NoError(t, err)
	}
	publishJob(t, js, older, "o1", wireJob(t, older, "o1", "older 1"))
	publishJob(t, js, sid, "c1", wireJob(t, sid, "c1", "current 1"))
	publishJob(t, js, newer, "n1", wireJob(t, newer, "n1", "newer 1"))
	publishJob(t, js, older, "o2", wireJob(t, older, "o2", "older 2"))
	publishJob(t, js, newer, "x", wireJob(t, stranger, "x", "another store's")) // still refused
	publishJob(t, js, sid, "c2", wireJob(t, sid, "c2", "current 2"))
	// An empty former stream is simply deleted.
	_, err := queue.CreateStream(t.Context(), js, "00000000000000d4", queue.Limits{MaxBytes: 1 << 20})
	require.NoError(t, err)

	w := startWriter(t, store, nc, func(c *daemon.WriterConfig) { c.OwnServer = true })
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, "c2").Status)
	assert.Equal(t, "older 1\nolder 2\nnewer 1\ncurrent 1\ncurrent 2\n", storeLog(t, store))
	for _, id := range []string{"o1", "o2", "n1"} {
		assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, id).Status, id)
	}
	assert.Equal(t, queue.ReasonWrongStore, outcomeOf(t, w, "x").Reason)
	for _, id := range []string{older, newer, "00000000000000d4"} {
		require.Eventually(t, func() bool {
			_, err := js.Stream(t.Context(), queue.StreamName(id))
			return errors.Is(err, jetstream.ErrStreamNotFound)
		}, 10*time.Second, 10*time.Millisecond, "the drained stream %s is deleted", id)
	}
	n, err := w.Queued(t.Context())
	require.NoError(t, err)
	assert.Zero(t, n)
}

// Without OwnServer (a server stores share) other stores' streams are
// left alone.
func TestWriterLeavesOtherStreamsOnSharedServer(t *testing.T) {
	nc, js := startJetStream(t)
	store, sid := writerStore(t)
	const other = "00000000000000e5"
	_, err := queue.CreateStream(t.Context(), js, other, queue.Limits{MaxBytes: 1 << 20})
	require.NoError(t, err)
	publishJob(t, js, other, "o", wireJob(t, other, "o", "other store"))
	w := startWriter(t, store, nc, nil)
	publishJob(t, js, sid, "c", wireJob(t, sid, "c", "current"))
	outcomeOf(t, w, "c")
	assert.Equal(t, "current\n", storeLog(t, store))
	s, err := js.Stream(t.Context(), queue.StreamName(other))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), s.CachedInfo().State.Msgs)
	// The outcome is published after the ack, which JetStream applies
	// asynchronously: wait for the acked job to leave the count.
	require.Eventually(t, func() bool {
		n, err := w.Queued(t.Context())
		return err == nil && n == 0
	}, 10*time.Second, 10*time.Millisecond, "another store's jobs are not this store's queue")
}

// The fault Config.CheckQueue reports shows in the status report until it
// clears; after it restarted the server's JetStream (here: lost the
// writer's consumer), the writer consumes afresh and applies what follows.
func TestWriterQueueCheck(t *testing.T) {
	nc, js := startJetStream(t)
	store, sid := writerStore(t)
	var state atomic.Int32 // 0 healthy, 1 failing, 2 "restarted", then healthy
	var restarts atomic.Int32
	check := func(ctx context.Context) (bool, error) {
		switch state.Load() {
		case 1:
			return false, errors.New("the queue cannot store jobs: boom")
		case 2:
			s, err := js.Stream(ctx, queue.StreamName(sid))
			if err == nil {
				err = s.DeleteConsumer(ctx, queue.ConsumerName)
			}
			if err != nil {
				return false, err
			}
			state.Store(0)
			restarts.Add(1)
			return true, nil
		}
		return false, nil
	}
	w := startWriter(t, store, nc, func(c *daemon.WriterConfig) { c.CheckQueue = check })
	publishJob(t, js, sid, "before", wireJob(t, sid, "before", "before"))
	outcomeOf(t, w, "before")

	state.Store(1)
	require.Eventually(t, func() bool { return w.Report(t.Context()).Fault != "" }, 10*time.Second, 10*time.Millisecond)
	assert.Contains(t, w.Report(t.Context()).Fault, "boom")

	state.Store(2)
	require.Eventually(t, func() bool { return restarts.Load() == 1 }, 20*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return w.Report(t.Context()).Fault == "" }, 10*time.Second, 10*time.Millisecond, "the fault clears")
	publishJob(t, js, sid, "after", wireJob(t, sid, "after", "after"))
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, "after").Status, "consuming again after the restart")
	assert.Equal(t, "before\nafter\n", storeLog(t, store))
}

// A consumer that vanishes from the server (deleted, or lost with the
// server's memory) is recreated: the writer does not go on pulling from
// it for ever. A daemon stuck so after the full-disk restart in CI.
func TestWriterRecreatesDeletedConsumer(t *testing.T) {
	nc, js := startJetStream(t)
	store, sid := writerStore(t)
	w := startWriter(t, store, nc, nil)
	publishJob(t, js, sid, "before", wireJob(t, sid, "before", "before"))
	outcomeOf(t, w, "before")

	s, err := js.Stream(t.Context(), queue.StreamName(sid))
	require.NoError(t, err)
	require.NoError(t, s.DeleteConsumer(t.Context(), queue.ConsumerName))
	publishJob(t, js, sid, "after", wireJob(t, sid, "after", "after"))
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, "after").Status, "consuming again from a new consumer")
	assert.Equal(t, "before\nafter\n", storeLog(t, store))
}

// A writer killed after answering, before the next batch dropped the
// batch's intent, leaves its outcomes provisional: hidden from look-ups
// until a holder redoes the intent. A daemon that starts with nothing to
// apply would never take the store, so it finishes such a batch at start:
// the outcome its caller heard is visible again.
func TestWriterFinishesInterruptedBatchAtStart(t *testing.T) {
	store, storeID := writerStore(t)
	job := &queue.Job{V: queue.Version, ID: "last", Store: storeID, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "log", Data: []byte("x\n")}}}
	require.NoError(t, applyThenDie(store, job, false))
	ro, err := journal.OpenReadOnly(journal.Path(store), time.Second)
	require.NoError(t, err)
	o, err := ro.Outcome("last")
	require.NoError(t, err)
	assert.Nil(t, o, "provisional while the intent stands")
	require.NoError(t, ro.Close())

	nc, _ := startJetStream(t)
	w := startWriter(t, store, nc, nil)
	l := w.Lookup("last")
	require.True(t, l.Found, "%+v", l)
	assert.True(t, l.Outcome.Applied())
	b, err := os.ReadFile(filepath.Join(store, "log"))
	require.NoError(t, err)
	assert.Equal(t, "x\n", string(b), "redone, not doubled")
}

// olderStream makes the store's stream as an older version did: with the
// normal jobs subject alone, and an unfiltered consumer; and queues a
// normal job and one that says it is high on it.
func olderStream(t *testing.T, js jetstream.JetStream, sid string) {
	t.Helper()
	cfg := queue.StreamConfig(sid, queue.Limits{})
	cfg.Subjects = []string{queue.JobsSubject(sid)}
	s, err := js.CreateStream(t.Context(), cfg)
	require.NoError(t, err)
	_, err = s.CreateOrUpdateConsumer(t.Context(), queue.ConsumerConfig(queue.ConsumerName, ""))
	require.NoError(t, err)
	publishJob(t, js, sid, "old-1", wireJob(t, sid, "old-1", "old-1"))
	high, err := json.Marshal(map[string]any{"v": queue.Version, "id": "old-high", "store": sid, "priority": "high",
		"ops": []queue.Op{{Kind: queue.OpAppend, Path: "log.txt", Data: []byte("old-high\n")}}})
	require.NoError(t, err)
	publishJob(t, js, sid, "old-high", high)
}

// A store's stream made by an older version is upgraded by its daemon on
// its own server: the jobs queued in it are applied, and high jobs get
// their subject.
func TestWriterUpgradesOlderStream(t *testing.T) {
	nc, js := startJetStream(t)
	store, sid := writerStore(t)
	olderStream(t, js, sid)
	w := startWriter(t, store, nc, nil)
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, "old-1").Status)
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, "old-high").Status)
	s, err := js.Stream(t.Context(), queue.StreamName(sid))
	require.NoError(t, err)
	assert.True(t, queue.HasHighSubject(s.CachedInfo().Config, sid))
	_, err = js.Publish(t.Context(), queue.HighJobsSubject(sid), wireJob(t, sid, "new-high", "new-high"), jetstream.WithMsgID("new-high"))
	require.NoError(t, err)
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, "new-high").Status)
	assert.ElementsMatch(t, []string{"old-1", "old-high", "new-high"}, strings.Fields(storeLog(t, store)))
	require.Eventually(t, func() bool {
		n, err := w.Queued(t.Context())
		return err == nil && n == 0
	}, 10*time.Second, 10*time.Millisecond, "every job purged from the queue")
}

// On a server the daemon does not own (a claim), a stream made by an
// older version is used as it is: its jobs, high ones included, are
// applied through the one consumer, and nothing is changed; a stream
// configured otherwise is refused, naming the difference.
func TestWriterVerifiesOlderStream(t *testing.T) {
	nc, js := startJetStream(t)
	store, sid := writerStore(t)
	olderStream(t, js, sid)
	_, err := queue.VerifyStream(t.Context(), js, sid, queue.Limits{})
	require.NoError(t, err, "an older stream is one scribe can use")
	_, err = queue.VerifyStream(t.Context(), js, sid, queue.Limits{MaxJobs: 7})
	require.ErrorIs(t, err, queue.ErrStreamConflict)
	assert.Contains(t, err.Error(), "max_msgs")

	cl, err := claim.Acquire(t.Context(), js, sid, claim.Config{Holder: "test"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Release() })
	w, err := daemon.NewWriter(t.Context(), daemon.WriterConfig{Store: store, Conn: nc, Claim: cl})
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { assert.NoError(t, w.Close()) })
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, "old-1").Status)
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, "old-high").Status)
	s, err := js.Stream(t.Context(), queue.StreamName(sid))
	require.NoError(t, err)
	assert.Equal(t, []string{queue.JobsSubject(sid)}, s.CachedInfo().Config.Subjects, "the operator's stream, unchanged")
}

// A deleted high-class consumer is recreated like the normal one.
func TestWriterRecreatesDeletedHighConsumer(t *testing.T) {
	nc, js := startJetStream(t)
	store, sid := writerStore(t)
	w := startWriter(t, store, nc, nil)
	_, err := js.Publish(t.Context(), queue.HighJobsSubject(sid), wireJob(t, sid, "before", "before"), jetstream.WithMsgID("before"))
	require.NoError(t, err)
	outcomeOf(t, w, "before") // its consumer is pulling
	s, err := js.Stream(t.Context(), queue.StreamName(sid))
	require.NoError(t, err)
	require.NoError(t, s.DeleteConsumer(t.Context(), queue.HighConsumerName))
	_, err = js.Publish(t.Context(), queue.HighJobsSubject(sid), wireJob(t, sid, "after", "after"), jetstream.WithMsgID("after"))
	require.NoError(t, err)
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, "after").Status, "consuming again from a new consumer")
}

// A writer that starts with high and normal jobs queued decides the high
// ones first: its first batch waits for the high class's first delivery.
func TestWriterStartsWithQueuedHighJobs(t *testing.T) {
	nc, js := startJetStream(t)
	store, sid := writerStore(t)
	_, err := queue.CreateStream(t.Context(), js, sid, queue.Limits{})
	require.NoError(t, err)
	for i := range 50 {
		id := fmt.Sprintf("n%d", i)
		publishJob(t, js, sid, id, wireJob(t, sid, id, id))
	}
	_, err = js.Publish(t.Context(), queue.HighJobsSubject(sid), wireJob(t, sid, "h", "h"), jetstream.WithMsgID("h"))
	require.NoError(t, err)
	w := startWriter(t, store, nc, nil)
	outcomeOf(t, w, "n49")
	lines := strings.Fields(storeLog(t, store))
	require.Len(t, lines, 51)
	assert.Equal(t, "h", lines[0])
}

// Decided jobs leave a small queue long before the purge that comes once
// a second: a queue of 16 jobs takes 64 small jobs, and a queue of 64
// KiB 64 jobs of 8 KiB, one after another, without filling up with jobs
// already applied.
func TestWriterPurgesBeforeDecidedJobsFillTheQueue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits queue.Limits
		size   int
	}{
		{"jobs", queue.Limits{MaxJobs: 16}, 10},
		{"bytes", queue.Limits{MaxBytes: 64 << 10}, 8 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, js := startJetStream(t)
			store, sid := writerStore(t)
			w := startWriter(t, store, nc, func(c *daemon.WriterConfig) { c.Limits = tc.limits })
			start := time.Now()
			var want []string
			for i := range 64 {
				id := fmt.Sprintf("job-%d", i)
				line := id + strings.Repeat(".", tc.size-len(id))
				publishJob(t, js, sid, id, wireJob(t, sid, id, line))
				assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, id).Status)
				want = append(want, line)
			}
			t.Logf("64 jobs in %v", time.Since(start))
			assert.Equal(t, want, strings.Fields(storeLog(t, store)))
		})
	}
}
