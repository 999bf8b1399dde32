package embednats

import (
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

// A restart of JetStream keeps every queued job and leaves the queue
// usable; a healthy queue is left alone.
func TestRestartJetStreamKeepsJobs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	require.NoError(t, os.Mkdir(dir, 0o755))
	lk, err := discovery.Take(t.Context(), dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Close() })
	srv, err := Start(t.Context(), lk, Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	sid := srv.Discovery().StoreID
	js, err := jetstream.New(srv.Conn())
	require.NoError(t, err)
	_, err = queue.CreateStream(t.Context(), js, sid, queue.Limits{MaxBytes: 1 << 20})
	require.NoError(t, err)
	for _, id := range []string{"a", "b", "c"} {
		_, err := queue.Publish(t.Context(), js, sid, queue.JobsSubject(sid), id, []byte(id))
		require.NoError(t, err)
	}

	restarted, err := srv.CheckQueue(t.Context())
	require.NoError(t, err)
	assert.False(t, restarted, "nothing to repair")

	before := *srv.ns.JetStreamConfig()
	require.NoError(t, srv.restartJetStream())
	after := srv.ns.JetStreamConfig()
	require.NotNil(t, after)
	assert.Equal(t, before.SyncAlways, after.SyncAlways, "the restart keeps the sync policy")
	assert.Equal(t, before.SyncInterval, after.SyncInterval)
	assert.Equal(t, before.MaxStore, after.MaxStore, "and the storage the streams reserved")
	var s jetstream.Stream
	require.Eventually(t, func() bool { s, err = js.Stream(t.Context(), queue.StreamName(sid)); return err == nil }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, uint64(3), s.CachedInfo().State.Msgs, "the queued jobs came back from disk")
	_, err = queue.Publish(t.Context(), js, sid, queue.JobsSubject(sid), "d", []byte("d"))
	require.NoError(t, err, "the queue takes jobs after the restart")
	assert.Empty(t, srv.queueFault())
	sp := srv.Space()
	assert.Equal(t, queue.Layout{Root: srv.Discovery().Store}.Queue(), sp.Dir)
	assert.Positive(t, sp.Free)
	assert.Positive(t, sp.Limit)
	assert.Equal(t, int64(1<<20), sp.Reserved)
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		SpaceNeeded: "4.2 MiB", 1 << 30: "1.0 GiB", 1 << 50: "1.0 PiB",
	} {
		assert.Equal(t, want, FormatBytes(n), "%d", n)
	}
}
