package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// Exec jobs. The commands are tests/testdata/mine.py, a
// stand-in for a tool's "mine": it takes a lock of its own with a
// non-blocking flock and exits 75 ("already running") when that lock is
// held, like the tools scribe was made for, and appends lines to a log
// the tests read (see the script's doc string). The daemon gets its
// allowlist from the store's config file, written mode 0600.

// pythonExe is the python3 interpreter's own path (not a wrapper such as
// a pyenv shim, which needs its environment), found once.
var pythonExe = sync.OnceValues(func() (string, error) {
	p, err := exec.LookPath("python3")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return strings.TrimSpace(string(out)), nil
})

// mineEnv is a store whose daemon may run the mine, and the mine's files.
type mineEnv struct {
	store    string // the store's real path
	python   string // the interpreter, absolute
	script   string // testdata/mine.py, absolute
	toolLock string // the tool's own lock, outside the store
	log      string // the mine's log, in the store
	out      string // a folder outside the store for what commands record
}

// newMine makes a store and the mine's paths. python3 is required (CI
// installs it).
func newMine(t *testing.T) *mineEnv {
	t.Helper()
	python, err := pythonExe()
	require.NoError(t, err, "python3 is needed")
	real, err := filepath.EvalSymlinks(newStore(t))
	require.NoError(t, err)
	script, err := filepath.Abs(filepath.Join("testdata", "mine.py"))
	require.NoError(t, err)
	out := t.TempDir()
	m := &mineEnv{store: real, python: python, script: script, toolLock: filepath.Join(out, "tool.lock"),
		log: filepath.Join(real, "mine.log"), out: out}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mine.log:\n%s", readFile(t, m.log))
		}
	})
	return m
}

// command is an [exec.NAME] table that runs the mine with its lock and
// log, then args, plus keys (TOML lines such as `timeout = "10s"`).
func (m *mineEnv) command(name string, args []string, keys ...string) string {
	all := append([]string{m.script, "--lock", m.toolLock, "--log", m.log}, args...)
	return fmt.Sprintf("[exec.%s]\nprogram = %s\nargs = %s\n%s\n", name, tomlString(m.python), tomlStrings(all), strings.Join(keys, "\n"))
}

// serve writes the store's config file (mode 0600) from tables and starts
// the daemon, which reads it.
func (m *mineEnv) serve(t *testing.T, tables ...string) *daemon {
	t.Helper()
	writeConfig(t, m.store, strings.Join(tables, "\n"), 0o600)
	return startDaemon(t, m.store)
}

func tomlString(s string) string { return strconv.Quote(s) } // the same as TOML's basic string for the paths used here

func tomlStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = tomlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// mineLine is a line of the mine's log: KIND JOB EPOCH NS PID [MORE...].
type mineLine struct {
	kind, job, epoch string
	ns               int64
	pid              int
	more             []string
}

