package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// testExitIdle is the autostarted daemons' --exit-idle in these tests:
// long enough that one serves a whole burst, short enough to see it go.
const testExitIdle = "2s"

// submitAuto runs `scribe submit --autostart` with the test's exit-idle,
// without the testing.T, so that goroutines can run it.
func submitAuto(store, stdin string, args ...string) (result, error) {
	args = append([]string{"submit", "--store", store, "--autostart", "--exit-idle", testExitIdle}, args...)
	return runProcess(scribeBin, []string{"SCRIBE_AUTOSTART=", "SCRIBE_EXIT_IDLE="}, strings.NewReader(stdin), args...)
}

// servingPIDs are the pids of the daemons that announced themselves in
// the store's daemon log, in order.
func servingPIDs(t testing.TB, store string) []int {
	t.Helper()
	var pids []int
	for _, m := range regexp.MustCompile(`msg=serving .* pid=(\d+)`).FindAllStringSubmatch(readFile(t, queue.Layout{Root: store}.DaemonLog()), -1) {
		pid, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}

// serveProcs are the live daemon processes of store, started as scribe
// serve or scribed serve (zombies, whose command line is gone, are not).
func serveProcs(t testing.TB, store string) []int {
	t.Helper()
	real, err := queue.ResolveStore(store)
	require.NoError(t, err)
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	var pids []int
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 3 && (args[0] == scribeBin || args[0] == scribedBin) && args[1] == "serve" && args[3] == real {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			pids = append(pids, pid)
		}
	}
	return pids
}

// stopAutostarted stops, at the end of the test, whatever daemon serves
// store: SIGTERM to the discovery file's pid, then waits for the daemon
// lock to be free. Autostarted daemons are no children of the test.
func stopAutostarted(t *testing.T, store string) {
	t.Cleanup(func() {
		if d, err := discovery.Find(store); err == nil && d != nil {
			_ = syscall.Kill(d.PID, syscall.SIGTERM)
		}
		assert.Eventually(t, func() bool {
			d, err := discovery.Find(store)
			return d == nil && err == nil
		}, 30*time.Second, 10*time.Millisecond, "a daemon still serves %s", store)
		for _, pid := range serveProcs(t, store) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", readFile(t, queue.Layout{Root: store}.DaemonLog()))
		}
	})
}

// With no daemon, 30 hooks firing at once, each a multi-op
// job, start exactly one daemon; all 30 are applied once, and the daemon
// leaves by itself once idle.
func TestAutostartConcurrentHooks(t *testing.T) {
	t.Parallel()
	heavy(t)
	store := newStore(t)
	stopAutostarted(t, store)
	const n = 30
	jobs := t.TempDir()
	for i := range n {
		job := fmt.Sprintf(`{"v":1,"ops":[{"op":"append","path":"log.txt","data":"line %d\n"},{"op":"merge","path":"keys.json","data":"{\"k%d\":%d}"}]}`, i, i, i)
		require.NoError(t, os.WriteFile(filepath.Join(jobs, fmt.Sprintf("job%d.json", i)), []byte(job), 0o600))
	}

	results := make([]result, n)
	errs := make([]error, n)
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			results[i], errs[i] = submitAuto(store, "", "--wait", "--json", "--job", filepath.Join(jobs, fmt.Sprintf("job%d.json", i)))
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	slices.Sort(took)
	t.Logf("hooks took %v (median) to %v (slowest)", took[n/2], took[n-1])

	epochs := map[uint64]bool{}
	for i, r := range results {
		require.NoError(t, errs[i])
		if !assert.Equal(t, 0, r.code, "submit %d: %s", i, r.stderr) {
			continue
		}
		var o queue.Outcome
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &o), r.stdout)
		assert.Equal(t, queue.ModeDaemon, o.Mode, "submit %d was applied by the daemon", i)
		epochs[o.Epoch] = true
	}
	lines := strings.Split(strings.TrimSuffix(readFile(t, filepath.Join(store, "log.txt")), "\n"), "\n")
	assert.Len(t, lines, n, "every line once")
	for i := range n {
		assert.Contains(t, lines, fmt.Sprintf("line %d", i))
	}
	var keys map[string]int
	require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(store, "keys.json"))), &keys))
	for i := range n {
		assert.Equal(t, i, keys[fmt.Sprintf("k%d", i)], "key k%d", i)
	}

	// Exactly one daemon: one announced itself, and once the losers have
	// exited only it runs.
	pids := servingPIDs(t, store)
	require.Len(t, pids, 1, "exactly one daemon served")
	// And no losers: the hooks took turns at the autostart gate, so the
	// first one's daemon was the only one started.
	assert.NotContains(t, readFile(t, queue.Layout{Root: store}.DaemonLog()), "already serves", "a hook started a second daemon")
	d, err := discovery.Find(store)
	require.NoError(t, err)
	require.NotNil(t, d, "the daemon still serves (exit-idle %s)", testExitIdle)
	assert.Equal(t, pids[0], d.PID)
	require.Eventually(t, func() bool {
		p := serveProcs(t, store)
		return len(p) == 1 && p[0] == d.PID
	}, 20*time.Second, 10*time.Millisecond, "only the daemon that won runs: losing serve processes exit")

	// Idle: it leaves by itself, cleanly, withdrawing its discovery.
	require.Eventually(t, func() bool {
		d, err := discovery.Find(store)
		return d == nil && err == nil && len(serveProcs(t, store)) == 0
	}, 30*time.Second, 20*time.Millisecond, "the daemon exits once idle")
	log := readFile(t, queue.Layout{Root: store}.DaemonLog())
	assert.Contains(t, log, "idle; exiting")
	assert.NoFileExists(t, queue.Layout{Root: store}.Discovery())
	assert.NoFileExists(t, queue.Layout{Root: store}.Stranded())
	fi, err := os.Stat(queue.Layout{Root: store}.DaemonLog())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

