package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// The fault-injection hooks exist only in a binary built with -tags
// scribefault (scribeBin): a normal build ignores SCRIBE_CRASH_AT,
// SCRIBE_PANIC_ON and SCRIBE_CRASH_ON, so a stray variable cannot kill a
// user's hook or daemon. Each case runs the same direct submit with both
// binaries: the tagged one must obey the hook (so the case can fail), the
// normal one must apply the job and exit 0.
func TestFaultTagNormalBuildIgnoresHooks(t *testing.T) {
	t.Parallel()
	plain, err := plainBin()
	require.NoError(t, err, "build without -tags %s", faultTag)

	tests := []struct {
		name string
		env  string
		// tagged checks what the hook does in the tagged binary.
		tagged func(t *testing.T, r faultRun)
	}{
		{"crash at a step", "SCRIBE_CRASH_AT=intent", func(t *testing.T, r faultRun) {
			assert.Equal(t, syscall.SIGKILL, r.signal, "killed at the step: %s", r.stderr)
		}},
		{"crash on a path", "SCRIBE_CRASH_ON=f.txt", func(t *testing.T, r faultRun) {
			assert.Equal(t, syscall.SIGKILL, r.signal, "killed on the path: %s", r.stderr)
		}},
		{"panic on a path", "SCRIBE_PANIC_ON=f.txt", func(t *testing.T, r faultRun) {
			assert.Equal(t, 1, r.code, "the panicking job is rejected: %s", r.stderr)
			assert.Contains(t, r.stderr, string(queue.ReasonInternal))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tagged := directSubmit(t, scribeBin, tt.env)
			tt.tagged(t, tagged)
			assert.Empty(t, tagged.content, "the hook stopped the write")

			r := directSubmit(t, plain, tt.env)
			assert.Equal(t, 0, r.code, "stderr: %s", r.stderr)
			assert.Zero(t, r.signal)
			assert.Equal(t, "data", r.content, "applied as if the variable were unset")
		})
	}
}

// faultRun is a finished direct submit under a fault variable.
type faultRun struct {
	code    int
	signal  syscall.Signal // the signal that killed it, 0 if none
	stderr  string
	content string // f.txt afterwards, "" if absent
}

// directSubmit runs `bin submit --route direct put f.txt data` on a new
// store with env added to the environment.
func directSubmit(t *testing.T, bin, env string) faultRun {
	t.Helper()
	store := newStore(t)
	cmd := exec.Command(bin, "submit", "--store", store, "--route", "direct", "put", "f.txt", "data")
	cmd.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_CRASH_AT=", "SCRIBE_CRASH_ON=", "SCRIBE_PANIC_ON=", env)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	r := faultRun{stderr: stderr.String(), content: readFile(t, filepath.Join(store, "f.txt"))}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			r.signal = ws.Signal()
		}
	default:
		require.NoError(t, err)
	}
	return r
}
