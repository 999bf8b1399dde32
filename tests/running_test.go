package tests

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// Running the daemon under a supervisor (docs/running.md): version,
// stop, JSON logs, readiness.

// exitedWithin reports whether the daemon process exited within d.
func (d *daemon) exitedWithin(wait time.Duration) bool {
	select {
	case <-d.exited:
		return true
	case <-time.After(wait):
		return false
	}
}

// `scribe version` and `scribe --version` print the same version, the
// one the daemon announces.
func TestRunningVersion(t *testing.T) {
	t.Parallel()
	v := scribe(t, "", "version")
	require.Equal(t, 0, v.code, v.stderr)
	dv := scribe(t, "", "--version")
	require.Equal(t, 0, dv.code, dv.stderr)
	assert.Equal(t, v.stdout, dv.stdout)
	version := strings.TrimSpace(v.stdout)
	assert.NotEmpty(t, version)
	assert.Equal(t, version+"\n", v.stdout, "one line")

	store := newStore(t)
	startDaemon(t, store)
	disc, err := queue.ReadDiscovery(store)
	require.NoError(t, err)
	assert.Equal(t, version, disc.Version)
}

// `scribe stop` stops a daemon as SIGTERM does and waits for it: exit 0
// once the daemon is gone (exit 0 itself), its discovery file removed,
// and nothing stranded.
func TestRunningStop(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemon(t, store)
	r := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "append", "log.txt", "x\n")
	require.Equal(t, 0, r.code, r.stderr)

	r = scribe(t, "", "stop", "--store", store)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, fmt.Sprintf("stopped daemon pid %d", d.cmd.Process.Pid))
	// stop returns once the daemon lock is free, the process's last act.
	require.True(t, d.exitedWithin(10*time.Second), "the daemon exited")
	assert.NoError(t, d.err, "a graceful stop exits 0; log:\n%s", d.log.String())
	assert.Contains(t, d.log.String(), "shutting down")
	l := queue.Layout{Root: store}
	assert.NoFileExists(t, l.Discovery())
	assert.NoFileExists(t, l.Stranded(), "nothing was left queued")

	real, err := filepath.EvalSymlinks(store)
	require.NoError(t, err)
	found, err := discovery.Find(real)
	assert.NoError(t, err)
	assert.Nil(t, found, "no daemon holds the store")
}

// A daemon stopped with jobs still queued leaves them stranded, as on
// SIGTERM: the marker says so, and the next daemon applies them, in
// order, and lifts it.
func TestRunningStopStrandsQueuedJobs(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemon(t, store)
	release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock")) // the writer waits
	const n = 3
	for i := range n {
		r := scribe(t, "", "submit", "--store", store, "--route", "require", "--id", fmt.Sprintf("q-%d", i), "append", "log.txt", fmt.Sprintf("%d\n", i))
		require.Equal(t, 0, r.code, r.stderr)
	}
	r := scribe(t, "", "stop", "--store", store)
	require.Equal(t, 0, r.code, r.stderr)
	require.True(t, d.exitedWithin(10*time.Second))
	assert.NoError(t, d.err)
	release()

	s, err := queue.ReadStranded(store)
	require.NoError(t, err)
	require.NotNil(t, s, "the stop left the queue stranded")
	assert.Contains(t, s.Why, fmt.Sprintf("daemon pid %d stopped with %d jobs queued", d.cmd.Process.Pid, n))
	assert.Empty(t, readFile(t, filepath.Join(store, "log.txt")))

	startDaemon(t, store)
	require.Eventually(t, func() bool { return readFile(t, filepath.Join(store, "log.txt")) == "0\n1\n2\n" }, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		_, err := os.Stat(queue.Layout{Root: store}.Stranded())
		return os.IsNotExist(err)
	}, 20*time.Second, 20*time.Millisecond, "the marker is lifted once the queue is drained")
}

// No daemon to stop is no failure: exit 0 with a note, whether none ever
// ran or one was killed and left its discovery file behind.
func TestRunningStopNoDaemon(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	r := scribe(t, "", "stop", "--store", store)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "no daemon serves")
	assert.Empty(t, r.stdout)

	d := startDaemon(t, store)
	d.kill(t)
	require.FileExists(t, queue.Layout{Root: store}.Discovery(), "a killed daemon leaves its file")
	r = scribe(t, "", "stop", "--store", store)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "no daemon serves")

	r = scribe(t, "", "stop", "--store", filepath.Join(t.TempDir(), "missing"))
	assert.Equal(t, 1, r.code, "a store that does not exist: %s", r.stderr)
}

