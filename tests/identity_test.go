package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
)

// toolHolder takes a lock the way the memory tool takes its mine lock, and
// writes its identity into it as that tool does: a NUL byte, its pid, a
// space and its argv. It holds the lock until its stdin closes.
const toolHolder = `import fcntl, os, sys
f = open(sys.argv[1], "w")
fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
f.write("\0%d %s" % (os.getpid(), " ".join(sys.argv)))
f.flush()
print("held", flush=True)
sys.stdin.read()
`

// holdLikeTool runs toolHolder on lockFile and returns its pid, the
// command it wrote, and the function that makes it let go.
func holdLikeTool(t *testing.T, lockFile string) (pid int, command string, release func()) {
	t.Helper()
	python, err := pythonExe()
	require.NoError(t, err, "python3 is needed")
	script := filepath.Join(t.TempDir(), "mine.py")
	require.NoError(t, os.WriteFile(script, []byte(toolHolder), 0o644))
	cmd := exec.Command(python, script, lockFile, "--wing=notes")
	release = testkit.Hold(t, cmd)
	return cmd.Process.Pid, script + " " + lockFile + " --wing=notes", release
}

// A tool that shares its lock file with scribe and writes "\x00<pid>
// <argv>" into it is named as the holder: in a direct writer's busy error,
// in scribe status without a daemon, and in the daemon's status while its
// jobs wait.
func TestIdentityOfAnotherTool(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	toolLock := filepath.Join(t.TempDir(), "mine.lock")
	pid, command, release := holdLikeTool(t, toolLock)
	held := "held by pid " + strconv.Itoa(pid)

	r := scribe(t, "", "lock", "--store", store, "--lock-file", toolLock, "--", "true")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, held)
	assert.Contains(t, r.stderr, "mine.py")
	assert.NotContains(t, r.stderr, "unknown process")

	// Whatever the shape of status --json, it carries the holder's pid and
	// command.
	r = scribe(t, "", "status", "--store", store, "--lock-file", toolLock, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"pid": `+strconv.Itoa(pid))
	cmdJSON, err := json.Marshal(command)
	require.NoError(t, err)
	assert.Contains(t, r.stdout, `"command": `+string(cmdJSON))
	var st struct {
		Lock map[string]any `json:"lock"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	for _, k := range []string{"mode", "epoch"} {
		v, ok := st.Lock[k]
		assert.True(t, ok && v == nil, "another tool's identity has no %s: %v", k, st.Lock)
	}

	// The daemon's status service (docs/protocol.md section 7).
	startDaemon(t, store, "--lock-file", toolLock)
	r = scribe(t, "", "submit", "--store", store, "--id", "after-tool", "append", "f.txt", "x\n")
	require.Equal(t, 0, r.code, r.stderr)
	s := connectSubmitter(t, store)
	var rep queue.StatusReport
	require.Eventually(t, func() bool {
		m, err := s.nc.Request(queue.StatusSubject(s.disc.StoreID), nil, 2*time.Second)
		return err == nil && json.Unmarshal(m.Data, &rep) == nil && strings.Contains(rep.Waiting, held)
	}, 30*time.Second, 50*time.Millisecond, "the daemon waits on the tool, and says so")
	assert.Contains(t, rep.Waiting, "mine.py")
	if assert.NotNil(t, rep.Holder) {
		assert.Equal(t, pid, rep.Holder.PID)
		assert.Equal(t, command, rep.Holder.Command)
	}

	release()
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, store, "after-tool").Status)
	assert.Equal(t, "x\n", readFile(t, filepath.Join(store, "f.txt")))
}

// A shell tool that opens the lock file, locks it with flock(1) on that
// descriptor and writes "\x00$$ <argv>": the kernel credits the lock to
// the flock process, gone at once, while the shell holds it. The shell is
// named, in the busy error and in status (with no epoch: the identity is
// not scribe's).
func TestIdentityOfAShellToolLockedByFlock(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	toolLock := filepath.Join(t.TempDir(), "tool.lock")
	script := fmt.Sprintf(`exec 9>>%s; %s 9; printf '\0%%s %%s' $$ "shelltool --mine" > %s; echo held; read _`,
		toolLock, testkit.FlockBin(t), toolLock)
	cmd := exec.Command("sh", "-c", script)
	testkit.Hold(t, cmd)
	held := fmt.Sprintf("held by pid %d on ", cmd.Process.Pid)

	r := scribe(t, "", "submit", "--store", store, "--route", "direct", "--lock-file", toolLock, "put", "a.txt", "x")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, held)
	assert.Contains(t, r.stderr, "shelltool --mine")
	r = scribe(t, "", "status", "--store", store, "--lock-file", toolLock)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `(?m)^store lock: `+regexp.QuoteMeta(held)+`\S+ \("shelltool --mine"\) for \S+$`, r.stdout)
	assert.NoFileExists(t, filepath.Join(store, "a.txt"))
}
