package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// idleHooks is how many hooks TestIdleExitLeavesNoAcceptedJob fires:
// $SCRIBE_IDLE_HOOKS, default 120 (some 200 idle exits), spread over
// idleStores.
func idleHooks(t *testing.T) int {
	n := 120
	if s := os.Getenv("SCRIBE_IDLE_HOOKS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err, "SCRIBE_IDLE_HOOKS")
	}
	return n
}

// idleSequence is how many hooks fire one after another before the test
// waits, with no further hook, for what they queued.
const idleSequence = 10

// idleStores is how many stores TestIdleExitLeavesNoAcceptedJob runs its
// hooks on, side by side: one store's hooks are a sequence that must keep
// its pace (a minute and a half for 120), while the machine has room for
// more than one.
const idleStores = 3

// A daemon that leaves when idle never leaves an accepted job behind.
// Hooks submit one after another, without --wait, 60 to 300 ms apart,
// around an autostarted daemon's idle exit (--exit-idle 100ms), so that
// it leaves, and is started again, most of the time between two of them.
// Two pauses (SCRIBE_PAUSE_AT) widen the window a hook could slip into,
// a few microseconds on an idle machine: each hook stands still 80 ms
// once it has connected to the daemon it discovered (a loaded machine's
// hook can take that long), and the daemon 200 ms once it has stopped
// its writer on its way out, its queue's server still up. After every
// idleSequence hooks, with no further hook, once no daemon runs, every
// job whose submit exited 0 is applied, exactly once: none waits for a
// later hook to bring a daemon.
//
// Exit 75 is the only other exit allowed: the submit could not learn in
// its time (30 s) whether its job was queued; a retry with the same ID
// is safe. Such a job may or may not be applied, but never twice.
func TestIdleExitLeavesNoAcceptedJob(t *testing.T) {
	t.Parallel()
	hooks := idleHooks(t)
	for k := range idleStores {
		// Each store gets its share of the hooks.
		n := hooks / idleStores
		if k < hooks%idleStores {
			n++
		}
		t.Run(fmt.Sprintf("store %d", k), func(t *testing.T) {
			t.Parallel()
			idleExitHooks(t, n)
		})
	}
}

// idleExitHooks fires hooks hooks at a new store, as
// TestIdleExitLeavesNoAcceptedJob says.
func idleExitHooks(t *testing.T, hooks int) {
	store := newStore(t)
	stopAutostarted(t, store)
	const exitIdle = 100 * time.Millisecond
	const hookPause, daemonPause = 80 * time.Millisecond, 200 * time.Millisecond
	env := []string{"SCRIBE_AUTOSTART=", "SCRIBE_EXIT_IDLE=",
		fmt.Sprintf("SCRIBE_PAUSE_AT=dialled:%s,stopped:%s", hookPause, daemonPause)}
	codes := map[int]int{}
	accepted := map[int]bool{}
	var left []int
	for i := range hooks {
		// The hooks' spacing is the workload, not a synchronisation.
		time.Sleep(time.Duration(60+rand.IntN(241)) * time.Millisecond)
		// No --id, as hooks usually submit: the client makes one, and
		// asks nothing of the daemon once its job is queued.
		r, err := runProcess(scribeBin, env, nil, "submit", "--store", store, "--autostart", "--exit-idle", exitIdle.String(),
			"append", "log.txt", fmt.Sprintf("%d\n", i))
		require.NoError(t, err)
		codes[r.code]++
		switch r.code {
		case 0:
			accepted[i] = true
		case 75:
			t.Logf("hook %d: exit 75 (fate unknown): %s", i, strings.TrimSpace(r.stderr))
		default:
			t.Errorf("hook %d: exit %d: %s", i, r.code, r.stderr)
		}
		if (i+1)%idleSequence != 0 && i+1 != hooks {
			continue
		}
		// No further hook: whatever daemon runs applies what it has,
		// idles and leaves; then nothing is left to apply the queue.
		require.Eventually(t, func() bool {
			d, err := discovery.Find(store)
			return d == nil && err == nil && len(serveProcs(t, store)) == 0
		}, 30*time.Second+exitIdle+daemonPause, 20*time.Millisecond, "the last daemon leaves")
		seen := appliedLines(t, store)
		for j := i + 1 - idleSequence; j <= i; j++ {
			if accepted[j] && seen[strconv.Itoa(j)] == 0 {
				left = append(left, j)
			}
		}
	}
	for l, n := range appliedLines(t, store) {
		assert.Equal(t, 1, n, "line %q applied %d times", l, n)
	}
	exits := strings.Count(readFile(t, queue.Layout{Root: store}.DaemonLog()), "idle; exiting")
	t.Logf("%d hooks (exit codes %v), %d idle exits, %d daemons; %d accepted jobs left behind: %v",
		hooks, codes, exits, len(servingPIDs(t, store)), len(left), left)
	assert.Empty(t, left, "accepted jobs left behind, with no daemon to apply them")
	assert.Greater(t, exits, hooks/2, "the daemon left between hooks most of the time")
}

