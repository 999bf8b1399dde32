package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// Poison that kills the daemon, beyond TestPoisonThatKillsTheWriter: a
// starting writer applies its first jobs one at a time, each attempt
// counted, and these check that every kind of job meets that count, and
// only deaths add to it.

// restartUntil restarts the daemon (SIGKILLed by its job) until done
// holds, and returns how often it died; more than max deaths fails.
func restartUntil(t *testing.T, d *daemon, store string, env []string, max int, done func() bool) int {
	t.Helper()
	deaths := 0
	deadline := time.After(90 * time.Second)
	for !done() {
		select {
		case <-deadline:
			t.Fatalf("not done after %d deaths", deaths)
		case <-d.exited:
			deaths++
			d.killed = true
			require.LessOrEqual(t, deaths, max, "the poison keeps killing the daemon")
			d = spawnDaemon(t, store, env)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return deaths
}

// A poison job behind a backlog: each restart the queue delivers again
// the jobs decided before the death and not yet purged. Those
// duplicates must not use up the writer's caution, or the poison, in a
// full batch each time, kills it without being counted.
func TestPoisonBehindReplayedJobs(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	env := []string{"SCRIBE_CRASH_ON=poison.txt"}
	d := startDaemonEnv(t, store, env)
	const backlog = 40 // more than a starting writer's one-at-a-time jobs (16)
	release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock"))
	var want strings.Builder
	for i := range backlog {
		line := fmt.Sprintf("b%d\n", i)
		want.WriteString(line)
		r := scribe(t, "", "submit", "--store", store, "--route", "require", "--id", fmt.Sprintf("b%d", i), "append", "ok.txt", line)
		require.Equal(t, 0, r.code, r.stderr)
	}
	r := scribe(t, "", "submit", "--store", store, "--route", "require", "--id", "poison", "put", "poison.txt", "x")
	require.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "", "submit", "--store", store, "--route", "require", "--id", "after", "append", "ok.txt", "after\n")
	require.Equal(t, 0, r.code, r.stderr)
	want.WriteString("after\n")
	release()

	// 16 jobs one at a time per start, then a batch with the poison in it
	// dies uncounted: 40 jobs take 2 such deaths; then 3 counted ones.
	deaths := restartUntil(t, d, store, env, backlog/16+1+3, func() bool {
		return readFile(t, filepath.Join(store, "ok.txt")) == want.String()
	})
	assert.GreaterOrEqual(t, deaths, 3, "the poison did kill the daemon, each counted attempt")
	o := outcomeOf(t, store, "poison")
	assert.Equal(t, queue.ReasonInternal, o.Reason, o.Detail)
	assert.Contains(t, o.Detail, "died 3 times")
	assert.NoFileExists(t, filepath.Join(store, "poison.txt"))
}

// A poison job with high jobs queued behind it: each start, the writer
// takes high jobs first, one at a time and each attempt counted, before
// it tries the poison again. Their counts must not take the poison's.
func TestPoisonBehindHighJobs(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	env := []string{"SCRIBE_CRASH_ON=poison.txt"}
	d := startDaemonEnv(t, store, env)
	release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock"))
	r := scribe(t, "", "submit", "--store", store, "--route", "require", "--id", "poison", "put", "poison.txt", "x")
	require.Equal(t, 0, r.code, r.stderr)
	const high = 20
	for i := range high {
		r := scribe(t, "", "submit", "--store", store, "--route", "require", "--priority", "high", "--id", fmt.Sprintf("h%d", i), "append", "high.txt", "h\n")
		require.Equal(t, 0, r.code, r.stderr)
	}
	release()

	restartUntil(t, d, store, env, 3, func() bool {
		o, err := scribeNoT("status", "--store", store, "--json", "poison")
		return err == nil && o.code == 0
	})
	o := outcomeOf(t, store, "poison")
	assert.Equal(t, queue.ReasonInternal, o.Reason, o.Detail)
	require.Eventually(t, func() bool { return readFile(t, filepath.Join(store, "high.txt")) == strings.Repeat("h\n", high) }, 30*time.Second, 20*time.Millisecond)
}

// An exec job whose command kills the daemon (its parent), marked
// rerun_safe so that every restart runs it again: it is poison as a file
// job is, rejected after 3 deaths, and the job queued behind it applies.
func TestExecPoisonThatKillsTheDaemon(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	runs := filepath.Join(t.TempDir(), "runs.log")
	writeConfig(t, store, fmt.Sprintf("[exec.killer]\nprogram = \"/bin/sh\"\nargs = [\"-c\", %s]\ntimeout = \"30s\"\nrerun_safe = true\nenv = { RUNS = %s }\n",
		tomlString(`echo run >> "$RUNS"; kill -9 $PPID`), tomlString(runs)), 0o600)
	d := startDaemon(t, store)
	release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock")) // queue both first
	r := scribe(t, "", "submit", "--store", store, "--id", "killer-1", "exec", "killer")
	require.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "", "submit", "--store", store, "--route", "require", "--id", "after", "append", "ok.txt", "after\n")
	require.Equal(t, 0, r.code, r.stderr)
	release()

	deaths := restartUntil(t, d, store, nil, 3, func() bool { return readFile(t, filepath.Join(store, "ok.txt")) == "after\n" })
	assert.Equal(t, 3, deaths)
	assert.Equal(t, "run\nrun\nrun\n", readFile(t, runs), "run once per counted attempt, never a fourth time")
	o := outcomeOf(t, store, "killer-1")
	assert.Equal(t, queue.StatusRejected, o.Status)
	assert.Equal(t, queue.ReasonInternal, o.Reason, o.Detail)
	assert.Contains(t, o.Detail, "died 3 times")
}