// The autostart gate only spares the machine a crowd of daemons: a caller
// that holds it and never starts one (here flock(1), as a hook stopped
// mid-start would) delays the others by the client's patience (5 s), then
// they start one regardless, instead of failing after 10 s.
func TestAutostartGateHeldByAnother(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	stopAutostarted(t, store)
	require.NoError(t, os.Mkdir(filepath.Join(store, ".scribe"), 0o700))
	holdWithFlock(t, queue.Layout{Root: store}.AutostartGate())

	start := time.Now()
	r, err := submitAuto(store, "", "--wait", "--json", "append", "log.txt", "through\n")
	took := time.Since(start)
	require.NoError(t, err)
	require.Equal(t, 0, r.code, r.stderr)
	var o queue.Outcome
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &o), r.stdout)
	assert.Equal(t, queue.ModeDaemon, o.Mode)
	assert.GreaterOrEqual(t, took, 5*time.Second, "the caller waited for the gate's holder first")
	assert.Equal(t, "through\n", readFile(t, filepath.Join(store, "log.txt")))
	assert.Len(t, servingPIDs(t, store), 1)
}

// The daemon SIGKILLed while jobs wait behind
// an outside holder of the store lock; the next submit with autostart
// brings one back, which applies the stranded jobs first, in order.
func TestAutostartAfterKill(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	stopAutostarted(t, store)
	r, err := submitAuto(store, "", "--wait", "append", "log.txt", "start\n")
	require.NoError(t, err)
	require.Equal(t, 0, r.code, r.stderr)
	first, err := discovery.Find(store)
	require.NoError(t, err)
	require.NotNil(t, first)

	release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock"))
	const n = 10
	want := "start\n"
	for i := range n {
		r, err := submitAuto(store, "", "--id", fmt.Sprintf("stranded-%d", i), "append", "log.txt", fmt.Sprintf("queued %d\n", i))
		require.NoError(t, err)
		require.Equal(t, 0, r.code, r.stderr)
		want += fmt.Sprintf("queued %d\n", i)
	}
	require.NoError(t, syscall.Kill(first.PID, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		d, err := discovery.Find(store)
		return d == nil && err == nil
	}, 20*time.Second, 10*time.Millisecond, "the killed daemon's lock is free")
	release()
	assert.Equal(t, "start\n", readFile(t, filepath.Join(store, "log.txt")), "nothing applied while the daemon is dead")

	r, err = submitAuto(store, "", "--wait", "--json", "append", "log.txt", "after\n")
	require.NoError(t, err)
	require.Equal(t, 0, r.code, r.stderr)
	want += "after\n"
	assert.Equal(t, want, readFile(t, filepath.Join(store, "log.txt")), "the stranded jobs first, in order")

	pids := servingPIDs(t, store)
	require.Len(t, pids, 2, "one daemon brought back")
	assert.Equal(t, first.PID, pids[0])
	second, err := discovery.Find(store)
	require.NoError(t, err)
	require.NotNil(t, second)
	assert.Equal(t, pids[1], second.PID)
	assert.NotEqual(t, first.PID, second.PID)
	for i := range n {
		l := scribe(t, "", "status", "--store", store, "--json", fmt.Sprintf("stranded-%d", i))
		assert.Equal(t, 0, l.code, l.stderr)
		assert.Contains(t, l.stdout, `"applied"`)
	}
	assert.Eventually(t, func() bool {
		_, err := os.Stat(queue.Layout{Root: store}.Stranded())
		return errors.Is(err, os.ErrNotExist)
	}, 20*time.Second, 20*time.Millisecond, "drained: the marker is lifted")
}