// A daemon that takes longer than --timeout to stop (here: an exec
// command that ignores SIGTERM, killed after its grace period) makes stop
// exit 75; the daemon still stops on its own, cleanly.
func TestRunningStopTimeout(t *testing.T) {
	t.Parallel()
	store, _, d := startRunningCommand(t, "trap '' TERM; echo started > started; sleep 30", "2s")

	r := scribe(t, "", "stop", "--store", store, "--timeout", "200ms")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Regexp(t, `has not stopped: .* after 200ms; wait longer \(--timeout\), or stop it at once: kill -KILL [0-9]+ \(what is queued is kept`, r.stderr)

	// Run again, it waits for the daemon, which is stopping (its discovery
	// withdrawn, the command in its grace period), and says so.
	r = scribe(t, "", "stop", "--store", store)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "which was stopping already (or starting), has exited")
	require.True(t, d.exitedWithin(30*time.Second), "the daemon stops once the command's grace is over")
	assert.NoError(t, d.err, "log:\n%s", d.log.String())
	r = scribe(t, "", "stop", "--store", store)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "no daemon serves")
}

// --log-format json: every line the daemon writes is a JSON object, and
// at debug level each decided job has a line with its ID.
func TestRunningLogFormatJSON(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemon(t, store, "--log-format", "json") // startDaemon adds --log-level debug
	ids := []string{"json-a", "json-b", "json-c"}
	for _, id := range ids[:2] {
		r := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "--id", id, "append", "log.txt", "x\n")
		require.Equal(t, 0, r.code, r.stderr)
	}
	r := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "--id", ids[2], "--if-match", "absent", "put", "log.txt", "y")
	require.Equal(t, 1, r.code, r.stderr)
	r = scribe(t, "", "stop", "--store", store)
	require.Equal(t, 0, r.code, r.stderr)
	require.True(t, d.exitedWithin(10*time.Second))

	lines := logLines(t, d)
	want := map[string]string{"json-a": "applied", "json-b": "applied", "json-c": "rejected"}
	for _, l := range lines {
		for _, k := range []string{"time", "level", "msg"} {
			assert.Contains(t, l, k, "%v", l)
		}
		if l["msg"] != "job outcome" {
			continue
		}
		assert.Equal(t, "DEBUG", l["level"])
		id := fmt.Sprint(l["id"])
		if status, ok := want[id]; ok {
			assert.Equal(t, status, l["status"], id)
			delete(want, id)
		}
	}
	assert.Empty(t, want, "a debug line for each job")

	// The default stays text.
	store2 := newStore(t)
	d2 := startDaemon(t, store2)
	// "serving" is logged just after the announcement startDaemon waits for.
	require.Eventually(t, func() bool { return strings.Contains(d2.log.String(), "msg=serving") }, 10*time.Second, 10*time.Millisecond, d2.log.String())
	r = scribe(t, "", "serve", "--store", store2, "--log-format", "xml")
	assert.Equal(t, 2, r.code, r.stderr)
}

