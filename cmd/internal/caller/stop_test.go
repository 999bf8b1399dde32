package caller

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// The pid a discovery file names is taken for the daemon only while it
// holds the daemon lock. A lock none holds is a daemon gone: nothing to
// signal. A pid of another process, or 0 or -1 (which kill(2) takes for a
// group, or for every process), is refused, and nothing is signalled.
func TestCheckDaemonProcess(t *testing.T) {
	dir := t.TempDir()
	store, err := queue.ResolveStore(dir)
	require.NoError(t, err)
	lk, err := discovery.Take(t.Context(), store, nil)
	require.NoError(t, err)
	defer lk.Close()
	l := lk.Layout()
	me := os.Getpid()

	announced := &queue.Discovery{PID: me, Started: time.Now()}
	daemon, err := checkDaemonProcess(l, announced)
	require.NoError(t, err)
	assert.True(t, daemon, "this process holds the daemon lock")

	// Another process, older than the announcement: no longer proof.
	sleeper := exec.Command("sleep", "30")
	require.NoError(t, sleeper.Start())
	other := &queue.Discovery{PID: sleeper.Process.Pid, Started: time.Now().Add(time.Hour)}
	_, err = checkDaemonProcess(l, other)
	assert.ErrorContains(t, err, fmt.Sprintf("does not hold the daemon lock %s (pid %d does): it is not the daemon", l.DaemonLock(), me))
	assert.ErrorContains(t, signalDaemon(l, other), "nothing was signalled")
	// A pid no process has, while the lock is held: not taken for a
	// daemon gone, whose stop would wait out its timeout.
	assert.ErrorContains(t, signalDaemon(l, &queue.Discovery{PID: 1 << 30}), fmt.Sprintf("pid %d, which %s names, does not hold the daemon lock", 1<<30, l.Discovery()))
	for _, pid := range []int{0, -1} {
		assert.ErrorContains(t, signalDaemon(l, &queue.Discovery{PID: pid}), fmt.Sprintf("names pid %d, which no process has; nothing was signalled", pid))
	}
	require.NoError(t, sleeper.Process.Kill())
	_ = sleeper.Wait()
	assert.Equal(t, syscall.SIGKILL, sleeper.ProcessState.Sys().(syscall.WaitStatus).Signal(), "the sleeper died of this test's SIGKILL, not of a SIGTERM sent before")

	require.NoError(t, lk.Close())
	daemon, err = checkDaemonProcess(l, announced)
	require.NoError(t, err)
	assert.False(t, daemon, "a free lock: the daemon is gone")
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

// The stop gate: taken when free; a turn that does not come is errNoTurn;
// a gate that cannot be opened is its own error, never taken for a turn
// (stop would exit 0 having stopped nothing).
func TestTakeStopGate(t *testing.T) {
	l := queue.Layout{Root: t.TempDir()}
	_, err := takeStopGate(l, func() bool { return false })
	require.Error(t, err, "no .scribe to make the gate in")
	assert.NotErrorIs(t, err, errNoTurn)

	require.NoError(t, l.Make())
	release, err := takeStopGate(l, func() bool { return false })
	require.NoError(t, err)
	_, err = takeStopGate(l, func() bool { return false })
	assert.ErrorIs(t, err, errNoTurn, "held by the first")
	release()
	release, err = takeStopGate(l, func() bool { return false })
	require.NoError(t, err, "free again")
	release()
}