// appliedLines counts the lines of the store's log.txt.
func appliedLines(t *testing.T, store string) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for l := range strings.SplitSeq(strings.TrimSuffix(readFile(t, filepath.Join(store, "log.txt")), "\n"), "\n") {
		seen[l]++
	}
	return seen
}

// A client connected before the daemon decided to leave (an MCP server, a
// Go program), submitting after its writer stopped (SCRIBE_PAUSE_AT keeps
// the daemon's queue server up 2 s then): its connection is cut, it does
// not know whether the job was queued, and submits it again with the same
// ID through discovery; autostart brings a daemon, which applies it once,
// with no other client to come.
func TestIdleExitCutsOffConnectedClient(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	stopAutostarted(t, store)
	const exitIdle = 300 * time.Millisecond
	d := startDaemonEnv(t, store, []string{"SCRIBE_PAUSE_AT=stopped:2s"}, "--exit-idle", exitIdle.String())
	cl, err := client.Open(t.Context(), store, client.WithRoute(client.RouteRequire),
		client.WithAutostart(client.Autostart{Command: []string{scribeBin, "serve"}, ExitIdle: time.Minute}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	// Leaving, withdrawn: a client that looks for a daemon now finds none.
	require.Eventually(t, func() bool {
		_, err := queue.ReadDiscovery(store)
		return strings.Contains(d.log.String(), "shutting down") && err != nil
	}, 30*time.Second+exitIdle, 5*time.Millisecond)

	job := &queue.Job{ID: "late", Ops: []queue.Op{{Kind: queue.OpAppend, Path: "log.txt", Data: []byte("late\n")}}}
	require.NoError(t, cl.Submit(t.Context(), job), "queued, by this daemon or the next")
	<-d.exited
	assert.NotContains(t, d.log.String(), "stopping with jobs still queued")
	o := outcomeOf(t, store, "late")
	assert.Equal(t, queue.StatusApplied, o.Status)
	assert.Equal(t, "late\n", readFile(t, filepath.Join(store, "log.txt")), "applied once")
	next, err := discovery.Find(store)
	require.NoError(t, err)
	require.NotNil(t, next, "the daemon the client started")
	assert.NotEqual(t, d.cmd.Process.Pid, next.PID)
}

// A job queued while the daemon, idle, is on its way out (its discovery
// withdrawn, SCRIBE_PAUSE_AT=withdrawn holding it there) keeps it: it
// announces itself again, with new credentials, applies the job and
// serves the client, which it cut off, through the new discovery; then,
// idle again, it leaves. With one store and with several.
func TestIdleExitJobWhileWithdrawnKeepsDaemon(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d stores", n), func(t *testing.T) {
			var stores, args []string
			for range n {
				s := newStore(t)
				stores = append(stores, s)
				args = append(args, "--store", s)
			}
			// The job, applied during the pause, must leave the daemon
			// less idle than --exit-idle when it looks again.
			args = append(args, "--queue-dir", filepath.Join(t.TempDir(), "queue"), "--exit-idle", "2s")
			d := spawnDaemon(t, stores[0], []string{"SCRIBE_PAUSE_AT=withdrawn:500ms"}, args[2:]...)
			var first *queue.Discovery
			require.Eventually(t, func() bool {
				first, _ = queue.ReadDiscovery(stores[n-1])
				return first != nil && first.PID == d.cmd.Process.Pid
			}, 30*time.Second, 10*time.Millisecond)
			cl, err := client.Open(t.Context(), stores[n-1], client.WithRoute(client.RouteRequire))
			require.NoError(t, err)
			t.Cleanup(func() { _ = cl.Close() })
			require.Eventually(t, func() bool {
				_, err := os.Stat(queue.Layout{Root: stores[n-1]}.Discovery())
				return os.IsNotExist(err)
			}, 30*time.Second, time.Millisecond, "withdrawn")

			job := &queue.Job{ID: "while-withdrawn", Ops: []queue.Op{{Kind: queue.OpAppend, Path: "log.txt", Data: []byte("kept\n")}}}
			o, err := cl.Apply(t.Context(), job)
			require.NoError(t, err)
			assert.Equal(t, queue.StatusApplied, o.Status)
			assert.Equal(t, queue.ModeDaemon, o.Mode, "applied by the daemon that was leaving")
			var again *queue.Discovery
			require.Eventually(t, func() bool {
				again, _ = queue.ReadDiscovery(stores[n-1])
				return again != nil
			}, 30*time.Second, time.Millisecond, "announced again")
			assert.Equal(t, d.cmd.Process.Pid, again.PID)
			assert.NotEqual(t, first.Password, again.Password, "with new credentials")
			l, err := cl.Status(t.Context(), job.ID)
			require.NoError(t, err, "the client, cut off, is served through the new discovery")
			assert.True(t, l.Found)
			assert.Equal(t, "kept\n", readFile(t, filepath.Join(stores[n-1], "log.txt")))
			select {
			case <-d.exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("the daemon did not leave once idle again:\n%s", d.log.String())
			}
			require.NoError(t, d.err, d.log.String())
			assert.Equal(t, 1, strings.Count(d.log.String(), "idle; exiting"), d.log.String())
		})
	}
}