// lines returns the mine's log lines of kind ("" for all), in order.
func (m *mineEnv) lines(t testing.TB, kind string) []mineLine {
	t.Helper()
	var ls []mineLine
	sc := bufio.NewScanner(strings.NewReader(readFile(t, m.log)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		require.GreaterOrEqual(t, len(f), 5, "torn line %q", sc.Text())
		ns, err := strconv.ParseInt(f[3], 10, 64)
		require.NoError(t, err, sc.Text())
		pid, err := strconv.Atoi(f[4])
		require.NoError(t, err, sc.Text())
		if kind == "" || f[0] == kind {
			ls = append(ls, mineLine{kind: f[0], job: f[1], epoch: f[2], ns: ns, pid: pid, more: f[5:]})
		}
	}
	return ls
}

// jobs is the job of each line.
func jobs(ls []mineLine) []string {
	var ids []string
	for _, l := range ls {
		ids = append(ids, l.job)
	}
	return ids
}

// submitWait runs `scribe submit --wait --json ARGS` and decodes the
// outcome it prints (also for a rejected job, exit 1).
func submitWait(t testing.TB, store string, args ...string) (result, *queue.Outcome) {
	t.Helper()
	r := scribe(t, "", append([]string{"submit", "--store", store, "--wait=60s", "--json"}, args...)...)
	var o queue.Outcome
	if r.code > 1 || json.Unmarshal([]byte(r.stdout), &o) != nil {
		return r, nil
	}
	return r, &o
}

// report is the daemon's status report, `scribe status --json`.
func report(t testing.TB, store string) (queue.StatusReport, bool) {
	t.Helper()
	var rep queue.StatusReport
	r := scribe(t, "", "status", "--store", store, "--json")
	return rep, r.code == 0 && json.Unmarshal([]byte(r.stdout), &rep) == nil
}

// scribeNoT runs the binary without a testing.TB, for goroutines.
func scribeNoT(args ...string) (result, error) {
	return runProcess(scribeBin, nil, nil, args...)
}

// processGone reports whether pid has exited (is gone, or a zombie).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

// peakRSS is the peak resident set of pid (VmHWM), in bytes.
func peakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^VmHWM:\s+(\d+) kB$`).FindStringSubmatch(readFile(t, fmt.Sprintf("/proc/%d/status", pid)))
	require.NotNil(t, m, "no VmHWM for pid %d", pid)
	kb, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	return kb << 10
}

// Two mines queued back to back both run, one after the other, in queue
// order, where run directly the second would have found the first's lock
// held and given up. Each sees its job ID and the epoch its outcome
// records. submit --wait passes the command's output on; a command that
// fails is rejected exec_failed with its exit code and output.
func TestExecMinesQueuedBackToBackRunInTurn(t *testing.T) {
	t.Parallel()
	m := newMine(t)

	// The premise: run directly while its lock is held, the mine refuses.
	release := holdWithFlock(t, m.toolLock)
	premise := filepath.Join(m.out, "premise.log")
	r := runProgram(t, m.python, "", m.script, "--lock", m.toolLock, "--log", premise)
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, "already running")
	assert.Contains(t, readFile(t, premise), "busy ")
	release()

	m.serve(t,
		m.command("mine", []string{"--sleep", "0.3"}, `allow_args = ["--wing=[a-z]+", "--full"]`, `timeout = "30s"`),
		m.command("hello", []string{"--say", "hello"}, `timeout = "30s"`),
		m.command("failing", []string{"--say", "oops", "--exit", "3"}, `timeout = "30s"`))

	ids, wings := []string{"mine-a", "mine-b"}, []string{"north", "south"}
	for i, id := range ids {
		r := scribe(t, "", "submit", "--store", m.store, "--id", id, "exec", "mine", "--wing="+wings[i], "--full")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, id+"\n", r.stdout, "queued: submit prints the ID")
	}
	epochs := map[string]string{}
	for _, id := range ids {
		o := outcomeOf(t, m.store, id)
		assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s: %s", id, o.Reason, o.Detail)
		assert.Equal(t, queue.ModeDaemon, o.Mode)
		assert.Empty(t, o.CoalescedInto)
		if assert.NotNil(t, o.Exec, "%s: the run is in the outcome", id) {
			assert.Equal(t, "mine", o.Exec.Command)
			assert.Equal(t, 0, o.Exec.ExitCode)
			assert.Empty(t, o.Exec.Signal)
			assert.GreaterOrEqual(t, o.Exec.DurationMS, int64(300), "the mine works 300 ms")
			assert.WithinDuration(t, time.Now(), o.Exec.Started, time.Minute)
		}
		epochs[id] = strconv.FormatUint(o.Epoch, 10)
	}

	assert.Empty(t, m.lines(t, "busy"), "no run found the tool's lock held")
	var seq []string
	for _, l := range m.lines(t, "") {
		if l.kind == "start" || l.kind == "end" {
			seq = append(seq, l.kind+" "+l.job)
		}
	}
	require.Equal(t, []string{"start mine-a", "end mine-a", "start mine-b", "end mine-b"}, seq, "one after the other, in queue order")
	starts, ends := m.lines(t, "start"), m.lines(t, "end")
	assert.LessOrEqual(t, ends[0].ns, starts[1].ns, "the second started after the first had ended")
	for i, id := range ids {
		assert.Equal(t, []string{"wing=" + wings[i]}, starts[i].more, "%s got its own arguments", id)
		assert.Equal(t, epochs[id], starts[i].epoch, "%s: SCRIBE_EPOCH is its outcome's epoch", id)
	}

	t.Run("submit --wait passes the output on", func(t *testing.T) {
		r := scribe(t, "", "submit", "--store", m.store, "--wait=60s", "exec", "hello")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "out: hello\n")
		assert.Contains(t, r.stderr, "err: hello\n")
		assert.NotContains(t, r.stdout, "err: hello")
	})

	t.Run("a failing command is rejected exec_failed", func(t *testing.T) {
		r := scribe(t, "", "submit", "--store", m.store, "--wait=60s", "exec", "failing")
		assert.Equal(t, 1, r.code, r.stderr)
		assert.Contains(t, r.stderr, "exec_failed")
		assert.Contains(t, r.stdout, "out: oops\n")
		assert.Contains(t, r.stderr, "err: oops\n")

		r, o := submitWait(t, m.store, "--id", "failing-json", "exec", "failing")
		assert.Equal(t, 1, r.code, r.stderr)
		require.NotNil(t, o, "an outcome as JSON: %s", r.stdout)
		assert.Equal(t, queue.StatusRejected, o.Status)
		assert.Equal(t, queue.ReasonExecFailed, o.Reason)
		if assert.NotNil(t, o.Exec) {
			assert.Equal(t, 3, o.Exec.ExitCode)
			assert.Equal(t, "out: oops\n", o.Exec.Stdout)
			assert.Equal(t, "err: oops\n", o.Exec.Stderr)
			assert.Zero(t, o.Exec.StdoutCut)
		}
	})
}

// While an outside process holds the tool's own lock (lock_file), the job
// is deferred: not started, not rejected, status says why; the store lock
// is let go meanwhile, so a direct writer gets in; the job behind it
// waits. Once the lock is free the mine runs, then the job behind it.
func TestExecDeferredWhileToolLockHeld(t *testing.T) {
	t.Parallel()
	m := newMine(t)
	m.serve(t, m.command("mine", nil, `timeout = "30s"`, "lock_file = "+tomlString(m.toolLock)))

	release := holdWithFlock(t, m.toolLock)
	r := scribe(t, "", "submit", "--store", m.store, "--id", "deferred-1", "exec", "mine")
	require.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "", "submit", "--store", m.store, "--id", "behind-1", "append", "behind.txt", "after the mine\n")
	require.Equal(t, 0, r.code, r.stderr)

	var rep queue.StatusReport
	require.Eventually(t, func() bool {
		var ok bool
		rep, ok = report(t, m.store)
		return ok && rep.Deferred != ""
	}, 20*time.Second, 20*time.Millisecond, "status shows the job deferred")
	t.Logf("deferred: %s", rep.Deferred)
	assert.Contains(t, rep.Deferred, m.toolLock, "status says which lock it waits for")
	assert.Regexp(t, `(?m)^deferred: \S`, scribe(t, "", "status", "--store", m.store).stdout)

	// The store lock is not kept while the job waits: a direct writer gets in.
	r = scribe(t, "", "submit", "--store", m.store, "--route", "direct", "--wait=10s", "append", "direct.txt", "direct\n")
	assert.Equal(t, 0, r.code, "a direct writer gets the store while the job is deferred: %s", r.stderr)
	assert.Equal(t, "direct\n", readFile(t, filepath.Join(m.store, "direct.txt")))

	rep, _ = report(t, m.store)
	assert.NotEmpty(t, rep.Deferred, "still deferred")
	st := scribe(t, "", "status", "--store", m.store, "deferred-1")
	assert.Equal(t, 1, st.code, "deferred, not decided: %s", st.stdout)
	assert.Empty(t, m.lines(t, ""), "the mine was not started while its lock was held")
	assert.NoFileExists(t, filepath.Join(m.store, "behind.txt"), "the job behind the deferred one waits")

	release()
	o := outcomeOf(t, m.store, "deferred-1")
	assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s", o.Reason, o.Detail)
	behind := outcomeOf(t, m.store, "behind-1")
	assert.Equal(t, queue.StatusApplied, behind.Status)
	ends := m.lines(t, "end")
	require.Len(t, ends, 1, "ran once")
	assert.Empty(t, m.lines(t, "busy"))
	assert.False(t, behind.At.Before(time.Unix(0, ends[0].ns)), "the job behind was applied after the mine ran")
	assert.Equal(t, "after the mine\n", readFile(t, filepath.Join(m.store, "behind.txt")))
	require.Eventually(t, func() bool {
		rep, ok := report(t, m.store)
		return ok && rep.Deferred == ""
	}, 10*time.Second, 20*time.Millisecond, "no longer deferred")
}

// Without lock_file, the mine finds its lock held itself and exits 75, a
// busy exit code: the job is deferred and retried with a growing backoff,
// those attempts do not count against it (more than the three deaths that
// reject a job), the job behind it waits, and once the lock is free the
// mine runs and the job is applied.
func TestExecDeferredOnBusyExitCode(t *testing.T) {
	t.Parallel()
	m := newMine(t)
	m.serve(t, m.command("mine", nil, `timeout = "30s"`, "busy_exit_codes = [75]"))

	release := holdWithFlock(t, m.toolLock)
	r := scribe(t, "", "submit", "--store", m.store, "--id", "busy-1", "exec", "mine")
	require.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "", "submit", "--store", m.store, "--id", "behind-1", "append", "behind.txt", "after the mine\n")
	require.Equal(t, 0, r.code, r.stderr)

	require.Eventually(t, func() bool { return len(m.lines(t, "busy")) >= 4 }, 30*time.Second, 20*time.Millisecond,
		"the mine is tried again while its lock is held")
	var rep queue.StatusReport
	require.Eventually(t, func() bool {
		var ok bool
		rep, ok = report(t, m.store)
		return ok && rep.Deferred != ""
	}, 20*time.Second, 10*time.Millisecond, "status shows the job deferred")
	t.Logf("deferred: %s", rep.Deferred)
	assert.Contains(t, rep.Deferred, "75", "status says the command exited busy")
	st := scribe(t, "", "status", "--store", m.store, "busy-1")
	assert.Equal(t, 1, st.code, "deferred, not decided: %s", st.stdout)
	assert.NoFileExists(t, filepath.Join(m.store, "behind.txt"), "the job behind the deferred one waits")

	// Each wait runs from a busy exit to the next attempt's start: at
	// least the backoff, 100 ms doubling, whatever the load adds (which
	// only lengthens it, as it does the command's own run time).
	busy, attempts := m.lines(t, "busy"), m.lines(t, "attempt")
	var waits []time.Duration
	for i := 0; i+1 < len(busy) && i+1 < len(attempts); i++ {
		waits = append(waits, time.Duration(attempts[i+1].ns-busy[i].ns))
	}
	t.Logf("%d busy attempts, waits %v", len(busy), waits)
	require.GreaterOrEqual(t, len(waits), 3)
	for i, w := range waits {
		assert.GreaterOrEqual(t, w, (100*time.Millisecond<<i)*9/10, "wait %d: the backoff doubles from 100 ms", i+1)
		assert.Less(t, w, 8*time.Second, "a backoff of at most 5 s")
	}
	for _, b := range busy {
		assert.Equal(t, "busy-1", b.job)
	}

	release()
	o := outcomeOf(t, m.store, "busy-1")
	assert.Equal(t, queue.StatusApplied, o.Status, "never rejected for being busy: %s: %s", o.Reason, o.Detail)
	if assert.NotNil(t, o.Exec) {
		assert.Equal(t, 0, o.Exec.ExitCode, "the outcome is the run that did the work")
	}
	starts := m.lines(t, "start")
	require.Len(t, starts, 1, "ran once it could")
	assert.Greater(t, starts[0].ns, m.lines(t, "busy")[len(m.lines(t, "busy"))-1].ns)
	behind := outcomeOf(t, m.store, "behind-1")
	assert.Equal(t, queue.StatusApplied, behind.Status)
	assert.Equal(t, "after the mine\n", readFile(t, filepath.Join(m.store, "behind.txt")))
}

// A command that overruns its timeout is killed with its whole process
// group: the mine and the grandchild it started are gone, even when they
// ignore SIGTERM (SIGKILL after grace). A job may shorten the timeout.
func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	m := newMine(t)
	stubbornPID, slowPID := filepath.Join(m.out, "stubborn.pid"), filepath.Join(m.out, "slow.pid")
	m.serve(t,
		m.command("stubborn", []string{"--ignore-term", "--child", stubbornPID, "--sleep", "30"}, `timeout = "1s"`, `grace = "300ms"`),
		m.command("slow", []string{"--child", slowPID, "--sleep", "30"}, `timeout = "1m"`, `grace = "200ms"`))

	check := func(t *testing.T, id, pidFile string, r result, o *queue.Outcome, atLeast time.Duration) {
		t.Helper()
		assert.Equal(t, 1, r.code, r.stderr)
		require.NotNil(t, o, "an outcome as JSON: %s", r.stdout)
		assert.Equal(t, queue.StatusRejected, o.Status)
		assert.Equal(t, queue.ReasonTimeout, o.Reason, o.Detail)
		if assert.NotNil(t, o.Exec) {
			t.Logf("exit code %d, signal %q, %d ms", o.Exec.ExitCode, o.Exec.Signal, o.Exec.DurationMS)
			assert.GreaterOrEqual(t, o.Exec.DurationMS, atLeast.Milliseconds())
			assert.Less(t, o.Exec.DurationMS, int64(20000), "killed, not left to its 30 s")
			assert.NotEmpty(t, o.Exec.Signal)
			assert.Equal(t, -1, o.Exec.ExitCode)
		}
		starts := slices.DeleteFunc(m.lines(t, "start"), func(l mineLine) bool { return l.job != id })
		require.Len(t, starts, 1)
		gc, err := strconv.Atoi(strings.TrimSpace(readFile(t, pidFile)))
		require.NoError(t, err, "the grandchild's pid")
		require.Eventually(t, func() bool { return processGone(starts[0].pid) && processGone(gc) }, 10*time.Second, 10*time.Millisecond,
			"the command (pid %d) and its grandchild (pid %d) are killed", starts[0].pid, gc)
		assert.NotContains(t, jobs(m.lines(t, "end")), id, "it never finished its work")
	}

	// The detail says what the group was sent: SIGKILL only when SIGTERM
	// did not end the command within its grace.
	t.Run("the allowlist's timeout, SIGTERM ignored", func(t *testing.T) {
		r, o := submitWait(t, m.store, "--id", "stubborn-1", "exec", "stubborn")
		check(t, "stubborn-1", stubbornPID, r, o, time.Second)
		assert.Equal(t, "command stubborn overran its timeout of 1s; its process group was sent SIGTERM, then SIGKILL after 300ms", o.Detail)
		assert.Equal(t, "SIGKILL", o.Exec.Signal)
	})
	t.Run("the job's timeout_ms", func(t *testing.T) {
		job := writeJobFile(t, `[{"op":"exec","name":"slow","timeout_ms":800}]`)
		r, o := submitWait(t, m.store, "--id", "slow-1", "--job", job)
		check(t, "slow-1", slowPID, r, o, 800*time.Millisecond)
		assert.Equal(t, "command slow overran its timeout of 800ms; its process group was sent SIGTERM", o.Detail)
		assert.Equal(t, "SIGTERM", o.Exec.Signal)
	})
}

// What the allowlist does not allow is rejected, and nothing runs: a name
// not on it, an argument no pattern matches whole, arguments to a command
// that allows none, a longer timeout than its own, a working dir outside
// the store (by ".." or through a symlink) or missing; malformed exec jobs
// are refused as bad input.
func TestExecRejectedJobsRunNothing(t *testing.T) {
	t.Parallel()
	m := newMine(t)
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(m.store, "out")))
	m.serve(t,
		m.command("mine", nil, `allow_args = ["--wing=[a-z]+"]`, `timeout = "10s"`),
		m.command("bare", nil, `timeout = "10s"`))

	for i, c := range []struct {
		name string
		args []string
	}{
		{"a name not on the allowlist", []string{"exec", "nosuch"}},
		{"an argument no pattern allows", []string{"exec", "mine", "--wing=North"}},
		{"a pattern matches a whole argument only", []string{"exec", "mine", "--wing=abc --full"}},
		{"arguments to a command that allows none", []string{"exec", "bare", "--wing=abc"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, o := submitWait(t, m.store, append([]string{"--id", fmt.Sprintf("refused-%d", i)}, c.args...)...)
			assert.Equal(t, 1, r.code, r.stderr)
			assert.Contains(t, r.stderr, string(queue.ReasonNotAllowed))
			require.NotNil(t, o, "an outcome as JSON: %s", r.stdout)
			assert.Equal(t, queue.StatusRejected, o.Status)
			assert.Equal(t, queue.ReasonNotAllowed, o.Reason, o.Detail)
			assert.Nil(t, o.Exec, "nothing ran")
		})
	}

	for _, c := range []struct {
		name, job string
		reason    queue.Reason
	}{
		{"a dir that leaves the store", `{"ops":[{"op":"exec","name":"mine","dir":"../x"}]}`, queue.ReasonPathEscapes},
		{"a dir into .scribe", `{"ops":[{"op":"exec","name":"mine","dir":".scribe"}]}`, queue.ReasonPathEscapes},
		{"timeout_ms 0", `{"ops":[{"op":"exec","name":"mine","timeout_ms":0}]}`, queue.ReasonBadInput},
		{"an exec op beside another op", `{"ops":[{"op":"exec","name":"mine"},{"op":"append","path":"f","data":"x"}]}`, queue.ReasonBadInput},
		{"a coalescing key on a file job", `{"coalesce":"k","ops":[{"op":"append","path":"f","data":"x"}]}`, queue.ReasonBadInput},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "job.json")
			require.NoError(t, os.WriteFile(f, []byte(c.job), 0o600))
			r := scribe(t, "", "submit", "--store", m.store, "--wait=60s", "--job", f)
			assert.Equal(t, 1, r.code, r.stderr)
			assert.Contains(t, r.stderr, string(c.reason))
		})
	}

	for i, c := range []struct {
		name, ops string
		reason    queue.Reason
	}{
		{"a dir through a symlink out of the store", `[{"op":"exec","name":"mine","dir":"out"}]`, queue.ReasonPathEscapes},
		{"a dir that is not there", `[{"op":"exec","name":"mine","dir":"nowhere"}]`, queue.ReasonBadInput},
		{"a timeout longer than the command's", `[{"op":"exec","name":"mine","timeout_ms":60000}]`, queue.ReasonNotAllowed},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, o := submitWait(t, m.store, "--id", fmt.Sprintf("refused-job-%d", i), "--job", writeJobFile(t, c.ops))
			assert.Equal(t, 1, r.code, r.stderr)
			require.NotNil(t, o, "an outcome as JSON: %s", r.stdout)
			assert.Equal(t, queue.StatusRejected, o.Status)
			assert.Equal(t, c.reason, o.Reason, o.Detail)
			assert.Nil(t, o.Exec, "nothing ran")
		})
	}

	assert.Empty(t, m.lines(t, ""), "no rejected job ran the mine")
	assert.NoFileExists(t, filepath.Join(m.store, "f"), "no op of a rejected job took effect")
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Empty(t, entries)

	r, o := submitWait(t, m.store, "exec", "mine", "--wing=abc")
	assert.Equal(t, 0, r.code, "an allowed job still runs: %s", r.stderr)
	if assert.NotNil(t, o) {
		assert.Equal(t, queue.StatusApplied, o.Status)
	}
	assert.Len(t, m.lines(t, "start"), 1)
}

// Fifty hooks submit the same coalescing key while the writer waits for
// the store lock (held from outside): once it is free, the command runs far
// fewer than fifty times, and every job gets the outcome of the run it
// joined, naming it. A job of another key does not join them.
func TestExecCoalescing(t *testing.T) {
	t.Parallel()
	heavy(t)
	m := newMine(t)
	m.serve(t, m.command("mine", []string{"--sleep", "0.2"}, `timeout = "30s"`))
	release := holdWithFlock(t, filepath.Join(m.store, ".scribe", "lock"))

	const n = 50
	ids := make([]string, n)
	results := make([]result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		ids[i] = fmt.Sprintf("hook-%02d", i)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = scribeNoT("submit", "--store", m.store, "--id", ids[i], "--coalesce", "mine", "exec", "mine")
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, 0, results[i].code, "%s: %s", ids[i], results[i].stderr)
	}
	r := scribe(t, "", "submit", "--store", m.store, "--id", "other-key", "--coalesce", "other", "exec", "mine")
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool {
		rep, ok := report(t, m.store)
		return ok && rep.Queued == n+1 && rep.Waiting != ""
	}, 20*time.Second, 20*time.Millisecond, "all queued, the writer waiting for the store lock")
	assert.Empty(t, m.lines(t, ""), "nothing runs while the store lock is held")

	release()
	outcomes := map[string]*queue.Outcome{}
	for _, id := range append(slices.Clone(ids), "other-key") {
		o := outcomeOf(t, m.store, id)
		assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s: %s", id, o.Reason, o.Detail)
		outcomes[id] = o
	}
	runs := m.lines(t, "start")
	ran := jobs(runs)
	t.Logf("%d jobs with one key: the command ran %d times for them (%v)", n, len(runs)-1, ran)
	assert.LessOrEqual(t, len(runs)-1, 2, "coalesced: one or two runs for the fifty jobs of one key")
	assert.Len(t, m.lines(t, "end"), len(runs))

	var runners []string
	for _, id := range ids {
		o := outcomes[id]
		if o.CoalescedInto == "" {
			runners = append(runners, id)
			continue
		}
		assert.Contains(t, ids, o.CoalescedInto, "%s joined a job of its key", id)
		assert.Contains(t, ran, o.CoalescedInto, "%s joined a job that ran", id)
		assert.NotEqual(t, id, o.CoalescedInto)
	}
	assert.ElementsMatch(t, append(slices.Clone(runners), "other-key"), ran, "the jobs that ran are those not coalesced")
	assert.Empty(t, outcomes["other-key"].CoalescedInto, "another key does not join")
	assert.LessOrEqual(t, len(runners), 2, "all fifty were in the writer's hand when the store came free")
	first := slices.MinFunc(ids, func(a, b string) int { return cmpUint(outcomes[a].Seq, outcomes[b].Seq) })
	assert.Equal(t, first, ran[0], "the job queued first runs, the later ones join it")
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// The daemon is SIGKILLed while a command runs. The command is not
// killed: it runs to its end, holding the store lock through the
// descriptor it inherited. The restarted daemon waits for it; then a
// command that is not rerun_safe gets the outcome interrupted (it ran
// once), and one that is runs again.
func TestExecDaemonKilledMidRun(t *testing.T) {
	t.Parallel()
	for _, rerunSafe := range []bool{false, true} {
		t.Run(fmt.Sprintf("rerun_safe=%v", rerunSafe), func(t *testing.T) {
			m := newMine(t)
			d := m.serve(t, m.command("slow", []string{"--sleep", "1.5"}, `timeout = "30s"`, fmt.Sprintf("rerun_safe = %v", rerunSafe)))
			r := scribe(t, "", "submit", "--store", m.store, "--id", "crash-1", "exec", "slow")
			require.Equal(t, 0, r.code, r.stderr)
			require.Eventually(t, func() bool { return len(m.lines(t, "start")) == 1 }, 20*time.Second, 5*time.Millisecond, "the command started")
			first := m.lines(t, "start")[0]

			rep, ok := report(t, m.store)
			require.True(t, ok)
			assert.Contains(t, rep.Running, "crash-1", "status says which job runs")
			assert.Contains(t, rep.Running, "slow", "and which command")
			assert.Regexp(t, `(?m)^running: \S`, scribe(t, "", "status", "--store", m.store).stdout)

			d.kill(t)
			lockFile := filepath.Join(m.store, ".scribe", "lock")
			assert.False(t, processGone(first.pid), "the command outlives the daemon")
			assert.False(t, flockFree(t, lockFile), "and keeps the store lock")
			var st struct {
				Lock struct {
					PID int `json:"pid"`
				} `json:"lock"`
			}
			r = scribe(t, "", "status", "--store", m.store, "--json")
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), "%s%s", r.stdout, r.stderr)
			assert.Equal(t, first.pid, st.Lock.PID, "status names the command that holds the lock now, not the dead daemon")
			startDaemon(t, m.store) // the command has not kept the daemon lock

			o := outcomeOf(t, m.store, "crash-1")
			ends := m.lines(t, "end")
			require.NotEmpty(t, ends, "the first run had ended before the outcome was recorded")
			assert.Equal(t, first.pid, ends[0].pid)
			starts := m.lines(t, "start")
			if !rerunSafe {
				assert.Equal(t, queue.StatusRejected, o.Status)
				assert.Equal(t, queue.ReasonInterrupted, o.Reason, o.Detail)
				assert.Len(t, starts, 1, "ran exactly once")
			} else {
				assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s", o.Reason, o.Detail)
				require.Len(t, starts, 2, "ran again")
				assert.Len(t, ends, 2)
				assert.GreaterOrEqual(t, starts[1].ns, ends[0].ns, "the second run began after the first had ended")
				assert.Equal(t, strconv.FormatUint(o.Epoch, 10), starts[1].epoch, "the outcome is the second run's")
			}

			r, _ = submitWait(t, m.store, "append", "after.txt", "the queue goes on\n")
			assert.Equal(t, 0, r.code, r.stderr)
		})
	}
}

// A command whose daemon was SIGKILLed runs to its end even if it writes
// output afterwards: the command here waits for a signal file, sent once
// the daemon is dead, then writes to stdout and stderr and records that
// it finished. (Its output cannot reach the dead daemon; what matters is
// that writing it does not kill the command, as SIGPIPE on a pipe whose
// reader died would.)
func TestExecOrphanedCommandMayStillWriteOutput(t *testing.T) {
	t.Parallel()
	m := newMine(t)
	log, goFile := filepath.Join(m.out, "orphan.log"), filepath.Join(m.out, "go")
	script := `echo started >> "$LOG"; while [ ! -e "$GO" ]; do sleep 0.01; done; echo output; echo more output >&2; echo finished >> "$LOG"`
	d := m.serve(t, fmt.Sprintf("[exec.orphan]\nprogram = \"/bin/sh\"\nargs = [\"-c\", %s]\ntimeout = \"30s\"\nenv = { LOG = %s, GO = %s }\n",
		tomlString(script), tomlString(log), tomlString(goFile)))
	r := scribe(t, "", "submit", "--store", m.store, "--id", "orphan-1", "exec", "orphan")
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool { return readFile(t, log) == "started\n" }, 20*time.Second, 5*time.Millisecond, "the command started")
	d.kill(t)
	require.NoError(t, os.WriteFile(goFile, nil, 0o644))
	startDaemon(t, m.store)
	o := outcomeOf(t, m.store, "orphan-1")
	assert.Equal(t, queue.ReasonInterrupted, o.Reason, "%s: %s", o.Status, o.Detail)
	assert.Equal(t, "started\nfinished\n", readFile(t, log), "the command ran to its end, output and all")
	// No holder saw it end: status does not say it ran 0s.
	r = scribe(t, "", "status", "--store", m.store, "orphan-1")
	assert.Contains(t, r.stdout, ", its end not seen; --json for its output\n")
	assert.NotContains(t, r.stdout, "ran 0s")
}

// A command that writes 50 MB to stdout: the outcome keeps max_output
// bytes of it (its start and its end) and says how much was cut; the
// daemon's memory stays bounded and it goes on serving.
func TestExecOutputCapped(t *testing.T) {
	t.Parallel()
	m := newMine(t)
	const total, maxOutput = 50 << 20, 4096
	d := m.serve(t, m.command("spew", []string{"--spew", strconv.Itoa(total)}, `timeout = "2m"`, fmt.Sprintf("max_output = %d", maxOutput)))

	r, o := submitWait(t, m.store, "--id", "spew-1", "exec", "spew")
	require.Equal(t, 0, r.code, r.stderr)
	require.NotNil(t, o)
	require.NotNil(t, o.Exec)
	for _, s := range []struct {
		name       string
		out        string
		cut, total int64
		head, tail string
	}{
		{"stdout", o.Exec.Stdout, o.Exec.StdoutCut, total, "BEGIN", "END\n"},
		{"stderr", o.Exec.Stderr, o.Exec.StderrCut, total / 4, "EBEGIN", "EEND\n"},
	} {
		assert.LessOrEqual(t, len(s.out), maxOutput, s.name)
		assert.True(t, strings.HasPrefix(s.out, s.head), "%s keeps its start", s.name)
		assert.True(t, strings.HasSuffix(s.out, s.tail), "%s keeps its end", s.name)
		assert.GreaterOrEqual(t, s.cut, s.total-maxOutput, "%s: the cut is counted", s.name)
		assert.Less(t, s.cut, s.total, s.name)
	}
	rss := peakRSS(t, d.cmd.Process.Pid)
	t.Logf("the daemon's peak RSS: %d MiB", rss>>20)
	limit := int64(200 << 20)
	if raceBuild {
		limit *= 3 // the race detector's shadow memory
	}
	assert.Less(t, rss, limit, "the output is not held in memory")

	r, _ = submitWait(t, m.store, "append", "after.txt", "still serving\n")
	assert.Equal(t, 0, r.code, r.stderr)
	select {
	case <-d.exited:
		t.Fatalf("the daemon died: %v", d.err)
	default:
	}
}

// The command's environment: SCRIBE_STORE, SCRIBE_JOB_ID, SCRIBE_EPOCH
// (its outcome's epoch), the store lock handed down as descriptor 3 with
// SCRIBE_LOCK_*, the allowlist's env; its arguments verbatim as argv (no
// shell), its cwd the store or the job's dir, none of the daemon's other
// files or sockets. A `scribe submit --wait` the command runs (default
// route: a daemon serves the store) joins the daemon's hold (same epoch)
// instead of queueing behind the job that runs it, while a new open of
// the store lock, as a tool of its own would do, finds it held.
func TestExecEnvironmentAndJoinedHold(t *testing.T) {
	t.Parallel()
	m := newMine(t)
	require.NoError(t, os.Mkdir(filepath.Join(m.store, "sub"), 0o755))
	m.serve(t, m.command("env", []string{"--env", m.out, "--probe-store-lock", "--scribe", scribeBin},
		`allow_args = ["--note=.*"]`, `timeout = "30s"`, `env = { PALACE_HOME = "/x/palace" }`))
	lockFile := filepath.Join(m.store, ".scribe", "lock")
	type record struct {
		Env           map[string]string `json:"env"`
		Cwd           string            `json:"cwd"`
		Argv          []string          `json:"argv"`
		Fds           map[string]string `json:"fds"`
		Note          string            `json:"note"`
		StoreLockOpen string            `json:"store_lock_new_open"`
		Submit        struct {
			Code   int    `json:"code"`
			Stderr string `json:"stderr"`
		} `json:"submit"`
	}
	recordOf := func(t *testing.T, id string) record {
		t.Helper()
		var rec record
		require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(m.out, id+".json"))), &rec), "what %s recorded", id)
		return rec
	}

	note := `$(touch pwned); * "double" 'single' ` + "\\n"
	r, o := submitWait(t, m.store, "--id", "env-1", "exec", "env", "--note="+note)
	require.Equal(t, 0, r.code, r.stderr)
	require.NotNil(t, o)
	rec := recordOf(t, "env-1")

	assert.Equal(t, m.store, rec.Env["SCRIBE_STORE"])
	assert.Equal(t, "env-1", rec.Env["SCRIBE_JOB_ID"])
	assert.Equal(t, strconv.FormatUint(o.Epoch, 10), rec.Env["SCRIBE_EPOCH"], "the epoch the outcome records")
	assert.Equal(t, "3", rec.Env["SCRIBE_LOCK_FD"])
	assert.Equal(t, lockFile, rec.Env["SCRIBE_LOCK_FILE"])
	assert.NotEmpty(t, rec.Env["SCRIBE_LOCK_TOKEN"])
	assert.Equal(t, "/x/palace", rec.Env["PALACE_HOME"], "the allowlist's env")
	assert.Equal(t, lockFile, rec.Fds["3"], "the store lock as descriptor 3")
	for fd, target := range rec.Fds {
		if n, _ := strconv.Atoi(fd); n > 3 {
			assert.NotContains(t, target, "socket:", "fd %s: none of the daemon's connections", fd)
			assert.NotContains(t, target, "/.scribe/", "fd %s: none of the daemon's files", fd)
		}
	}
	assert.Equal(t, m.store, rec.Cwd, "the store is the working dir")
	assert.Equal(t, note, rec.Note, "the argument arrives verbatim")
	assert.Equal(t, "--note="+note, rec.Argv[len(rec.Argv)-1])
	assert.NoFileExists(t, filepath.Join(m.store, "pwned"), "no shell ran")
	assert.Equal(t, "busy", rec.StoreLockOpen, "the store lock is held while the command runs")

	assert.Equal(t, 0, rec.Submit.Code, "a submit run by the command joins the hold: %s", rec.Submit.Stderr)
	assert.Equal(t, "joined env-1\n", readFile(t, filepath.Join(m.store, "joined.txt")))
	joined := outcomeOf(t, m.store, "env-1-direct")
	assert.Equal(t, queue.ModeDirect, joined.Mode)
	assert.Equal(t, o.Epoch, joined.Epoch, "under the daemon's hold: the same epoch")

	job := writeJobFile(t, `[{"op":"exec","name":"env","dir":"sub"}]`)
	r, o = submitWait(t, m.store, "--id", "env-2", "--job", job)
	require.Equal(t, 0, r.code, r.stderr)
	require.NotNil(t, o)
	rec = recordOf(t, "env-2")
	assert.Equal(t, filepath.Join(m.store, "sub"), rec.Cwd, "the job's dir")
	assert.Equal(t, "env-2", rec.Env["SCRIBE_JOB_ID"])
	assert.Equal(t, strconv.FormatUint(o.Epoch, 10), rec.Env["SCRIBE_EPOCH"])
	assert.Equal(t, "joined env-1\njoined env-2\n", readFile(t, filepath.Join(m.store, "joined.txt")))
}

// The allowlist is checked when the file is read: `serve --check-config`
// (and serve) exit 2 naming the key, for the store lock as a command's
// own lock among others. A bare program name is looked up in PATH.
func TestExecConfigChecked(t *testing.T) {
	t.Parallel()
	m := newMine(t)
	storeLock := filepath.Join(m.store, ".scribe", "lock")
	require.NoError(t, os.Symlink(t.TempDir(), filepath.Join(m.store, "out")))
	require.NoError(t, os.Symlink(".scribe", filepath.Join(m.store, "meta")))
	for _, c := range []struct {
		name, table, key string
	}{
		{"the store lock as the command's own lock", m.command("mine", nil, `timeout = "10s"`, "lock_file = "+tomlString(storeLock)), "lock_file"},
		{"no timeout", m.command("mine", nil), "timeout"},
		{"a zero timeout", m.command("mine", nil, `timeout = "0s"`), "timeout"},
		{"a program that does not exist", "[exec.mine]\nprogram = \"/nonexistent/mine\"\ntimeout = \"1s\"\n", "program"},
		{"a bare name not in PATH", "[exec.mine]\nprogram = \"no-such-program-4f1c\"\ntimeout = \"1s\"\n", "program"},
		{"a pattern that does not compile", m.command("mine", nil, `timeout = "10s"`, `allow_args = ["("]`), "allow_args"},
		{"a dir outside the store", m.command("mine", nil, `timeout = "10s"`, `dir = "../x"`), "dir"},
		{"a dir that is a symlink out of the store", m.command("mine", nil, `timeout = "10s"`, `dir = "out"`), "exec.mine.dir: dir out leads to"},
		{"a dir that is a symlink into .scribe", m.command("mine", nil, `timeout = "10s"`, `dir = "meta"`), "exec.mine.dir: dir meta leads to"},
		{"busy exit code 0", m.command("mine", nil, `timeout = "10s"`, `busy_exit_codes = [0]`), "busy_exit_codes"},
		{"an unknown key", m.command("mine", nil, `timeout = "10s"`, `bogus = 1`), "bogus"},
		{"a bad command name", strings.Replace(m.command("mine", nil, `timeout = "10s"`), "[exec.mine]", `[exec."-mine"]`, 1), "exec"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeConfig(t, m.store, c.table, 0o600)
			r := scribe(t, "", "serve", "--store", m.store, "--check-config")
			assert.Equal(t, 2, r.code, "%s\n%s", r.stdout, r.stderr)
			assert.Contains(t, r.stderr, path+":")
			assert.Contains(t, r.stderr, c.key)
		})
	}

	t.Run("a dir not made yet", func(t *testing.T) {
		writeConfig(t, m.store, m.command("mine", nil, `timeout = "10s"`, `dir = "later"`), 0o600)
		r := scribe(t, "", "serve", "--store", m.store, "--check-config")
		require.Equal(t, 0, r.code, r.stderr)
	})

	t.Run("a bare name from PATH", func(t *testing.T) {
		bin, err := exec.LookPath("python3")
		require.NoError(t, err)
		writeConfig(t, m.store, "[exec.mine]\nprogram = \"python3\"\ntimeout = \"1s\"\n", 0o600)
		r := scribe(t, "", "serve", "--store", m.store, "--check-config")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "exec.mine")
		assert.Contains(t, r.stdout, bin, "the program as found in PATH")
	})
}

// Exec jobs run only in a daemon: without one, submit exits 69 and nothing
// runs. With autostart = true in the store's config, the hook's submit
// starts the daemon itself, which runs the command.
func TestExecNeedsDaemonOrAutostart(t *testing.T) {
	t.Parallel()
	m := newMine(t)
	table := m.command("mine", nil, `timeout = "10s"`)
	writeConfig(t, m.store, table, 0o600)
	for _, route := range []string{"prefer", "require"} {
		r := scribe(t, "", "submit", "--store", m.store, "--route", route, "--wait=10s", "exec", "mine")
		assert.Equal(t, 69, r.code, "route %s: %s", route, r.stderr)
		assert.NotEmpty(t, r.stderr, "a hint")
	}
	assert.Empty(t, m.lines(t, ""), "nothing ran")

	writeConfig(t, m.store, "autostart = true\n\n"+table, 0o600)
	stopAutostarted(t, m.store)
	r := scribe(t, "", "submit", "--store", m.store, "--exit-idle", testExitIdle, "--wait=30s", "--coalesce", "mine", "exec", "mine")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Len(t, m.lines(t, "start"), 1, "the mine ran once")
	d, err := discovery.Find(m.store)
	require.NoError(t, err)
	assert.NotNil(t, d, "the submit started a daemon")

	r = scribe(t, "", "submit", "--store", m.store, "--route", "direct", "--wait=10s", "exec", "mine")
	assert.Equal(t, 69, r.code, "the direct route never runs exec jobs, daemon or not: %s", r.stderr)
	assert.Len(t, m.lines(t, "start"), 1)
}

// docsBlock is the first block of lang in docs/exec.md that follows
// after (a line of its text; "" for the first in the page).
func docsBlock(t *testing.T, lang, after string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "exec.md"))
	require.NoError(t, err)
	doc := string(b)
	i := strings.Index(doc, after)
	require.GreaterOrEqual(t, i, 0, "docs/exec.md has no %q", after)
	m := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```").FindStringSubmatch(doc[i:])
	require.NotNil(t, m, "no %s block in docs/exec.md after %q", lang, after)
	return m[1]
}

