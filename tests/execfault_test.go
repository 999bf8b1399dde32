package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// The store's disk fills up while the writer holds the store (a command
// runs), with exec jobs queued behind it. A fault of scribe's own files is
// not the job's outcome: `echo hello` still runs (its output does not go
// to the store's disk) and is applied; a job whose run record the journal
// cannot take (its meta is large: the journal needs new pages) is
// deferred with the fault shown in status, not rejected, and once space
// is back it runs, exactly once. A retry with the same ID then gets
// `applied`.
func TestExecOnFullDiskWaitsNotRejected(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	mountTmpfs(t, store, "16m")
	out := t.TempDir() // outside the full disk
	runs, goFile := filepath.Join(out, "runs.log"), filepath.Join(out, "go")
	writeConfig(t, store, fmt.Sprintf("[exec.hello]\nprogram = \"/bin/sh\"\nargs = [\"-c\", %s]\ntimeout = \"10s\"\nenv = { RUNS = %s }\n\n"+
		"[exec.gate]\nprogram = \"/bin/sh\"\nargs = [\"-c\", %s]\ntimeout = \"60s\"\nenv = { GO = %s }\n",
		tomlString(`echo "$SCRIBE_JOB_ID" >> "$RUNS"; echo hello`), tomlString(runs),
		tomlString(`while [ ! -e "$GO" ]; do sleep 0.01; done`), tomlString(goFile)), 0o600)
	startDaemon(t, store, "--max-bytes", strconv.Itoa(4<<20))
	r := scribe(t, "", "submit", "--store", store, "--wait=30s", "--id", "first", "exec", "hello")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "hello\n", r.stdout)

	// Both jobs are queued while the gate's command runs, so that the
	// writer, holding the store, meets the full disk with them in hand.
	r = scribe(t, "", "submit", "--store", store, "--id", "gate-1", "exec", "gate")
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool {
		rep, ok := report(t, store)
		return ok && strings.Contains(rep.Running, "gate-1")
	}, 20*time.Second, 20*time.Millisecond, "the gate runs")
	big := filepath.Join(out, "big.json")
	require.NoError(t, os.WriteFile(big, []byte(`{"meta":{"note":"`+strings.Repeat("m", 600<<10)+`"},"ops":[{"op":"exec","name":"hello"}]}`), 0o644))
	hello := make(chan result, 1)
	go func() {
		r, err := scribeNoT("submit", "--store", store, "--wait=60s", "--id", "hello-1", "exec", "hello")
		if err != nil {
			r = result{code: -1, stderr: err.Error()}
		}
		hello <- r
	}()
	r = scribe(t, "", "submit", "--store", store, "--id", "big-1", "--job", big)
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool {
		rep, ok := report(t, store)
		return ok && rep.Queued == 3
	}, 20*time.Second, 20*time.Millisecond, "both jobs queued behind the gate")
	ballast := filepath.Join(store, "ballast")
	_ = exec.Command("dd", "if=/dev/zero", "of="+ballast, "bs=64k").Run() // stops at "No space left on device"
	require.NoError(t, os.WriteFile(goFile, nil, 0o644))

	r = <-hello
	assert.Equal(t, 0, r.code, "echo hello on a full disk runs and is applied: %s", r.stderr)
	assert.Equal(t, "hello\n", r.stdout)
	assert.NotContains(t, r.stderr, "exec_failed")

	var fault string
	require.Eventually(t, func() bool {
		fault = daemonFault(t, store)
		return strings.Contains(fault, "no space left on device")
	}, 30*time.Second, 50*time.Millisecond, "status shows the fault while the disk is full: %q", fault)
	t.Logf("fault while full: %s", fault)
	assert.Contains(t, fault, "big-1", "the fault names the job it keeps")
	r = scribe(t, "", "submit", "--store", store, "--wait=1s", "--id", "big-1", "--job", big)
	assert.Equal(t, 75, r.code, "waits, not rejected: %s", r.stderr)
	r = scribe(t, "", "status", "--store", store, "big-1")
	assert.Equal(t, 1, r.code, "not decided: %s", r.stdout)
	assert.NotContains(t, readFile(t, runs), "big-1", "nothing ran for it")

	require.NoError(t, os.Remove(ballast))
	o := outcomeOf(t, store, "big-1")
	assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s", o.Reason, o.Detail)
	assert.Equal(t, []string{"first", "hello-1", "big-1"}, strings.Fields(readFile(t, runs)), "each ran exactly once")
	for _, id := range []string{"hello-1", "big-1"} {
		args := []string{"submit", "--store", store, "--wait=30s", "--id", id, "exec", "hello"}
		if id == "big-1" {
			args = []string{"submit", "--store", store, "--wait=30s", "--id", id, "--job", big}
		}
		r := scribe(t, "", args...)
		assert.Equal(t, 0, r.code, "%s: a retry gets applied: %s", id, r.stderr)
	}
	assert.Equal(t, []string{"first", "hello-1", "big-1"}, strings.Fields(readFile(t, runs)), "retries ran nothing")
	require.Eventually(t, func() bool { return daemonFault(t, store) == "" }, 20*time.Second, 50*time.Millisecond, "the fault clears")
}