// A daemon stopped (SIGTERM) while a rerun_safe command runs is no death:
// stopped more often than a poison's attempts, the job still runs to its
// end once the daemon is left running.
func TestExecStopsAreNotDeaths(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	out := t.TempDir()
	runs, goFile := filepath.Join(out, "runs.log"), filepath.Join(out, "go")
	writeConfig(t, store, fmt.Sprintf("[exec.slow]\nprogram = \"/bin/sh\"\nargs = [\"-c\", %s]\ntimeout = \"60s\"\nrerun_safe = true\nenv = { RUNS = %s, GO = %s }\n",
		tomlString(`echo run >> "$RUNS"; while [ ! -e "$GO" ]; do sleep 0.01; done`), tomlString(runs), tomlString(goFile)), 0o600)
	d := startDaemon(t, store)
	r := scribe(t, "", "submit", "--store", store, "--id", "slow-1", "exec", "slow")
	require.Equal(t, 0, r.code, r.stderr)
	for i := 1; i <= 4; i++ {
		require.Eventually(t, func() bool { return strings.Count(readFile(t, runs), "run\n") == i }, 30*time.Second, 10*time.Millisecond, "run %d started", i)
		d.stop(t)
		d = startDaemon(t, store)
	}
	require.Eventually(t, func() bool { return strings.Count(readFile(t, runs), "run\n") == 5 }, 30*time.Second, 10*time.Millisecond, "run 5 started")
	require.NoError(t, os.WriteFile(goFile, nil, 0o644))
	o := outcomeOf(t, store, "slow-1")
	assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s", o.Reason, o.Detail)
}

// A job deferred (the command's own lock is held) has killed nothing: the
// writer has let the store go, another process may hold it, and the
// daemon stopped or SIGKILLed meanwhile, more often than a poison's
// attempts, counts no attempt. Once the command's lock is free, it runs.
func TestExecDeferredJobIsNoPoison(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	out := t.TempDir()
	runs, tool := filepath.Join(out, "runs.log"), filepath.Join(out, "tool.lock")
	require.NoError(t, os.WriteFile(tool, nil, 0o600))
	writeConfig(t, store, fmt.Sprintf("[exec.gated]\nprogram = \"/bin/sh\"\nargs = [\"-c\", %s]\ntimeout = \"60s\"\nrerun_safe = true\nlock_file = %s\nenv = { RUNS = %s }\n",
		tomlString(`echo run >> "$RUNS"`), tomlString(tool), tomlString(runs)), 0o600)
	openTool := holdWithFlock(t, tool)
	d := startDaemon(t, store)
	r := scribe(t, "", "submit", "--store", store, "--id", "gated-1", "exec", "gated")
	require.Equal(t, 0, r.code, r.stderr)
	storeLock := filepath.Join(store, ".scribe", "lock")
	for i := range 6 {
		require.Eventually(t, func() bool {
			rep, ok := report(t, store)
			return ok && rep.Deferred != ""
		}, 30*time.Second, 20*time.Millisecond, "the job is deferred")
		release := holdWithFlock(t, storeLock) // the writer let go while deferred
		if i%2 == 0 {
			d.stop(t)
		} else {
			d.kill(t)
		}
		d = spawnDaemon(t, store, nil)
		d.waitServing(t)
		release()
	}
	openTool()
	o := outcomeOf(t, store, "gated-1")
	assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s", o.Reason, o.Detail)
	assert.Equal(t, "run\n", readFile(t, runs))
}
