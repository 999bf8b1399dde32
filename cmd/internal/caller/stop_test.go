package caller

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// The pid a discovery file names is taken for the daemon when it holds
// the daemon lock, or started before the announcement; else refused.
func TestCheckDaemonProcess(t *testing.T) {
	dir := t.TempDir()
	store, err := queue.ResolveStore(dir)
	require.NoError(t, err)
	lk, err := discovery.Take(t.Context(), store, nil)
	require.NoError(t, err)
	defer lk.Close()
	l := lk.Layout()
	me := os.Getpid()
	assert.True(t, holdsLock(me, l.DaemonLock()), "this process holds the daemon lock")
	assert.False(t, holdsLock(me, filepath.Join(dir, "missing")))

	announced := &queue.Discovery{PID: me, Started: time.Now()}
	assert.NoError(t, checkDaemonProcess(l, announced))
	require.NoError(t, lk.Close())
	assert.False(t, holdsLock(me, l.DaemonLock()))
	assert.NoError(t, checkDaemonProcess(l, announced), "started before the announcement")

	// This process as a stranger that took over a dead daemon's pid.
	old := &queue.Discovery{PID: me, Started: time.Now().Add(-24 * time.Hour)}
	err = checkDaemonProcess(l, old)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is not the daemon")
	assert.ErrorContains(t, signalDaemon(l, old), "nothing was signalled")
}

func TestStopUsage(t *testing.T) {
	store := t.TempDir()
	for _, args := range [][]string{
		{"stop"},
		{"stop", "--store", store, "extra"},
		{"stop", "--store", store, "--timeout", "-1s"},
		{"stop", "--store", store, "--timeout", "soon"},
	} {
		t.Setenv("SCRIBE_STORE", "")
		_, _, code := runCLI(t, nil, args...)
		assert.Equal(t, cli.ExitUsage, code, args)
	}
	_, stderr, code := runCLI(t, nil, "stop", "--store", store)
	require.Equal(t, cli.ExitOK, code, stderr)
	assert.Contains(t, stderr, "no daemon serves")
}
