package daemon_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/daemon"
	"github.com/scribehq/scribe/writer/exec"
	"github.com/scribehq/scribe/writer/lock"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu        sync.Mutex
	batches   []int
	applyTook []time.Duration
	outcomes  []seen
	waits     []time.Duration
	holds     []time.Duration
	deferred  []string
	runs      []string // command:result
}

// seen is one Outcome call.
type seen struct {
	id        string
	status    queue.Status
	reason    queue.Reason
	dup       bool
	submitted time.Time
}

var _ daemon.Observer = (*recorder)(nil)

func (r *recorder) BatchApplied(size int, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, size)
	r.applyTook = append(r.applyTook, took)
}

func (r *recorder) Outcome(o *queue.Outcome, submitted time.Time, dup bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, seen{o.ID, o.Status, o.Reason, dup, submitted})
}

func (r *recorder) LockWaited(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, d)
}

func (r *recorder) LockHeld(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holds = append(r.holds, d)
}

func (r *recorder) Deferred(command string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deferred = append(r.deferred, command)
}

func (r *recorder) ExecRan(command, result string, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, command+":"+result)
}

// snapshot returns a copy of what was recorded so far.
func (r *recorder) snapshot() recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	return recorder{
		batches: append([]int(nil), r.batches...), applyTook: append([]time.Duration(nil), r.applyTook...),
		outcomes: append([]seen(nil), r.outcomes...), waits: append([]time.Duration(nil), r.waits...),
		holds: append([]time.Duration(nil), r.holds...), deferred: append([]string(nil), r.deferred...),
		runs: append([]string(nil), r.runs...),
	}
}

// submittedJob is the wire form of a one-append job built at submitted.
func submittedJob(t *testing.T, storeID, id, path string, submitted time.Time) []byte {
	t.Helper()
	b, err := json.Marshal(&queue.Job{V: queue.Version, ID: id, Store: storeID, Submitted: submitted,
		Ops: []queue.Op{{Kind: queue.OpAppend, Path: path, Data: []byte(id + "\n")}}})
	require.NoError(t, err)
	return b
}

// The observer hears of every batch, every outcome (duplicates marked,
// with the job's submit time), the wait for a store another process
// holds, and the hold once the writer lets the store go.
func TestObserverFileJobs(t *testing.T) {
	nc, js := startJetStream(t)
	store, id := writerStore(t)
	rec := &recorder{}
	w := startWriter(t, store, nc, func(c *daemon.WriterConfig) { c.Observer = rec })

	holder := holdInChild(t, store, lock.Options{Command: "test holder"})
	at := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	for _, job := range []string{"j1", "j2", "j3"} {
		publishJob(t, js, id, job, submittedJob(t, id, job, "log.txt", at))
	}
	publishJob(t, js, id, "bad", submittedJob(t, id, "bad", "../escape.txt", time.Time{}))
	require.Eventually(t, func() bool { return w.Report(t.Context()).Waiting != "" }, 10*time.Second, 10*time.Millisecond)
	waitSeen := time.Now()
	holder.Stop(t)
	released := time.Since(waitSeen)
	outcomeOf(t, w, "bad")
	// A redelivery of j1 (no Nats-Msg-Id: JetStream does not dedupe it).
	publishJob(t, js, id, "", submittedJob(t, id, "j1", "log.txt", at))
	require.Eventually(t, func() bool { return len(rec.snapshot().outcomes) == 5 }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return len(rec.snapshot().holds) > 0 }, 10*time.Second, 10*time.Millisecond,
		"the hold is observed once the idle writer lets the store go")

	got := rec.snapshot()
	byID := map[string][]seen{}
	for _, o := range got.outcomes {
		byID[o.id] = append(byID[o.id], o)
	}
	for _, job := range []string{"j2", "j3"} {
		require.Len(t, byID[job], 1, job)
		assert.Equal(t, queue.StatusApplied, byID[job][0].status)
		assert.False(t, byID[job][0].dup)
		assert.True(t, at.Equal(byID[job][0].submitted), "%s submitted %v, want %v", job, byID[job][0].submitted, at)
	}
	require.Len(t, byID["j1"], 2)
	assert.Equal(t, []bool{false, true}, []bool{byID["j1"][0].dup, byID["j1"][1].dup}, "the redelivery is a duplicate")
	require.Len(t, byID["bad"], 1)
	assert.Equal(t, queue.StatusRejected, byID["bad"][0].status)
	assert.Equal(t, queue.ReasonPathEscapes, byID["bad"][0].reason)
	assert.True(t, byID["bad"][0].submitted.IsZero())

	total := 0
	for i, n := range got.batches {
		total += n
		assert.Positive(t, got.applyTook[i])
	}
	assert.Equal(t, 5, total, "every job, the duplicate included, was in an applied batch")
	require.NotEmpty(t, got.waits)
	assert.GreaterOrEqual(t, got.waits[0], released, "the first wait lasted at least until the holder let go")
	assert.Len(t, got.holds, len(got.waits), "each hold that began has ended")
	assert.Empty(t, got.deferred)
	assert.Empty(t, got.runs)
}

