package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
	"github.com/scribehq/scribe/writer/journal"
	wlock "github.com/scribehq/scribe/writer/lock"
)

// jobLookup is `status JOB_ID --json` (and `wait --json`) for a job
// without an outcome.
type jobLookup struct {
	ID       string         `json:"id"`
	Found    bool           `json:"found"`
	State    queue.JobState `json:"state"`
	Position uint64         `json:"position"`
	Queued   uint64         `json:"queued"`
	Detail   string         `json:"detail"`
	Error    string         `json:"error"`
}

// bgScribe is a scribe process left running.
type bgScribe struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr bytes.Buffer
	exited chan struct{}
	code   int
}

// startScribe starts scribe without waiting for it; finish waits.
func startScribe(t *testing.T, args ...string) *bgScribe {
	t.Helper()
	b := &bgScribe{cmd: exec.Command(scribeBin, args...), exited: make(chan struct{})}
	b.cmd.Env = append(b.cmd.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=")
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	require.NoError(t, b.cmd.Start())
	go func() {
		_ = b.cmd.Wait()
		b.code = b.cmd.ProcessState.ExitCode()
		close(b.exited)
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.exited
	})
	return b
}

// running reports whether the process has not exited yet.
func (b *bgScribe) running() bool {
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// finish waits for the process to exit and returns what it did.
func (b *bgScribe) finish(t *testing.T) result {
	t.Helper()
	select {
	case <-b.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("scribe %v did not exit", b.cmd.Args[1:])
	}
	return result{code: b.code, stdout: b.stdout.String(), stderr: b.stderr.String()}
}

// A job queued behind a held store lock is
// "queued (position N of M)" for status, not "unknown", and a wait
// started meanwhile returns its outcome once the lock is free.
func TestStatusWaitQueuedBehindLock(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock"))
	for _, id := range []string{"q1", "q2"} {
		r := scribe(t, "", "submit", "--store", store, "--id", id, "append", "log.txt", id+"\n")
		require.Equal(t, 0, r.code, r.stderr)
	}

	for _, tt := range []struct{ id, want string }{
		{"q1", "job q1: queued (position 1 of 2)"},
		{"q2", "job q2: queued (position 2 of 2)"},
	} {
		r := scribe(t, "", "status", "--store", store, tt.id)
		assert.Equal(t, 1, r.code, "no outcome yet: %+v", r)
		assert.Contains(t, r.stderr, tt.want)
		assert.NotContains(t, r.stderr, "unknown:")
	}
	r := scribe(t, "", "status", "--store", store, "--json", "q2")
	assert.Equal(t, 1, r.code, r.stderr)
	var l jobLookup
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &l), r.stdout)
	assert.Equal(t, jobLookup{ID: "q2", State: queue.StateQueued, Position: 2, Queued: 2, Error: "job q2: queued (position 2 of 2), no outcome yet"}, l)
	r = scribe(t, "", "status", "--store", store, "never-sent")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "job never-sent: unknown")

	// A wait that runs out says where the job stands.
	r = scribe(t, "", "wait", "--store", store, "--timeout", "300ms", "q2")
	assert.Equal(t, 75, r.code, "%+v", r)
	assert.Contains(t, r.stderr, "queued (position 2 of 2)")
	r = scribe(t, "", "wait", "--store", store, "--timeout", "300ms", "--json", "q1")
	assert.Equal(t, 75, r.code, "%+v", r)
	l = jobLookup{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &l), r.stdout)
	assert.Equal(t, queue.StateQueued, l.State)
	assert.Equal(t, uint64(1), l.Position)
	assert.Contains(t, l.Error, "wait timed out")

	waiter := startScribe(t, "wait", "--store", store, "q2")
	jsonWaiter := startScribe(t, "wait", "--store", store, "--json", "q1")
	// Still queued, and both waits still waiting, when the lock goes.
	r = scribe(t, "", "status", "--store", store, "q2")
	assert.Contains(t, r.stderr, "queued (position 2 of 2)")
	for _, w := range []*bgScribe{waiter, jsonWaiter} {
		if !w.running() {
			t.Fatalf("wait returned before the job was applied: %+v", w.finish(t))
		}
	}
	release()

	r = waiter.finish(t)
	require.Equal(t, 0, r.code, "%+v", r)
	assert.Regexp(t, `^job q2: applied\n  by daemon, epoch \d+, seq 2, at `, r.stdout)
	r = jsonWaiter.finish(t)
	require.Equal(t, 0, r.code, "%+v", r)
	var o queue.Outcome
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &o), r.stdout)
	assert.Equal(t, "q1", o.ID)
	assert.Equal(t, queue.StatusApplied, o.Status)
	assert.Equal(t, "q1\nq2\n", readFile(t, filepath.Join(store, "log.txt")))
}