// docsHome makes a home folder for the examples of docs/exec.md, which
// name it /home/me: the python interpreter they run must exist.
func docsHome(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("the examples run /usr/bin/python3")
	}
	home, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return home
}

// The complete allowlist example of docs/exec.md passes --check-config as
// written, with /home/me standing for a home folder.
func TestExecDocsExampleConfig(t *testing.T) {
	t.Parallel()
	home := docsHome(t)
	store := newStore(t)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(strings.ReplaceAll(docsBlock(t, "toml", ""), "/home/me", home)), 0o600))
	r := scribe(t, "", "serve", "--store", store, "--config", cfg, "--check-config")
	require.Equal(t, 0, r.code, "%s\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "[exec.mine]")
	assert.Contains(t, r.stdout, `"/usr/bin/python3"`)
}

// The worked example of docs/exec.md, run as written: its mine.py, its
// config file, and the hook's command line through sh with a temporary
// home folder; the hook starts the daemon, which runs the mine; a job
// queued while another mine holds the tool's lock waits, then runs.
func TestExecDocsWorkedExample(t *testing.T) {
	t.Parallel()
	home := docsHome(t)
	for _, d := range []string{"palace", ".mempalace", "notes/palace"} {
		require.NoError(t, os.MkdirAll(filepath.Join(home, d), 0o755))
	}
	store := filepath.Join(home, "notes")
	require.NoError(t, os.WriteFile(filepath.Join(home, "palace", "mine.py"), []byte(docsBlock(t, "python", "")), 0o644))
	writeConfig(t, store, strings.ReplaceAll(docsBlock(t, "toml", ""), "/home/me", home), 0o600)
	stopAutostarted(t, store)
	env := append(os.Environ(), "HOME="+home, "PATH="+filepath.Dir(scribeBin)+":"+os.Getenv("PATH"),
		"SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_AUTOSTART=", "SCRIBE_EXIT_IDLE=")
	hook := func() result {
		t.Helper()
		cmd := exec.Command("sh", "-ec", docsBlock(t, "sh", "The hook runs:"))
		cmd.Env = env
		r, err := runCmd(cmd)
		require.NoError(t, err)
		return r
	}
	mined := filepath.Join(store, "palace", "mined.log")

	r := hook()
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	require.True(t, queue.ValidID(id), "the hook printed the job ID: %q", r.stdout)
	o := outcomeOf(t, store, id)
	require.Equal(t, queue.StatusApplied, o.Status, "%s: %s", o.Reason, o.Detail)
	assert.Equal(t, fmt.Sprintf("mined all: job %s, epoch %d\n", id, o.Epoch), readFile(t, mined))

	// Another mine holds the tool's lock: the hook's job waits for it.
	release := holdWithFlock(t, filepath.Join(home, ".mempalace", "mine.lock"))
	r = hook()
	require.Equal(t, 0, r.code, r.stderr)
	second := strings.TrimSpace(r.stdout)
	require.Eventually(t, func() bool {
		rep, ok := report(t, store)
		return ok && strings.Contains(rep.Deferred, second)
	}, 20*time.Second, 20*time.Millisecond, "deferred while the tool's lock is held")
	release()
	o = outcomeOf(t, store, second)
	assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s", o.Reason, o.Detail)
	assert.Contains(t, readFile(t, mined), fmt.Sprintf("mined all: job %s, epoch %d\n", second, o.Epoch))

	r = scribe(t, "", "submit", "--store", store, "--wait=10m", "exec", "mine", "--wing=notes")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "mined notes\n", r.stdout)
}