// Exec runs are observed by how they ended, deferrals by command, and the
// run under the writer's own nested hold is not the end of a hold.
func TestObserverExec(t *testing.T) {
	nc, js := startJetStream(t)
	store, id := writerStore(t)
	busy := shCommand("busy", `if [ -e "$SCRIBE_STORE/busy" ]; then exit 75; fi`)
	busy.BusyExitCodes = []int{75}
	rec := &recorder{}
	w := startWriter(t, store, nc, func(c *daemon.WriterConfig) {
		c.Observer = rec
		c.Commands = []exec.Command{shCommand("ok", "true"), shCommand("fail", "exit 3"), busy}
	})

	publishJob(t, js, id, "ok1", execJob(t, id, "ok1", "ok", ""))
	require.True(t, outcomeOf(t, w, "ok1").Applied())
	require.Eventually(t, func() bool { return len(rec.snapshot().holds) > 0 }, 10*time.Second, 10*time.Millisecond)
	got := rec.snapshot()
	assert.Len(t, got.waits, 1, "one hold for the run: the writer's nested hold kept the store")
	assert.Len(t, got.holds, 1, "one hold for the run: the writer's nested hold kept the store")
	assert.Equal(t, []string{"ok:ok"}, got.runs)

	publishJob(t, js, id, "fail1", execJob(t, id, "fail1", "fail", ""))
	assert.False(t, outcomeOf(t, w, "fail1").Applied())

	require.NoError(t, os.WriteFile(filepath.Join(store, "busy"), nil, 0o644))
	publishJob(t, js, id, "busy1", execJob(t, id, "busy1", "busy", ""))
	require.Eventually(t, func() bool { return len(rec.snapshot().deferred) > 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, os.Remove(filepath.Join(store, "busy")))
	require.True(t, outcomeOf(t, w, "busy1").Applied())
	require.Eventually(t, func() bool { return len(rec.snapshot().outcomes) == 3 }, 10*time.Second, 10*time.Millisecond)

	got = rec.snapshot()
	assert.Equal(t, "busy:ok", got.runs[len(got.runs)-1])
	assert.Contains(t, got.runs, "fail:failed")
	assert.Contains(t, got.runs, "busy:busy")
	for _, c := range got.deferred {
		assert.Equal(t, "busy", c)
	}
	assert.Empty(t, got.batches, "exec jobs are not batches")
}

// A writer without an Observer works as before (NopObserver).
func TestNopObserver(t *testing.T) {
	nc, js := startJetStream(t)
	store, id := writerStore(t)
	w := startWriter(t, store, nc, nil)
	publishJob(t, js, id, "a", wireJob(t, id, "a", "line"))
	require.True(t, outcomeOf(t, w, "a").Applied())
	assert.Equal(t, "line\n", storeLog(t, store))
}
