package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/daemon"
	"github.com/scribehq/scribe/writer/exec"
)

// shCommand is an allowlisted command that runs a shell script; the job's
// arguments are the script's $1, $2…
func shCommand(name, script string) exec.Command {
	return exec.Command{Name: name, Program: "/bin/sh", Args: []string{"-c", script, name}, AllowArgs: []string{".*"}, Timeout: 10 * time.Second}
}

// execJob is the wire form of an exec job.
func execJob(t *testing.T, storeID, id, name, coalesce string, args ...string) []byte {
	t.Helper()
	b, err := json.Marshal(&queue.Job{V: queue.Version, ID: id, Store: storeID, Coalesce: coalesce,
		Ops: []queue.Op{{Kind: queue.OpExec, Name: name, Args: args}}})
	require.NoError(t, err)
	return b
}

// startExecWriter starts a writer on a fresh store with the given commands.
func startExecWriter(t *testing.T, cmds ...exec.Command) (*daemon.Writer, jetstream.JetStream, string, string) {
	t.Helper()
	nc, js := startJetStream(t)
	store, id := writerStore(t)
	w := startWriter(t, store, nc, func(c *daemon.WriterConfig) { c.Commands = cmds })
	return w, js, store, id
}

// TestExecRuns: an allowlisted command runs in the store with the job's
// arguments as argv (no shell between: a quote or $ in an argument
// reaches it as is), with its environment, and its outcome carries its
// exit code and output; the rest of the bad cases are rejected with
// nothing run.
func TestExecRuns(t *testing.T) {
	w, js, store, id := startExecWriter(t,
		shCommand("note", `printf '%s|%s|%s|%s|%s\n' "$1" "$SCRIBE_JOB_ID" "$SCRIBE_EPOCH" "$SCRIBE_STORE" "$(pwd)" >> ran.txt; echo out; echo err >&2`),
		shCommand("fail", `echo first >&2; echo "it broke" >&2; exit 3`),
		exec.Command{Name: "strict", Program: "/bin/sh", Args: []string{"-c", "true"}, AllowArgs: []string{"--wing=[a-z]+"}, Timeout: time.Second},
	)
	publishJob(t, js, id, "j1", execJob(t, id, "j1", "note", "", `a 'b' $HOME;`))
	o := outcomeOf(t, w, "j1")
	require.True(t, o.Applied(), "%+v", o)
	require.NotNil(t, o.Exec)
	assert.Equal(t, 0, o.Exec.ExitCode)
	assert.Equal(t, "out\n", o.Exec.Stdout)
	assert.Equal(t, "err\n", o.Exec.Stderr)
	b, err := os.ReadFile(filepath.Join(store, "ran.txt"))
	require.NoError(t, err)
	assert.Equal(t, `a 'b' $HOME;|j1|`+strconv.FormatUint(o.Epoch, 10)+"|"+store+"|"+store+"\n", string(b))

	publishJob(t, js, id, "j2", execJob(t, id, "j2", "fail", ""))
	o = outcomeOf(t, w, "j2")
	assert.Equal(t, queue.ReasonExecFailed, o.Reason)
	assert.Contains(t, o.Detail, "exited 3: it broke")
	assert.Equal(t, 3, o.Exec.ExitCode)

	for _, tt := range []struct {
		id, name string
		args     []string
		reason   queue.Reason
	}{
		{"j3", "rm", nil, queue.ReasonNotAllowed},
		{"j4", "strict", []string{"--wing=abc", "--wing=ABC"}, queue.ReasonNotAllowed},
		{"j5", "strict", []string{"--wing=abc"}, ""},
	} {
		publishJob(t, js, id, tt.id, execJob(t, id, tt.id, tt.name, "", tt.args...))
		o := outcomeOf(t, w, tt.id)
		assert.Equal(t, tt.reason, o.Reason, tt.id)
		if tt.reason != "" {
			assert.Nil(t, o.Exec, "%s ran", tt.id)
		}
	}
}

