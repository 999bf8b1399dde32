package tests

import (
	"encoding/json"
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

// gatedStore is a store whose daemon has a "gate" exec command guarded
// by a lock of its own that the test holds: an exec job of it is deferred
// (not decided) until the test lets go, and the jobs queued behind it wait
// in the queue, while the writer stays free to answer cancel requests.
type gatedStore struct {
	store string
	gate  string // the gate command's lock file
}

func newGatedStore(t *testing.T) *gatedStore {
	t.Helper()
	g := &gatedStore{store: newStore(t), gate: filepath.Join(t.TempDir(), "gate.lock")}
	require.NoError(t, os.WriteFile(g.gate, nil, 0o600))
	writeConfig(t, g.store, "[exec.gate]\nprogram = \"true\"\ntimeout = \"30s\"\nlock_file = "+tomlString(g.gate)+"\n", 0o600)
	return g
}

// close holds the gate and queues the gate job, and waits until the
// writer defers it: every job queued from then on waits behind it.
func (g *gatedStore) close(t *testing.T, id string) (open func()) {
	t.Helper()
	open = holdWithFlock(t, g.gate)
	r := scribe(t, "", "submit", "--store", g.store, "--id", id, "exec", "gate")
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool {
		rep, ok := report(t, g.store)
		return ok && rep.Deferred != ""
	}, 20*time.Second, 20*time.Millisecond, "the gate job is deferred")
	return open
}

// decided is a job's recorded outcome, applied or rejected, once there.
func decided(t *testing.T, store, id string) *queue.Outcome {
	t.Helper()
	var out queue.Outcome
	require.Eventually(t, func() bool {
		out = queue.Outcome{}
		r := scribe(t, "", "status", "--store", store, "--json", id)
		return (r.code == 0 || r.code == 1) && json.Unmarshal([]byte(r.stdout), &out) == nil && out.ID == id && out.Status != ""
	}, 30*time.Second, 50*time.Millisecond, "no outcome for %s", id)
	return &out
}

// cancelAnswer is what scribe cancel --json prints.
type cancelAnswer struct {
	ID      string             `json:"id"`
	Result  queue.CancelResult `json:"result"`
	State   queue.JobState     `json:"state"`
	Outcome *queue.Outcome     `json:"outcome"`
	Error   string             `json:"error"`
}

func cancelJSON(t *testing.T, store, id string) (cancelAnswer, result) {
	t.Helper()
	r := scribe(t, "", "cancel", "--store", store, "--json", id)
	var a cancelAnswer
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &a), "stdout holds only JSON: %q (stderr %s)", r.stdout, r.stderr)
	return a, r
}

