package embednats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// startShared serves n new stores from a shared queue folder.
func startShared(t *testing.T, n int) (*Server, []string) {
	t.Helper()
	var locks []*discovery.Lock
	var stores []string
	for i := range n {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("store%d", i))
		require.NoError(t, os.Mkdir(dir, 0o755))
		lk, err := discovery.Take(t.Context(), dir, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = lk.Close() })
		locks = append(locks, lk)
		stores = append(stores, lk.Layout().Root)
	}
	qd, err := discovery.TakeQueueDir(t.Context(), filepath.Join(t.TempDir(), "queue"), stores, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = qd.Close() })
	srv, err := StartShared(t.Context(), qd, locks, Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv, stores
}

// Each writer's check returns at once with what changed since its last,
// a restart exactly once, and otherwise waits for a change.
func TestWatchCheckQueue(t *testing.T) {
	srv, _ := startShared(t, 1)
	w := &Watch{s: srv, changed: make(chan struct{})} // not running: the test plays the checks
	a, b := w.CheckQueue(), w.CheckQueue()
	quick := func(check func(context.Context) (bool, error)) (bool, error, bool) {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		r, err := check(ctx)
		return r, err, ctx.Err() == nil
	}
	r, err, answered := quick(a)
	assert.False(t, r)
	assert.NoError(t, err)
	assert.False(t, answered, "nothing new: it waits")

	fault := errors.New("disk full")
	w.update(false, fault)
	w.update(false, errors.New("disk full")) // the same fault: no change
	r, err, answered = quick(a)
	assert.True(t, answered)
	assert.False(t, r)
	assert.Equal(t, fault, err)
	_, err, answered = quick(a)
	assert.False(t, answered, "seen already")
	assert.Equal(t, fault, err, "the fault present, when the wait ends")

	w.update(true, nil)
	for name, check := range map[string]func(context.Context) (bool, error){"a": a, "b": b} {
		r, err, answered = quick(check)
		assert.True(t, answered, name)
		assert.True(t, r, "%s sees the restart", name)
		assert.NoError(t, err, name)
		r, _, _ = quick(check)
		assert.False(t, r, "%s sees it once", name)
	}

	done := make(chan bool)
	go func() { r, _ := a(t.Context()); done <- r }()
	w.update(true, nil)
	select {
	case r := <-done:
		assert.True(t, r, "a waiting writer wakes at the change")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting check did not return")
	}
}

// The watch checks a busy queue every interval, an idle one less often.
func TestWatchActivity(t *testing.T) {
	srv, stores := startShared(t, 2)
	before := srv.activity()
	js, err := jetstream.New(srv.StoreConn(queue.StoreID(stores[1])))
	require.NoError(t, err)
	_, err = queue.CreateStream(t.Context(), js, queue.StoreID(stores[1]), queue.Limits{MaxBytes: 1 << 20})
	require.NoError(t, err)
	_, err = queue.Publish(t.Context(), js, queue.StoreID(stores[1]), queue.JobsSubject(queue.StoreID(stores[1])), "j1", []byte("job"))
	require.NoError(t, err)
	assert.NotEqual(t, before, srv.activity(), "a stored job is activity")
	w := srv.Watch(10 * time.Millisecond)
	w.Close()
}

// A restart of JetStream on a server of several stores brings every
// store's account and queue back.
func TestRestartSharedJetStreamKeepsJobs(t *testing.T) {
	srv, stores := startShared(t, 2)
	for i, store := range stores {
		id := queue.StoreID(store)
		js, err := jetstream.New(srv.StoreConn(id))
		require.NoError(t, err)
		_, err = queue.CreateStream(t.Context(), js, id, queue.Limits{MaxBytes: 1 << 20})
		require.NoError(t, err)
		for j := range i + 1 {
			_, err := queue.Publish(t.Context(), js, id, queue.JobsSubject(id), fmt.Sprint(j), []byte("job"))
			require.NoError(t, err)
		}
	}
	require.NoError(t, srv.restartJetStream())
	for i, store := range stores {
		id := queue.StoreID(store)
		js, err := jetstream.New(srv.StoreConn(id))
		require.NoError(t, err)
		var s jetstream.Stream
		require.Eventually(t, func() bool { s, err = js.Stream(t.Context(), queue.StreamName(id)); return err == nil }, 10*time.Second, 10*time.Millisecond)
		assert.Equal(t, uint64(i+1), s.CachedInfo().State.Msgs, "store %d's jobs came back", i)
		_, err = queue.Publish(t.Context(), js, id, queue.JobsSubject(id), "after", []byte("job"))
		require.NoError(t, err, "the queue takes jobs after the restart")
	}
	assert.Empty(t, srv.queueFault(), "no account left behind")
}