// Under systemd's Type=notify (NOTIFY_SOCKET set), the daemon says
// READY=1 once it serves, its discovery file written, and STOPPING=1
// when it stops; the commands it runs do not get the socket.
func TestRunningNotifyReady(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "sd") // a socket's path is short
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	require.NoError(t, err)
	defer conn.Close()
	read := func() string {
		t.Helper()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
		buf := make([]byte, 4096)
		n, err := conn.Read(buf)
		require.NoError(t, err)
		return string(buf[:n])
	}

	store := newStore(t)
	real, err := filepath.EvalSymlinks(store)
	require.NoError(t, err)
	writeConfig(t, real, `[exec.env]
program = "/bin/sh"
args = ["-c", "echo \"socket=${NOTIFY_SOCKET:-none}\""]
timeout = "30s"
`, 0o600)
	d := spawnDaemon(t, store, []string{"NOTIFY_SOCKET=" + sock})
	msg := read()
	assert.Contains(t, msg, "READY=1\n")
	assert.Contains(t, msg, fmt.Sprintf("MAINPID=%d\n", d.cmd.Process.Pid))
	disc, err := queue.ReadDiscovery(store)
	require.NoError(t, err, "ready means announced")
	assert.Equal(t, d.cmd.Process.Pid, disc.PID)
	r := scribe(t, "", "status", "--store", store, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var st struct {
		Daemon *struct{ PID int } `json:"daemon"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.NotNil(t, st.Daemon, "status names the daemon once it is ready: %s", r.stdout)
	assert.Equal(t, d.cmd.Process.Pid, st.Daemon.PID)

	r = scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "exec", "env")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "socket=none\n", r.stdout)

	r = scribe(t, "", "stop", "--store", store)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, read(), "STOPPING=1")
	require.True(t, d.exitedWithin(10*time.Second))
}

// runningDocBlock is the first block of lang in docs/running.md.
func runningDocBlock(t *testing.T, lang string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "running.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```").FindStringSubmatch(string(b))
	require.NotNil(t, m, "no %s block in docs/running.md", lang)
	return m[1]
}

// The systemd unit of docs/running.md runs commands scribe accepts, and
// its launchd agent is well-formed XML that keeps the daemon alive only
// after a failure.
func TestRunningDocsUnits(t *testing.T) {
	t.Parallel()
	unit := runningDocBlock(t, "ini")
	for _, want := range []string{"Type=notify", "Restart=on-failure", "ExecStart=", "ExecStop="} {
		assert.Contains(t, unit, want)
	}
	home := t.TempDir()
	store := filepath.Join(home, "notes")
	require.NoError(t, os.Mkdir(store, 0o755))
	expand := func(line string) []string {
		line = strings.ReplaceAll(line, "%h/go/bin/scribe", scribeBin)
		line = strings.ReplaceAll(line, "%h/%I", store)
		return strings.Fields(line)
	}
	var start, stop []string
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			start = expand(v)
		}
		if v, ok := strings.CutPrefix(line, "ExecStop="); ok {
			stop = expand(v)
		}
	}
	require.Equal(t, scribeBin, start[0])
	r := runProgram(t, scribeBin, "", append(start[1:], "--check-config")...)
	assert.Equal(t, 0, r.code, "ExecStart's flags: %s", r.stderr)
	require.Equal(t, scribeBin, stop[0])
	r = runProgram(t, scribeBin, "", stop[1:]...)
	assert.Equal(t, 0, r.code, "ExecStop with no daemon: %s", r.stderr)

	plist := runningDocBlock(t, "xml")
	dec := xml.NewDecoder(strings.NewReader(plist))
	for {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the plist is well-formed")
	}
	assert.Regexp(t, `<key>KeepAlive</key>\s*<dict>\s*<key>SuccessfulExit</key>\s*<false/>`, plist)
	assert.Contains(t, plist, "<string>serve</string>")
}

// Stops at once take turns: each would send SIGTERM, and the daemon takes
// a second signal for "now", killing itself mid-grace and leaving its exec
// command running, the store lock held through its descriptor. While
// another stop holds the stop gate (here, this test), a stop signals
// nothing: the daemon still serves, its command still runs. Once the gate
// is free, the stop stops it, one SIGTERM: the daemon exits 0 and the
// command's TERM trap runs to its end.
func TestRunningStopsTakeTurns(t *testing.T) {
	t.Parallel()
	store, real, d := startRunningCommand(t, "trap 'sleep 1; echo graceful > left; exit 0' TERM; echo started > started; sleep 30 & wait", "10s")

	l := queue.Layout{Root: real}
	release := holdWithFlock(t, l.StopGate())
	stop := exec.Command(scribeBin, "stop", "--store", store)
	var out bytes.Buffer
	stop.Stdout, stop.Stderr = &out, &out
	require.NoError(t, stop.Start())
	require.Eventually(t, func() bool {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", stop.Process.Pid))
		for _, fd := range fds {
			if target, _ := os.Readlink(fd); target == l.StopGate() {
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "the stop waits at the gate")
	assert.FileExists(t, l.Discovery(), "the daemon, not signalled, still serves")
	assert.False(t, d.exitedWithin(0), "the daemon runs")

	release()
	require.NoError(t, stop.Wait(), "%s", out.String())
	assert.Contains(t, out.String(), fmt.Sprintf("stopped daemon pid %d", d.cmd.Process.Pid))
	require.True(t, d.exitedWithin(30*time.Second))
	assert.NoError(t, d.err, "one SIGTERM, a graceful stop; log:\n%s", d.log.String())
	assert.Equal(t, "graceful\n", readFile(t, filepath.Join(real, "left")), "the command was given its grace")
}

// startRunningCommand starts a daemon whose allowlist's one command runs
// script with sh, given grace after SIGTERM, queues it, and waits until
// the script has written the file started. It returns the store, its
// real path and the daemon.
func startRunningCommand(t *testing.T, script, grace string) (store, real string, d *daemon) {
	t.Helper()
	store = newStore(t)
	real, err := filepath.EvalSymlinks(store)
	require.NoError(t, err)
	writeConfig(t, real, fmt.Sprintf("[exec.cmd]\nprogram = \"/bin/sh\"\nargs = [\"-c\", %s]\ntimeout = \"60s\"\ngrace = %q\n", tomlString(script), grace), 0o600)
	d = startDaemon(t, store)
	r := scribe(t, "", "submit", "--store", store, "--route", "require", "exec", "cmd")
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool { return readFile(t, filepath.Join(real, "started")) != "" }, 20*time.Second, 20*time.Millisecond)
	return store, real, d
}