// A queued job that is cancelled is recorded rejected (cancelled) and
// never applied, even after the daemon is killed and restarted; its
// submitter waiting on it hears so; cancelling it again gives the same
// answer; a job in hand, a decided one or an unknown ID is refused
// without changing anything.
func TestCancelQueuedJob(t *testing.T) {
	t.Parallel()
	g := newGatedStore(t)
	d := startDaemon(t, g.store)
	open := g.close(t, "gate-1")
	log := filepath.Join(g.store, "log.txt")

	for _, id := range []string{"keep-1", "drop-1"} {
		r := scribe(t, "", "submit", "--store", g.store, "--id", id, "append", "log.txt", id+"\n")
		require.Equal(t, 0, r.code, r.stderr)
	}
	// A submitter waiting on the job it queued.
	waiter := make(chan result, 1)
	go func() {
		r, err := scribeNoT("submit", "--store", g.store, "--wait", "--id", "drop-2", "append", "log.txt", "drop-2\n")
		if err != nil {
			r = result{code: -1, stderr: err.Error()}
		}
		waiter <- r
	}()

	r := scribe(t, "", "cancel", "--store", g.store, "drop-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "job drop-1 cancelled\n", r.stdout)

	// drop-2 may not be queued yet: until it is, cancel finds no such job.
	require.Eventually(t, func() bool {
		return scribe(t, "", "cancel", "--store", g.store, "drop-2").code == 0
	}, 20*time.Second, 50*time.Millisecond, "drop-2 cancelled once queued")
	select {
	case w := <-waiter:
		assert.Equal(t, 1, w.code, "the waiting submitter gets the rejection: %s", w.stderr)
		assert.Contains(t, w.stderr, "cancelled")
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting submitter did not hear of the cancellation")
	}

	// Twice: the same answer.
	a, r := cancelJSON(t, g.store, "drop-1")
	t.Logf("cancel --json drop-1 again: %s", r.stdout)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, queue.CancelDone, a.Result)
	require.NotNil(t, a.Outcome)
	assert.Equal(t, queue.ReasonCancelled, a.Outcome.Reason)

	// The gate job is in the writer's hand (deferred): too late.
	a, r = cancelJSON(t, g.store, "gate-1")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, queue.CancelTooLate, a.Result)
	assert.Equal(t, queue.StateInHand, a.State)
	assert.Contains(t, r.stderr, "too late to cancel job gate-1")

	// An ID never queued.
	r = scribe(t, "", "cancel", "--store", g.store, "never-queued")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no such job")

	// The queue lists the gate and keep-1 alone: the cancelled jobs are
	// decided, though they stay in the queue until the writer reaches them.
	r = scribe(t, "", "jobs", "--store", g.store, "--state", "queued", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var list struct {
		Queued      []queue.QueuedJob `json:"queued"`
		QueuedTotal uint64            `json:"queued_total"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	var listed []string
	for _, j := range list.Queued {
		listed = append(listed, j.ID)
	}
	assert.Equal(t, []string{"gate-1", "keep-1"}, listed)
	assert.EqualValues(t, 2, list.QueuedTotal)

	// The cancellation was recorded before the answer: a daemon killed
	// now and started again still never applies the job.
	d.kill(t)
	startDaemon(t, g.store)
	open()
	assert.Equal(t, queue.StatusApplied, decided(t, g.store, "keep-1").Status)
	assert.Equal(t, queue.StatusApplied, decided(t, g.store, "gate-1").Status)
	for _, id := range []string{"drop-1", "drop-2"} {
		o := decided(t, g.store, id)
		assert.Equal(t, queue.StatusRejected, o.Status, id)
		assert.Equal(t, queue.ReasonCancelled, o.Reason, id)
	}
	require.Eventually(t, func() bool {
		rep, ok := report(t, g.store)
		return ok && rep.Queued == 0 && rep.InFlight == 0
	}, 20*time.Second, 20*time.Millisecond, "the queue is drained")
	assert.Equal(t, "keep-1\n", readFile(t, log), "the cancelled jobs were never applied")

	// Too late for an applied job: nothing changes.
	a, r = cancelJSON(t, g.store, "keep-1")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, queue.CancelTooLate, a.Result)
	assert.Equal(t, queue.StateApplied, a.State)
	require.NotNil(t, a.Outcome)
	assert.Equal(t, queue.StatusApplied, a.Outcome.Status)
	r = scribe(t, "", "cancel", "--store", g.store, "keep-1")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "too late to cancel job keep-1: it was already applied")
	assert.Equal(t, queue.StatusApplied, decided(t, g.store, "keep-1").Status)
	assert.Equal(t, "keep-1\n", readFile(t, log))
}

// Cancel needs a daemon (exit 69) and a valid job ID (exit 2).
func TestCancelRefused(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	r := scribe(t, "", "cancel", "--store", store, "job-1")
	assert.Equal(t, 69, r.code, r.stderr)
	assert.Contains(t, r.stderr, "no daemon")
	a, r := cancelJSON(t, store, "job-1")
	assert.Equal(t, 69, r.code)
	assert.NotEmpty(t, a.Error)
	r = scribe(t, "", "cancel", "--store", store, "not/valid")
	assert.Equal(t, 2, r.code, r.stderr)
	r = scribe(t, "", "cancel", "--store", store)
	assert.Equal(t, 2, r.code, r.stderr)
	assert.NoDirExists(t, filepath.Join(store, ".scribe", "jetstream"), "nothing was started or changed")
}

// On a NATS cluster, the store's submitter may cancel through the remote
// queue (its permissions grant the cancel subject), and the writer, which
// holds the store's claim, answers. A high job overtakes the queue there
// too, queued by a submitter whose permissions lack the high jobs
// subject as well (on the normal one). Not parallel, as the other
// cluster tests: the nodes bind ports chosen free beforehand.
func TestCancelOnCluster(t *testing.T) {
	store := newStore(t)
	e := startScribeCluster(t, store)
	gate := filepath.Join(t.TempDir(), "gate.lock")
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	writeConfig(t, e.store, "[exec.gate]\nprogram = \"true\"\ntimeout = \"30s\"\nlock_file = "+tomlString(gate)+"\n", 0o600)
	e.startWriter(t, e.c.URLs[0])

	env := []string{"SCRIBE_NATS_PASSWORD=" + natsSubmitPass(e.id)}
	remoteAs := func(user string, args ...string) result {
		t.Helper()
		return runWith(t, scribeBin, env, nil, append([]string{args[0], "--nats-url", e.c.URLs[1], "--user", user, "--store-id", e.id}, args[1:]...)...)
	}
	remote := func(args ...string) result {
		t.Helper()
		return remoteAs(natsSubmitUser(e.id), args...)
	}
	outcome := func(id string) *queue.Outcome {
		t.Helper()
		var o queue.Outcome
		require.Eventually(t, func() bool {
			o = queue.Outcome{}
			r := remote("status", "--json", id)
			return json.Unmarshal([]byte(r.stdout), &o) == nil && o.ID == id && o.Status != ""
		}, 30*time.Second, 50*time.Millisecond, "no outcome for %s", id)
		return &o
	}
	open := holdWithFlock(t, gate)
	r := remote("submit", "--id", "gate-1", "exec", "gate")
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool {
		var rep queue.StatusReport
		r := remote("status", "--json")
		return json.Unmarshal([]byte(r.stdout), &rep) == nil && rep.Deferred != ""
	}, 20*time.Second, 20*time.Millisecond, "the gate job is deferred")

	for _, id := range []string{"drop-1", "keep-1"} {
		r = remote("submit", "--id", id, "append", "log.txt", id+"\n")
		require.Equal(t, 0, r.code, r.stderr)
	}
	r = remote("cancel", "drop-1")
	require.Equal(t, 0, r.code, r.stderr)
	r = remote("cancel", "never-queued")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no such job")

	r = remote("submit", "--priority", "high", "--id", "high-1", "append", "log.txt", "high-1\n")
	require.Equal(t, 0, r.code, r.stderr)
	r = remoteAs("older-"+natsSubmitUser(e.id), "submit", "--priority", "high", "--id", "high-2", "append", "log.txt", "high-2\n")
	require.Equal(t, 0, r.code, r.stderr)

	open()
	assert.Equal(t, queue.StatusApplied, outcome("keep-1").Status)
	assert.Equal(t, queue.ReasonCancelled, outcome("drop-1").Reason)
	r = remote("cancel", "keep-1")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "too late")
	lines := strings.Fields(readFile(t, filepath.Join(e.store, "log.txt")))
	require.Len(t, lines, 3)
	assert.ElementsMatch(t, []string{"high-1", "high-2"}, lines[:2], "the high jobs first")
	assert.Equal(t, "keep-1", lines[2])
}

// While an exec job's command runs, nothing can be recorded: a cancel is
// answered at once, busy (exit 75) for a queued job, too late (exit 1)
// for the running one, and nothing of it is carried out once the command
// ends: the job it named applies.
func TestCancelDuringARunIsAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	out := t.TempDir()
	started, goFile := filepath.Join(out, "started"), filepath.Join(out, "go")
	writeConfig(t, store, shCommand("hold", `: > "$STARTED"; while [ ! -e "$GO" ]; do sleep 0.01; done`, "STARTED", started, "GO", goFile), 0o600)
	startDaemon(t, store)
	r := scribe(t, "", "submit", "--store", store, "--id", "hold-1", "exec", "hold")
	require.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "", "submit", "--store", store, "--id", "q", "append", "log.txt", "q\n")
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, 20*time.Second, 10*time.Millisecond, "the command runs")

	r = scribe(t, "", "cancel", "--store", store, "q")
	require.Equal(t, 75, r.code, "%s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stderr, "the store's turn is a command's (job hold-1: command hold")
	assert.Less(t, r.duration, 10*time.Second, "answered at once, not at cancel's 30 s timeout")
	a, r := cancelJSON(t, store, "hold-1")
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Equal(t, queue.CancelTooLate, a.Result)
	assert.Equal(t, queue.StateInHand, a.State)
	require.NoError(t, os.WriteFile(goFile, nil, 0o644))

	o := decided(t, store, "q")
	assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s", o.Reason, o.Detail)
	assert.Equal(t, "q\n", readFile(t, filepath.Join(store, "log.txt")))
	a, r = cancelJSON(t, store, "q")
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Equal(t, queue.CancelTooLate, a.Result)
}

// After the daemon is SIGKILLed, the queue delivers again the jobs
// decided before (here one cancelled, behind a deferred exec job, so the
// writer does not meet it again for now): `scribe jobs` and `scribe
// status` do not count them as queued.
func TestJobsAfterRestartLeaveDecidedOut(t *testing.T) {
	t.Parallel()
	g := newGatedStore(t)
	d := startDaemon(t, g.store)
	open := g.close(t, "gate-1")
	defer open()
	for _, id := range []string{"q1", "q2", "q3"} {
		r := scribe(t, "", "submit", "--store", g.store, "--id", id, "append", "log.txt", id+"\n")
		require.Equal(t, 0, r.code, r.stderr)
	}
	r := scribe(t, "", "cancel", "--store", g.store, "q2")
	require.Equal(t, 0, r.code, r.stderr)
	d.kill(t)
	// The sweep for decided jobs held back a while: the first report
	// waits for it rather than counting q2.
	startDaemonEnv(t, g.store, []string{"SCRIBE_PAUSE_AT=sweep:500ms"})
	rep, ok := report(t, g.store)
	require.True(t, ok)
	assert.Equal(t, uint64(3), rep.Queued, "the first report after the start counts 3 jobs queued, before any listing")
	require.Eventually(t, func() bool {
		rep, ok := report(t, g.store)
		return ok && rep.Deferred != ""
	}, 20*time.Second, 20*time.Millisecond, "the gate job is deferred again")
	r = scribe(t, "", "status", "--store", g.store, "gate-1")
	assert.Contains(t, r.stdout+r.stderr, "of 3")

	r = scribe(t, "", "jobs", "--store", g.store, "--json", "--state", "queued")
	require.Equal(t, 0, r.code, r.stderr)
	var list queue.JobList
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	var ids []string
	for _, j := range list.Queued {
		ids = append(ids, fmt.Sprintf("%s@%d", j.ID, j.Position))
	}
	assert.Equal(t, []string{"gate-1@1", "q1@2", "q3@3"}, ids)
	assert.Equal(t, uint64(3), list.QueuedTotal)
	r = scribe(t, "", "status", "--store", g.store, "q3")
	assert.Contains(t, r.stdout+r.stderr, "queued (position 3 of 3)")
}

// An exec job's command that cancels its own job, or one queued behind
// it, hears at once (too late; busy) rather than waiting for the run it
// is part of to end: it finishes, and its job is applied.
func TestCancelFromTheRunningCommand(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	out := t.TempDir()
	script := `"$SCRIBE" cancel --store "$SCRIBE_STORE" "$SCRIBE_JOB_ID" > "$OUT/own.out" 2>&1; echo $? > "$OUT/own.code"
"$SCRIBE" cancel --store "$SCRIBE_STORE" behind > "$OUT/behind.out" 2>&1; echo $? > "$OUT/behind.code"`
	writeConfig(t, store, shCommand("self", script, "SCRIBE", scribeBin, "OUT", out), 0o600)
	startDaemon(t, store)
	r := scribe(t, "", "submit", "--store", store, "--id", "self-1", "exec", "self")
	require.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "", "submit", "--store", store, "--id", "behind", "append", "log.txt", "behind\n")
	require.Equal(t, 0, r.code, r.stderr)

	o := decided(t, store, "self-1")
	assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s", o.Reason, o.Detail)
	assert.Equal(t, "1\n", readFile(t, filepath.Join(out, "own.code")), readFile(t, filepath.Join(out, "own.out")))
	assert.Contains(t, readFile(t, filepath.Join(out, "own.out")), "too late")
	assert.Equal(t, "75\n", readFile(t, filepath.Join(out, "behind.code")), readFile(t, filepath.Join(out, "behind.out")))
	require.NotNil(t, o.Exec)
	assert.Less(t, o.Exec.DurationMS, int64(20000), "the command did not wait for its cancels")
	assert.Equal(t, queue.StatusApplied, decided(t, store, "behind").Status)
}

// shCommand is an [exec.NAME] table that runs script with sh -c, for at
// most 60 s, with the environment of env's name and value pairs.
func shCommand(name, script string, env ...string) string {
	vars := make([]string, 0, len(env)/2)
	for i := 0; i+1 < len(env); i += 2 {
		vars = append(vars, env[i]+" = "+tomlString(env[i+1]))
	}
	return fmt.Sprintf("[exec.%s]\nprogram = \"/bin/sh\"\nargs = [\"-c\", %s]\ntimeout = \"60s\"\nenv = { %s }\n", name, tomlString(script), strings.Join(vars, ", "))
}
