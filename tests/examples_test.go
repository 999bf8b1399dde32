package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildHook builds examples/hook, a module of its own that imports the
// client by its module path with a replace to this checkout, as a user's
// hook would.
func buildHook(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH: cannot build the examples/hook module")
	}
	dir, err := filepath.Abs(filepath.Join("..", "examples", "hook"))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, "go.mod"))
	bin := filepath.Join(t.TempDir(), "hook")
	cmd := exec.Command(goBin, "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build examples/hook:\n%s", out)
	return bin
}

// The example module under examples/hook builds against this checkout
// and appends through the client's prefer route: directly without a
// daemon, through the daemon when one serves the store, and refused with
// the holder's name when an outside process holds the store lock.
func TestExampleHook(t *testing.T) {
	t.Parallel()
	bin := buildHook(t)
	store := newStore(t)
	log := filepath.Join(store, "hooks.log")

	r := runProgram(t, bin, "", "--store", store, "--id", "hook-1", "first")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "hook-1 applied via direct, epoch 1\n", r.stdout)
	assert.Equal(t, "first\n", readFile(t, log))

	t.Run("busy", func(t *testing.T) {
		release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock"))
		defer release()
		r := runProgram(t, bin, "", "--store", store, "--id", "hook-busy", "never")
		assert.Equal(t, 75, r.code, r.stderr)
		assert.Contains(t, r.stderr, "store busy, held by a process that did not say who it is")
		assert.Equal(t, "first\n", readFile(t, log), "a refused hook changes nothing")
	})

	t.Run("daemon", func(t *testing.T) {
		d := startDaemon(t, store)
		r := runProgram(t, bin, "", "--store", store, "--id", "hook-2", "second")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "hook-2 applied via daemon pid "+strconv.Itoa(d.cmd.Process.Pid))
		assert.Equal(t, "first\nsecond\n", readFile(t, log))

		// A retry with the same ID changes nothing.
		r = runProgram(t, bin, "", "--store", store, "--id", "hook-2", "second")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, "first\nsecond\n", readFile(t, log))
	})
}
