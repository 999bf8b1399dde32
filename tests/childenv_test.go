package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// What a child of scribe inherits: an exec command gets the environment
// docs/exec.md lists and no descriptor but 0-2 and the store lock, and a
// daemon started on demand keeps none of the descriptors of the hook that
// started it.

// An exec command's environment is exactly the documented one: of the
// daemon's own only the base variables (HOME, LANG, LANGUAGE, LC_*,
// LOGNAME, PATH, SHELL, TMPDIR, TZ, USER), then the table's env, then
// scribe's own; nothing of the NATS credentials, the route or the
// autostart setting the daemon was started with, nor any other variable.
// Its descriptors are 0-2 and the store lock on 3 (and the lock the mine
// opens itself), not the descriptor 7 the daemon inherited from its
// starter, not close-on-exec.
func TestExecCommandGetsOnlyItsDocumentedEnvironment(t *testing.T) {
	t.Parallel()
	m := newMine(t)
	writeConfig(t, m.store, m.command("env", []string{"--env", m.out}, `timeout = "30s"`,
		// PYTHONCOERCECLOCALE: Python would otherwise add LC_CTYPE to
		// what it records if it found the C locale.
		`env = { PALACE_HOME = "/x/palace", PYTHONCOERCECLOCALE = "0" }`), 0o600)
	base := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": m.out, "USER": "me", "LOGNAME": "me", "SHELL": "/bin/sh",
		"LANG": "C.UTF-8", "LANGUAGE": "en", "LC_ALL": "C.UTF-8", "LC_TIME": "C", "TZ": "UTC", "TMPDIR": t.TempDir(),
	}
	secret := []string{
		"SCRIBE_NATS_PASSWORD=daemon-password", "SCRIBE_NATS_TOKEN=daemon-token", "SCRIBE_NATS_USER=daemon",
		"SCRIBE_NATS_CREDS=/x/creds", "SCRIBE_ROUTE=require", "SCRIBE_AUTOSTART=1", "SCRIBE_EXIT_IDLE=1m",
		"NATS_URL=nats://10.0.0.1:4222", "NATS_PASSWORD=nats-password", "AWS_SECRET_ACCESS_KEY=aws",
		// Left by a `scribe lock` parent the daemon was started under.
		"SCRIBE_EPOCH=999", "SCRIBE_LOCK_FD=9", "SCRIBE_LOCK_TOKEN=parent",
	}
	env := slices.Clone(secret)
	for k, v := range base {
		env = append(env, k+"="+v)
	}
	if g := os.Getenv("GORACE"); g != "" {
		env = append(env, "GORACE="+g) // the race-built daemon's settings; not for the command either
	}
	inherited, err := os.Create(filepath.Join(m.out, "inherited-by-the-daemon"))
	require.NoError(t, err)
	defer inherited.Close()
	cmd := exec.Command(scribeBin, "serve", "--store", m.store, "--log-level", "debug")
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{nil, nil, nil, nil, inherited} // descriptor 7, not close-on-exec
	d := startProcess(t, cmd)
	d.store = m.store
	d.waitServing(t)

	r, o := submitWait(t, m.store, "--id", "env-exact", "exec", "env")
	require.Equal(t, 0, r.code, r.stderr)
	require.NotNil(t, o)
	var rec struct {
		Env map[string]string `json:"env"`
		Fds map[string]string `json:"fds"`
	}
	require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(m.out, "env-exact.json"))), &rec))

	want := map[string]string{"PALACE_HOME": "/x/palace", "PYTHONCOERCECLOCALE": "0",
		"SCRIBE_STORE": m.store, "SCRIBE_JOB_ID": "env-exact", "SCRIBE_COMMAND": "env",
		"SCRIBE_EPOCH": fmt.Sprint(o.Epoch), "SCRIBE_LOCK_FD": "3", "SCRIBE_LOCK_FILE": filepath.Join(m.store, ".scribe", "lock")}
	for k, v := range base {
		want[k] = v
	}
	for _, k := range []string{"SCRIBE_LOCK_ID", "SCRIBE_LOCK_TOKEN", "SCRIBE_LOCK_GATE"} {
		assert.NotEmpty(t, rec.Env[k], k)
		want[k] = rec.Env[k] // made by the daemon's hold
	}
	assert.NotEqual(t, "parent", rec.Env["SCRIBE_LOCK_TOKEN"])
	assert.Equal(t, want, rec.Env, "the command's whole environment")

	fds := slices.Sorted(maps.Keys(rec.Fds))
	assert.Equal(t, []string{"0", "1", "2", "3", "4"}, fds, "descriptors: %v", rec.Fds)
	assert.Equal(t, "/dev/null", rec.Fds["0"])
	for _, fd := range []string{"1", "2"} {
		// A memfd where the kernel has them, else an unlinked file in .scribe.
		spool := strings.HasPrefix(rec.Fds[fd], "/memfd:scribe-exec-output") || strings.HasPrefix(rec.Fds[fd], filepath.Join(m.store, ".scribe", "exec-"))
		assert.True(t, spool, "fd %s is its output spool: %s", fd, rec.Fds[fd])
	}
	assert.Equal(t, filepath.Join(m.store, ".scribe", "lock"), rec.Fds["3"], "the store lock")
	assert.Equal(t, m.toolLock, rec.Fds["4"], "the lock the mine took itself")
	for fd, target := range rec.Fds {
		assert.NotEqual(t, inherited.Name(), target, "fd %s is the descriptor the daemon inherited", fd)
	}
	assert.Contains(t, d.log.String(), "closed the descriptors inherited from the starter")
}