// statusKeys decodes `status --json` and returns it with its keys.
func statusKeys(t *testing.T, store string) (map[string]any, []string) {
	t.Helper()
	r := scribe(t, "", "status", "--store", store, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m), r.stdout)
	keys := make([]string, 0, len(m))
	for k, v := range m {
		keys = append(keys, k)
		if sub, ok := v.(map[string]any); ok && (k == "lock" || k == "journal") { // always objects
			for sk := range sub {
				keys = append(keys, k+"."+sk)
			}
		}
	}
	slices.Sort(keys)
	return m, keys
}

// jobsList decodes `jobs --json` and counts its outcomes by status.
func jobsList(t *testing.T, store string, args ...string) (applied, rejected int, m map[string]any) {
	t.Helper()
	r := scribe(t, "", append([]string{"jobs", "--store", store, "--json"}, args...)...)
	require.Equal(t, 0, r.code, r.stderr)
	var list struct {
		Outcomes []queue.Outcome `json:"outcomes"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m))
	for _, o := range list.Outcomes {
		switch o.Status {
		case queue.StatusApplied:
			applied++
		case queue.StatusRejected:
			rejected++
		}
	}
	return applied, rejected, m
}

// status --json and jobs --json report what was
// done, with and without a daemon, under the same keys; after the daemon
// is killed, the store lock is free, whatever the lock file remembers.
func TestStatusJobsCounts(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	put := func(id string, args ...string) result {
		return scribe(t, "", append(append([]string{"submit", "--store", store, "--id", id}, args...), "--if-match", "absent", "put", id, "x")...)
	}
	// Without a daemon: 1 applied, 1 rejected (the file exists).
	require.Equal(t, 0, put("d1", "--route", "direct").code)
	require.Equal(t, 1, put("d1", "--route", "direct", "--id", "d1-again").code)
	m, noDaemonKeys := statusKeys(t, store)
	assert.Nil(t, m["daemon"])
	assert.Nil(t, m["queued"], "no daemon: not known")
	assert.EqualValues(t, 1, m["applied"], "no daemon: counted from the journal")
	assert.EqualValues(t, 1, m["rejected"], "no daemon: counted from the journal")
	assert.Equal(t, "free", m["lock"].(map[string]any)["state"])
	assert.EqualValues(t, 2, m["journal"].(map[string]any)["outcomes"])
	applied, rejected, jl := jobsList(t, store)
	assert.Equal(t, []int{1, 1}, []int{applied, rejected})
	assert.Nil(t, jl["queued"], "queued jobs cannot be listed without a daemon")
	assert.Contains(t, jl["note"], "no daemon")

	// With one: 2 applied, 1 rejected since it started. It keeps the
	// lock when idle, so that it holds it when killed.
	d := startDaemon(t, store, "--idle-release", "1h")
	require.Equal(t, 0, put("q1", "--wait=30s").code)
	require.Equal(t, 0, put("q2", "--wait=30s").code)
	require.Equal(t, 1, put("q1", "--wait=30s", "--id", "q1-again").code)
	m, daemonKeys := statusKeys(t, store)
	assert.Equal(t, noDaemonKeys, daemonKeys, "the same keys with and without a daemon")
	require.NotNil(t, m["daemon"])
	assert.EqualValues(t, d.cmd.Process.Pid, m["daemon"].(map[string]any)["pid"])
	assert.EqualValues(t, 2, m["applied"])
	assert.EqualValues(t, 1, m["rejected"])
	assert.EqualValues(t, 0, m["queued"])
	assert.EqualValues(t, 0, m["in_flight"])
	assert.EqualValues(t, 5, m["journal"].(map[string]any)["outcomes"])
	lock := m["lock"].(map[string]any)
	assert.Equal(t, "held", lock["state"])
	assert.EqualValues(t, d.cmd.Process.Pid, lock["pid"])
	assert.Equal(t, "daemon", lock["mode"])
	applied, rejected, jl = jobsList(t, store)
	assert.Equal(t, []int{3, 2}, []int{applied, rejected})
	assert.Equal(t, []any{}, jl["queued"])
	assert.EqualValues(t, d.cmd.Process.Pid, jl["daemon_pid"])
	applied, rejected, _ = jobsList(t, store, "--state", "rejected")
	assert.Equal(t, []int{0, 2}, []int{applied, rejected})
	applied, rejected, _ = jobsList(t, store, "--limit", "2")
	assert.Equal(t, 2, applied+rejected)

	// Killed: the kernel frees the lock; the file still names the dead
	// daemon, and status does not believe it.
	d.kill(t)
	h, err := wlock.ReadHolder(filepath.Join(store, ".scribe", "lock"))
	require.NoError(t, err, "the killed daemon's identity stays in the lock file")
	require.Equal(t, d.cmd.Process.Pid, h.PID)
	m, deadKeys := statusKeys(t, store)
	assert.Equal(t, noDaemonKeys, deadKeys)
	assert.Nil(t, m["daemon"])
	lock = m["lock"].(map[string]any)
	assert.Equal(t, "free", lock["state"])
	assert.Nil(t, lock["pid"])
	assert.EqualValues(t, 5, m["journal"].(map[string]any)["outcomes"])
	r := scribe(t, "", "status", "--store", store)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "store lock: free\n")
	assert.NotContains(t, r.stdout, strconv.Itoa(d.cmd.Process.Pid)+" on")
	applied, rejected, _ = jobsList(t, store)
	assert.Equal(t, []int{3, 2}, []int{applied, rejected})
	// And waiting for a decided job needs no daemon.
	r = scribe(t, "", "wait", "--store", store, "--timeout", "10s", "q2")
	assert.Equal(t, 0, r.code, "%+v", r)
	r = scribe(t, "", "wait", "--store", store, "--timeout", "10s", "q1-again")
	assert.Equal(t, 1, r.code, "rejected: %+v", r)
	assert.Contains(t, r.stdout, "job q1-again: rejected (precondition_failed)")
	assert.Contains(t, r.stderr, "precondition_failed")
}

// With --json, stdout holds valid JSON even when
// the command refuses before doing anything, with the usual exit code.
func TestStatusWaitJobsJSONRefusals(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	missing := filepath.Join(t.TempDir(), "nope")
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"status: missing store", []string{"status", "--store", missing, "--json"}, 1},
		{"status: no store", []string{"status", "--json"}, 2},
		{"status: bad flag", []string{"status", "--store", store, "--bogus", "--json"}, 2},
		{"status: two IDs", []string{"status", "--store", store, "--json", "a", "b"}, 2},
		{"status: bad ID", []string{"status", "--store", store, "--json", "bad id!"}, 2},
		{"status: unknown job", []string{"status", "--store", store, "--json", "nosuch"}, 1},
		{"status --dead: no daemon", []string{"status", "--store", store, "--json", "--dead"}, 69},
		{"wait: missing store", []string{"wait", "--store", missing, "--json", "j"}, 1},
		{"wait: bad flag", []string{"wait", "--store", store, "--json", "--timeout", "soon", "j"}, 2},
		{"wait: no ID", []string{"wait", "--store", store, "--json"}, 2},
		{"wait: bad ID", []string{"wait", "--store", store, "--json", "bad id!"}, 2},
		{"wait: timeout", []string{"wait", "--store", store, "--json", "--timeout", "100ms", "nosuch"}, 75},
		{"jobs: missing store", []string{"jobs", "--store", missing, "--json"}, 1},
		{"jobs: bad flag", []string{"jobs", "--store", store, "--json", "--bogus"}, 2},
		{"jobs: bad state", []string{"jobs", "--store", store, "--json", "--state", "stuck"}, 2},
		{"jobs: bad limit", []string{"jobs", "--store", store, "--json", "--limit", "0"}, 2},
		{"jobs: limit past the most", []string{"jobs", "--store", store, "--json", "--limit", "10001"}, 2},
		{"jobs: queued without a daemon", []string{"jobs", "--store", store, "--json", "--state", "queued"}, 69},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := scribe(t, "", tt.args...)
			assert.Equal(t, tt.code, r.code, "%+v", r)
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), "stdout is not JSON: %q", r.stdout)
			if tt.code != 0 {
				assert.NotEmpty(t, v["error"], "%s: %s", tt.name, fmt.Sprint(v))
			}
		})
	}
}

// hasSocket reports whether process pid has a socket open (Linux): a
// scribe command that has one has dialled the daemon, long after it set
// up its signal handling.
func hasSocket(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			return true
		}
	}
	return false
}

// Ctrl-C ends a wait with exit 130, naming the job, which may still be
// applied.
func TestWaitInterrupted(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc/PID/fd")
	}
	store := newStore(t)
	startDaemon(t, store)
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", asJSON), func(t *testing.T) {
			args := []string{"wait", "--store", store, "pending-1"}
			if asJSON {
				args = append(args, "--json")
			}
			w := startScribe(t, args...)
			require.Eventually(t, func() bool { return hasSocket(w.cmd.Process.Pid) }, 20*time.Second, 10*time.Millisecond, "wait dials the daemon")
			require.True(t, w.running())
			require.NoError(t, w.cmd.Process.Signal(syscall.SIGINT))
			r := w.finish(t)
			assert.Equal(t, 130, r.code, "%+v", r)
			assert.Contains(t, r.stderr, "interrupted while waiting for job pending-1")
			if asJSON {
				var l jobLookup
				require.NoError(t, json.Unmarshal([]byte(r.stdout), &l), r.stdout)
				assert.Equal(t, "pending-1", l.ID)
				assert.Contains(t, l.Error, "interrupted")
			}
		})
	}
}

// `status JOB` names a job's queue sequence only when it was queued: a
// direct write's job never was (its --json leaves seq out too).
func TestStatusOfADirectJobHasNoSeq(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	r := scribe(t, "", "submit", "--store", store, "--route", "direct", "--wait", "--id", "d1", "append", "log.txt", "d\n")
	require.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "", "status", "--store", store, "d1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `by direct, epoch \d+, at `, r.stdout)
	assert.NotContains(t, r.stdout, "seq")
	startDaemon(t, store)
	r = scribe(t, "", "submit", "--store", store, "--wait", "--id", "q1", "append", "log.txt", "q\n")
	require.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "", "status", "--store", store, "q1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `by daemon, epoch \d+, seq 1, at `, r.stdout)
}

// A look-up through a daemon that dies while the client waits for its
// answer, or before it asks, is answered by the journal, as without a
// daemon: the daemon's end says nothing about the job. So is a
// cancellation of a decided job: too late. It used to fail
// with "status request: nats: connection closed", and `scribe status ID`
// exited 1, which says to a script that no outcome is recorded.
func TestLookupsOutliveTheirDaemon(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemon(t, store)
	applyDone(t, store)

	ctx := t.Context()
	cl, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	defer func() { _ = cl.Close() }()
	_, err = cl.Status(ctx, "done") // connected, and answered, before the daemon stops
	require.NoError(t, err)

	// Stopped, the daemon reads nothing: each request waits for it, or,
	// sent after its end, finds the connection closed.
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGSTOP))
	asks := map[string]func() error{
		"Status": func() error {
			l, err := cl.Status(ctx, "done")
			if err == nil && (!l.Found || l.Outcome.Status != queue.StatusApplied) {
				err = fmt.Errorf("found %v: %+v", l.Found, l.Outcome)
			}
			return err
		},
		"Locate": func() error {
			l, err := cl.Locate(ctx, "done")
			if err == nil && (!l.Found || l.Outcome.Status != queue.StatusApplied) {
				err = fmt.Errorf("found %v, state %q", l.Found, l.State)
			}
			return err
		},
		"Jobs": func() error {
			list, err := cl.Jobs(ctx, queue.JobsQuery{})
			if err == nil && (len(list.Outcomes) != 1 || list.Outcomes[0].ID != "done") {
				err = fmt.Errorf("listed %+v", list.Outcomes)
			}
			return err
		},
		"Cancel": func() error { // the daemon records a cancellation before it answers
			_, err := cl.Cancel(ctx, "done")
			var late *client.TooLateError
			if errors.As(err, &late) && late.Outcome != nil && late.Outcome.Status == queue.StatusApplied {
				return nil
			}
			return fmt.Errorf("want too late, applied: %w", err)
		},
		"StoreStatus": func() error {
			st, err := cl.StoreStatus(ctx)
			if err == nil && (st.Daemon != nil || st.Applied == nil || *st.Applied != 1) {
				err = fmt.Errorf("daemon %+v, applied %v", st.Daemon, st.Applied)
			}
			return err
		},
	}
	errs := make(map[string]chan error)
	for name, ask := range asks {
		ch := make(chan error, 1)
		errs[name] = ch
		go func() { ch <- ask() }()
	}
	d.kill(t)
	for name, ch := range errs {
		select {
		case err := <-ch:
			assert.NoError(t, err, name)
		case <-time.After(30 * time.Second):
			t.Errorf("%s: no answer 30 s after the daemon's end", name)
		}
	}
}

// A look-up through a daemon that stops answering as it shuts down (its
// status service gone, SCRIBE_PAUSE_AT=unserved holding it there, its
// clients not yet cut off) waits for it to go, and is answered by the
// journal. It used to fail at once with "no responders", exit 1.
func TestLookupWhileDaemonShutsDown(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemonEnv(t, store, []string{"SCRIBE_PAUSE_AT=unserved:2s"})
	applyDone(t, store)
	cl, err := client.Open(t.Context(), store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	defer func() { _ = cl.Close() }()

	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { return strings.Contains(d.log.String(), "shutting down") }, 30*time.Second, 5*time.Millisecond)
	l, err := cl.Status(t.Context(), "done")
	require.NoError(t, err)
	assert.True(t, l.Found && l.Outcome.Status == queue.StatusApplied, "%+v", l)
	<-d.exited
}

// A look-up whose connection is lost while the daemon, alive, cannot be
// reached again fails with client.ErrUnavailable (scribe exits 75: try
// again), not with the lost connection's error (exit 1, which says no
// outcome is recorded); once the daemon can be reached, the same client
// gets its answer.
func TestLookupWhileDaemonUnreachable(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	applyDone(t, store)
	relay, _, _ := relayDaemon(t, store)

	cl, err := client.Open(t.Context(), store, client.WithRoute(client.RouteRequire), client.WithConnectTimeout(time.Second))
	require.NoError(t, err)
	defer func() { _ = cl.Close() }()
	relay.Refuse(true)
	relay.Cut()
	_, err = cl.Status(t.Context(), "done")
	assert.ErrorIs(t, err, client.ErrUnavailable)
	relay.Refuse(false)
	l, err := cl.Status(t.Context(), "done")
	require.NoError(t, err)
	assert.True(t, l.Found && l.Outcome.Status == queue.StatusApplied, "%+v", l)
}

// Without a daemon to ask, `status ID` and `jobs` read the journal; while
// another writer keeps it open (flock(1) holding its lock as bbolt's
// writer does) they exit 75, try again, not 1, which for status says no
// outcome is recorded.
func TestLookupOfABusyJournalSaysTryAgain(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	r := scribe(t, "", "submit", "--store", store, "--route", "direct", "--id", "done", "append", "log.txt", "x\n")
	require.Equal(t, 0, r.code, r.stderr)
	_, release := testkit.HoldFlock(t, journal.Path(store))
	for _, args := range [][]string{{"status", "done"}, {"jobs"}} {
		r := scribe(t, "", append([]string{args[0], "--store", store}, args[1:]...)...)
		assert.Equal(t, 75, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "journal busy", args)
	}
	release()
	r = scribe(t, "", "status", "--store", store, "done")
	assert.Equal(t, 0, r.code, r.stderr)
}

// A daemon killed while another process takes the daemon lock leaves its
// discovery file behind, naming a pid that is gone: a client that cannot
// reach it says so and names the process that holds the lock now.
func TestUnreachableDaemonNamesTheLockHolder(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemon(t, store)
	dead := d.cmd.Process.Pid
	d.kill(t)
	holder, _ := testkit.HoldFlock(t, queue.Layout{Root: store}.DaemonLock())

	_, err := client.Open(t.Context(), store, client.WithRoute(client.RouteRequire), client.WithConnectTimeout(time.Second))
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.Contains(t, err.Error(), fmt.Sprintf("pid %d at ", dead), "the pid the discovery file names")
	assert.Contains(t, err.Error(), fmt.Sprintf("held by pid %d", holder), "and who holds the lock")
}

// A bounded call keeps its bound against a daemon that accepts
// connections and never answers (SIGSTOP: the kernel completes the TCP
// handshake, the TLS one never comes): each attempt to connect takes no
// more than the call has left. Before, one attempt ran its own 5 s.
func TestBoundedCallsAgainstAStoppedDaemon(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemon(t, store)
	applyDone(t, store)
	d.freeze(t)
	const bound = time.Second
	for _, args := range [][]string{
		{"wait", "--timeout", bound.String(), "done"},
		{"cancel", "--timeout", bound.String(), "done"},
		{"submit", "--wait=" + bound.String(), "--id", "late", "append", "log.txt", "y\n"},
	} {
		t0 := time.Now()
		r := scribe(t, "", append([]string{args[0], "--store", store}, args[1:]...)...)
		took := time.Since(t0)
		assert.Equal(t, 75, r.code, "%v: %s", args, r.stderr)
		assert.Less(t, took, bound+2*time.Second, "%v kept its bound of %s", args, bound)
	}
}

// applyDone applies job "done" (an append to log.txt) through the store's
// daemon: a recorded outcome for the look-ups that follow to find.
func applyDone(t *testing.T, store string) {
	t.Helper()
	r := scribe(t, "", "submit", "--store", store, "--wait", "--id", "done", "append", "log.txt", "x\n")
	require.Equal(t, 0, r.code, r.stderr)
}
