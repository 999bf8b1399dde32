package tests

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

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

// runHook runs the hook binary to completion.
func runHook(t *testing.T, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "SCRIBE_STORE=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		require.NoError(t, err, "run hook %v", args)
	}
	return r
}

// The example module under examples/hook builds against this checkout
// and appends through the client's prefer route: directly without a
// daemon, through the daemon when one serves the store, and refused with
// the holder's name when an outside process holds the store lock.
func TestExampleHook(t *testing.T) {
	bin := buildHook(t)
	store := newStore(t)
	log := filepath.Join(store, "hooks.log")

	r := runHook(t, bin, "--store", store, "--id", "hook-1", "first")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "hook-1 applied via direct, epoch 1\n", r.stdout)
	assert.Equal(t, "first\n", readFile(t, log))

	t.Run("busy", func(t *testing.T) {
		release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock"))
		defer release()
		r := runHook(t, bin, "--store", store, "--id", "hook-busy", "never")
		assert.Equal(t, 75, r.code, r.stderr)
		assert.Contains(t, r.stderr, "store busy, held by a process that did not say who it is")
		assert.Equal(t, "first\n", readFile(t, log), "a refused hook changes nothing")
	})

	t.Run("daemon", func(t *testing.T) {
		d := startDaemon(t, store)
		r := runHook(t, bin, "--store", store, "--id", "hook-2", "second")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "hook-2 applied via daemon pid "+strconv.Itoa(d.cmd.Process.Pid))
		assert.Equal(t, "first\nsecond\n", readFile(t, log))

		// A retry with the same ID changes nothing.
		r = runHook(t, bin, "--store", store, "--id", "hook-2", "second")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, "first\nsecond\n", readFile(t, log))
	})
}
