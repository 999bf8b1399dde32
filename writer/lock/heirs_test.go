package lock_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/writer/lock"
)

// The kernel credits a flock to the process that took it. Once that one
// no longer has it (dead and reaped, or a zombie its parent has not
// reaped yet) while a child that inherited the descriptor holds on, the
// child is the holder listed.
func TestLockHoldersNameTheHeir(t *testing.T) {
	if _, ok := lock.LockHolders("/"); !ok {
		t.Skip("no /proc/locks")
	}
	for _, reap := range []bool{true, false} {
		t.Run(map[bool]string{true: "taker reaped", false: "taker a zombie"}[reap], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tool.lock")
			// The taker locks, starts a child that keeps the descriptor
			// and prints its pid, and exits.
			taker := exec.Command("python3", "-c", `
import fcntl, os, subprocess, sys
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
c = subprocess.Popen(["sleep", "60"], pass_fds=[f.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
print(c.pid, flush=True)
os._exit(0)
`, path)
			out, err := taker.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, taker.Start())
			line, err := bufio.NewReader(out).ReadString('\n')
			require.NoError(t, err)
			heir, err := strconv.Atoi(strings.TrimSpace(line))
			require.NoError(t, err)
			t.Cleanup(func() { _ = syscall.Kill(heir, syscall.SIGKILL) })
			if reap {
				require.NoError(t, taker.Wait())
			} else {
				t.Cleanup(func() { _ = taker.Wait() })
				// Exited, not reaped: a zombie until the cleanup waits.
				require.Eventually(t, func() bool { return zombie(taker.Process.Pid) }, 10*time.Second, 10*time.Millisecond)
			}
			pids, ok := lock.LockHolders(path)
			require.True(t, ok)
			assert.Equal(t, []int{heir}, pids, "the child holds it, not the taker %d", taker.Process.Pid)
		})
	}
}

// zombie reports whether process pid has exited and waits to be reaped:
// its state, after "pid (comm) ", is Z.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := strings.LastIndexByte(string(b), ')')
	return err == nil && i > 0 && strings.HasPrefix(string(b[i+1:]), " Z")
}
