package daemon_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A program that runs the writer may have descriptors it did not open
// itself, not close-on-exec (a shell's `exec 7>file` before it started):
// an exec command gets none of them, only 0-2 and the store lock on 3.
func TestExecCommandGetsNoInheritedDescriptor(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "inherited"))
	require.NoError(t, err)
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd())) // without close-on-exec, as if inherited
	require.NoError(t, err)
	defer unix.Close(fd)
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	require.NoError(t, err)
	require.Zero(t, flags&unix.FD_CLOEXEC, "the premise: a descriptor that would go to every child")

	w, js, store, id := startExecWriter(t, shCommand("fds", `readlink /proc/$$/fd/* > fds.txt || true # the glob's own descriptor is gone`))
	publishJob(t, js, id, "j1", execJob(t, id, "j1", "fds", ""))
	o := outcomeOf(t, w, "j1")
	require.True(t, o.Applied(), "%+v", o)
	b, err := os.ReadFile(filepath.Join(store, "fds.txt"))
	require.NoError(t, err)
	assert.NotContains(t, string(b), f.Name(), "the command got the inherited descriptor")
	assert.Contains(t, string(b), filepath.Join(store, ".scribe", "lock"), "the store lock")
	flags, err = unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	require.NoError(t, err, "the descriptor stays open in the writer's process")
	assert.NotZero(t, flags&unix.FD_CLOEXEC)
}
