package client_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// statusKeys are the keys of a store's status, with or without a daemon.
var statusKeys = []string{"store", "store_id", "daemon", "lock", "queued", "in_flight", "applied", "rejected", "dead_letters",
	"last_error", "waiting", "fault", "running", "deferred", "journal", "interrupted", "stranded"}

// assertKeys checks that st encodes with every key of a store's status.
func assertKeys(t *testing.T, st *client.StoreStatus) {
	t.Helper()
	b, err := json.Marshal(st)
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	for _, k := range statusKeys {
		assert.Contains(t, m, k)
	}
	assert.Len(t, m, len(statusKeys), "%s", b)
}

// Without a daemon, the status is the journal's and the lock's, read
// from the store's files.
func TestReportWithoutDaemon(t *testing.T) {
	store := newStore(t)
	real, err := queue.ResolveStore(store)
	require.NoError(t, err)
	st, err := client.Report(t.Context(), store)
	require.NoError(t, err)
	assertKeys(t, st)
	assert.Equal(t, real, st.Store)
	assert.Equal(t, queue.StoreID(real), st.StoreID)
	assert.Nil(t, st.Daemon)
	assert.Nil(t, st.Report)
	assert.Nil(t, st.Queued, "only a daemon knows its queue")
	assert.Equal(t, client.LockStatus{Path: queue.Layout{Root: real}.Lock(), State: client.LockFree}, st.Lock)
	assert.Nil(t, st.Journal.Error, "a journal not made yet is empty")
	assert.Zero(t, *st.Applied)

	c, err := client.Open(t.Context(), store, client.WithRoute(client.RouteDirect))
	require.NoError(t, err)
	defer c.Close()
	out, err := c.Apply(t.Context(), appendJob("report-1", "x\n"))
	require.NoError(t, err)
	require.True(t, out.Applied())
	st, err = c.StoreStatus(t.Context())
	require.NoError(t, err)
	assert.EqualValues(t, 1, *st.Applied)
	assert.Equal(t, 1, st.Journal.Outcomes)
	assert.Equal(t, out.Epoch, st.Journal.Epoch)
	assert.Nil(t, st.Stranded)
}

// A held lock is shown with its holder's identity, as its lock file
// names the process the kernel lists.
func TestReportLockHeld(t *testing.T) {
	store := newStore(t)
	mustHoldStore(t, store)
	st, err := client.Report(t.Context(), store)
	require.NoError(t, err)
	assert.Equal(t, client.LockHeld, st.Lock.State)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "nightly-import", st.Holder.Command)
	assert.Equal(t, queue.ModeDirect, st.Holder.Mode)
	require.NotNil(t, st.Lock.PID)
	assert.Equal(t, st.Holder.PID, *st.Lock.PID)
	assert.NotEqual(t, os.Getpid(), *st.Lock.PID, "another process holds it")
}

// With a daemon, the status is its report, and the lock it takes.
func TestReportWithDaemon(t *testing.T) {
	store := newStore(t)
	startDaemon(t, store)
	c, err := client.Open(t.Context(), store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	defer c.Close()
	out, err := c.Apply(t.Context(), appendJob("report-2", "x\n"))
	require.NoError(t, err)
	require.True(t, out.Applied())

	st, err := client.Report(t.Context(), store)
	require.NoError(t, err)
	assertKeys(t, st)
	require.NotNil(t, st.Daemon)
	require.NotNil(t, st.Report)
	assert.Equal(t, os.Getpid(), st.Daemon.PID, "the daemon of this test")
	assert.EqualValues(t, 1, *st.Applied)
	assert.NotNil(t, st.Queued)
	assert.Equal(t, st.Report.LockFile, st.Lock.Path)
	assert.Equal(t, st.Report.Journal.Path, st.Journal.Path)
}