// TestExecTimeoutKillsTheGroup: a command that overruns its timeout is
// stopped with everything it started, even what ignores SIGTERM.
func TestExecTimeoutKillsTheGroup(t *testing.T) {
	cmd := shCommand("slow", `trap '' TERM; sleep 30 & echo $! > child.pid; wait`)
	cmd.Timeout, cmd.Grace = 300*time.Millisecond, 200*time.Millisecond
	w, js, store, id := startExecWriter(t, cmd)
	publishJob(t, js, id, "s1", execJob(t, id, "s1", "slow", ""))
	o := outcomeOf(t, w, "s1")
	assert.Equal(t, queue.ReasonTimeout, o.Reason)
	b, err := os.ReadFile(filepath.Join(store, "child.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 5*time.Second, 10*time.Millisecond, "the command's child %d outlived it", pid)
}

// TestExecOutputIsCapped: output past the cap is cut from the middle; the
// start and the end are kept.
func TestExecOutputIsCapped(t *testing.T) {
	cmd := shCommand("loud", `echo START; i=0; while [ $i -lt 20000 ]; do echo 0123456789abcdef; i=$((i+1)); done; echo END`)
	cmd.MaxOutput = 1000
	w, js, _, id := startExecWriter(t, cmd)
	publishJob(t, js, id, "l1", execJob(t, id, "l1", "loud", ""))
	o := outcomeOf(t, w, "l1")
	require.True(t, o.Applied())
	assert.Len(t, o.Exec.Stdout, 1000)
	assert.True(t, strings.HasPrefix(o.Exec.Stdout, "START\n"))
	assert.True(t, strings.HasSuffix(o.Exec.Stdout, "END\n"))
	assert.EqualValues(t, 6+20000*17+4-1000, o.Exec.StdoutCut)
}

// TestExecDefersWhileBusy: a command whose own lock is held, or that exits
// with a busy code, is deferred (the status report says why), never
// rejected for it, and runs once free.
func TestExecDefersWhileBusy(t *testing.T) {
	toolLock := filepath.Join(t.TempDir(), "tool.lock")
	probed := shCommand("probed", `echo ran >> probed.txt`)
	probed.LockFile = toolLock
	busy := shCommand("busy", `if [ -e "$SCRIBE_STORE/busy" ]; then exit 75; fi; echo ran >> busy.txt`)
	busy.BusyExitCodes = []int{75}
	w, js, store, id := startExecWriter(t, probed, busy)

	// The tool's lock, held by this process: the probe must see it
	// without taking it.
	f, err := os.Create(toolLock)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	publishJob(t, js, id, "p1", execJob(t, id, "p1", "probed", ""))
	require.Eventually(t, func() bool {
		return strings.Contains(w.Report(t.Context()).Deferred, "tool.lock is held by pid "+strconv.Itoa(os.Getpid()))
	}, 5*time.Second, 10*time.Millisecond)
	assert.False(t, w.Lookup("p1").Found)
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	assert.True(t, outcomeOf(t, w, "p1").Applied())
	assert.FileExists(t, filepath.Join(store, "probed.txt"))

	require.NoError(t, os.WriteFile(filepath.Join(store, "busy"), nil, 0o644))
	publishJob(t, js, id, "b1", execJob(t, id, "b1", "busy", ""))
	require.Eventually(t, func() bool {
		return strings.Contains(w.Report(t.Context()).Deferred, "exited 75, one of its busy exit codes")
	}, 5*time.Second, 10*time.Millisecond)
	assert.False(t, w.Lookup("b1").Found)
	require.NoError(t, os.Remove(filepath.Join(store, "busy")))
	assert.True(t, outcomeOf(t, w, "b1").Applied())
	b, err := os.ReadFile(filepath.Join(store, "busy.txt"))
	require.NoError(t, err)
	assert.Equal(t, "ran\n", string(b))
	assert.Empty(t, w.Report(t.Context()).Deferred)
}

// TestExecCoalesces: jobs with one coalescing key queued behind a running
// command join the first of them when they ask for the same run: one run,
// every job an outcome. A job of that key with other arguments runs on its
// own, and one that would be rejected alone is rejected, in its turn.
func TestExecCoalesces(t *testing.T) {
	gate := shCommand("gate", `while [ ! -e "$SCRIBE_STORE/open" ]; do sleep 0.01; done`)
	mine := shCommand("mine", `echo "run $*" >> mine.txt`)
	w, js, store, id := startExecWriter(t, gate, mine)
	publishJob(t, js, id, "g", execJob(t, id, "g", "gate", ""))
	const n = 30
	for i := range n {
		jid := "m" + strconv.Itoa(i)
		publishJob(t, js, id, jid, execJob(t, id, jid, "mine", "K"))
		if i == n/2 {
			publishJob(t, js, id, "args", execJob(t, id, "args", "mine", "K", "x"))
			b, err := json.Marshal(&queue.Job{V: queue.Version, ID: "dir", Store: id, Coalesce: "K",
				Ops: []queue.Op{{Kind: queue.OpExec, Name: "mine", Dir: "nowhere"}}})
			require.NoError(t, err)
			publishJob(t, js, id, "dir", b)
		}
	}
	publishJob(t, js, id, "other", execJob(t, id, "other", "mine", "L"))
	require.NoError(t, os.WriteFile(filepath.Join(store, "open"), nil, 0o644))
	first := outcomeOf(t, w, "m0")
	require.True(t, first.Applied())
	assert.Empty(t, first.CoalescedInto)
	for i := 1; i < n; i++ {
		o := outcomeOf(t, w, "m"+strconv.Itoa(i))
		assert.True(t, o.Applied())
		assert.Equal(t, "m0", o.CoalescedInto)
	}
	args := outcomeOf(t, w, "args")
	assert.True(t, args.Applied(), "%+v", args)
	assert.Empty(t, args.CoalescedInto, "other arguments: a run of its own")
	dir := outcomeOf(t, w, "dir")
	assert.Equal(t, queue.ReasonBadInput, dir.Reason, "rejected as it would be alone: %+v", dir)
	assert.Empty(t, dir.CoalescedInto)
	assert.Empty(t, outcomeOf(t, w, "other").CoalescedInto, "another key does not join")
	b, err := os.ReadFile(filepath.Join(store, "mine.txt"))
	require.NoError(t, err)
	assert.Equal(t, "run \nrun x\nrun \n", string(b), "one run for key K, one for its job with other arguments, one for L")
}

// TestExecChildJoinsTheHold: a command is handed the store lock; a scribe
// session it opens (here: this test binary, as a child) joins the hold and
// can write, while the journal the daemon keeps is closed for it.
func TestExecChildJoinsTheHold(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command{Name: "child", Program: exe, Args: []string{"-test.run=^TestExecChildHelper$"}, Timeout: 20 * time.Second,
		Env: []string{"TEST_EXEC_CHILD=1"}}
	w, js, store, id := startExecWriter(t, cmd)
	publishJob(t, js, id, "c1", execJob(t, id, "c1", "child", ""))
	o := outcomeOf(t, w, "c1")
	require.True(t, o.Applied(), "%+v %+v", o, o.Exec)
	b, err := os.ReadFile(filepath.Join(store, "child.txt"))
	require.NoError(t, err)
	assert.Equal(t, "from the child\n", string(b))
	l := w.Lookup("child-write")
	require.True(t, l.Found)
	assert.Equal(t, o.Epoch, l.Outcome.Epoch, "the child wrote under the daemon's hold")
}

// TestExecChildHelper is the child of TestExecChildJoinsTheHold.
func TestExecChildHelper(t *testing.T) {
	if os.Getenv("TEST_EXEC_CHILD") == "" {
		t.Skip("run by TestExecChildJoinsTheHold")
	}
	store := os.Getenv("SCRIBE_STORE")
	s, err := writer.Open(context.Background(), store, writer.Options{})
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Apply([]writer.Entry{{Job: &queue.Job{V: queue.Version, ID: "child-write", Store: queue.StoreID(store),
		Ops: []queue.Op{{Kind: queue.OpAppend, Path: "child.txt", Data: []byte("from the child\n")}}}}})
	require.NoError(t, err)
	require.True(t, res[0].Outcome.Applied())
}

// TestExecSpoolFaultDefers: when the daemon cannot make the files its
// command's output goes to (out of descriptors), nothing runs and nothing
// is recorded: the job is retried after the fault, which the status
// report shows, and then runs once.
func TestExecSpoolFaultDefers(t *testing.T) {
	restore := failSpools(6, unix.EMFILE)
	defer restore()
	w, js, store, id := startExecWriter(t, shCommand("note", `echo ran >> ran.txt`))
	publishJob(t, js, id, "n1", execJob(t, id, "n1", "note", ""))
	require.Eventually(t, func() bool {
		return strings.Contains(w.Report(t.Context()).Fault, "too many open files")
	}, 5*time.Second, 5*time.Millisecond, "the fault is shown")
	assert.False(t, w.Lookup("n1").Found, "not decided while the fault lasts")
	o := outcomeOf(t, w, "n1")
	assert.True(t, o.Applied(), "%+v", o)
	b, err := os.ReadFile(filepath.Join(store, "ran.txt"))
	require.NoError(t, err)
	assert.Equal(t, "ran\n", string(b), "ran once")
	assert.Eventually(t, func() bool { return w.Report(t.Context()).Fault == "" }, 5*time.Second, 5*time.Millisecond, "the fault clears")
}