// A hook that kept its stdout (`exec 3>&1`, a common idiom) and started
// the daemon with `scribe submit --autostart`: the host that runs the
// hook and reads its output to EOF gets EOF as soon as the hook exits,
// while the daemon it started still runs (its exit-idle is a minute),
// and the daemon holds no descriptor on the host's pipe.
func TestAutostartedDaemonKeepsNoHookDescriptor(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	stopAutostarted(t, store)
	const exitIdle = time.Minute
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pr.Close()
	var pipe syscall.Stat_t
	require.NoError(t, syscall.Fstat(int(pr.Fd()), &pipe))
	pipeName := fmt.Sprintf("pipe:[%d]", pipe.Ino)

	hook := exec.Command("sh", "-c", `exec 3>&1; "$SCRIBE" submit --store "$STORE" --autostart --exit-idle "$IDLE" --newline append f.txt x`)
	hook.Env = append(os.Environ(), "SCRIBE="+scribeBin, "STORE="+store, "IDLE="+exitIdle.String(),
		"SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_AUTOSTART=", "SCRIBE_EXIT_IDLE=")
	stderr, err := os.Create(filepath.Join(t.TempDir(), "hook.stderr"))
	require.NoError(t, err)
	defer stderr.Close()
	hook.Stdout, hook.Stderr = pw, stderr
	require.NoError(t, hook.Start())
	pw.Close() // the host's own copy: from now on only the hook and what it started hold the pipe
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(pr)
		read <- b
	}()
	err = hook.Wait()
	require.NoError(t, err, "the hook: %s", readFile(t, stderr.Name()))
	hookExited := time.Now()

	disc, err := queue.ReadDiscovery(store)
	require.NoError(t, err, "the hook started a daemon")
	names, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", disc.PID))
	require.NoError(t, err)
	for _, n := range names {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", disc.PID, n.Name()))
		assert.NotEqual(t, pipeName, target, "the daemon holds the host's pipe as fd %s", n.Name())
	}

	var out []byte
	select {
	case out = <-read:
	case <-time.After(2 * exitIdle):
		t.Fatal("the host never read EOF")
	}
	t.Logf("EOF %s after the hook exited", time.Since(hookExited).Round(time.Millisecond))
	assert.False(t, processGone(disc.PID), "the daemon has left: the host's read waited for it")
	assert.True(t, queue.ValidID(strings.TrimSpace(string(out))), "the hook's output, the job's ID: %q", out)
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, store, strings.TrimSpace(string(out))).Status)
}
