package exec

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/writer/lock"
)

// TestExecStartFaults: a command that cannot be started for want of the
// daemon's own resources is a fault to retry after; one that cannot be
// run at all (gone, not executable) is the job's outcome.
func TestExecStartFaults(t *testing.T) {
	for _, tt := range []struct {
		err   error
		fault bool
	}{
		{&os.PathError{Op: "fork/exec", Path: "/bin/x", Err: syscall.EMFILE}, true},
		{&os.PathError{Op: "fork/exec", Path: "/bin/x", Err: syscall.EAGAIN}, true},
		{&os.PathError{Op: "fork/exec", Path: "/bin/x", Err: syscall.ENOMEM}, true},
		{&os.PathError{Op: "open", Path: os.DevNull, Err: syscall.ENFILE}, true},
		{&os.PathError{Op: "fork/exec", Path: "/bin/x", Err: syscall.ENOENT}, false},
		{&os.PathError{Op: "fork/exec", Path: "/bin/x", Err: syscall.EACCES}, false},
		{&os.PathError{Op: "fork/exec", Path: "/bin/x", Err: syscall.ENOEXEC}, false},
	} {
		assert.Equal(t, tt.fault, resourceFault(tt.err), "%v", tt.err)
	}
}

// A command that exits within its timeout is not timed out because its
// exit is learned late, after the timer fired (the daemon was stopped or
// starved while the command ran): its own exit code is its outcome. One
// that is still running when the timer fires is timed out.
func TestExecExitLearnedLate(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("hasExited looks without reaping on Linux only")
	}
	store := t.TempDir()
	hold, err := lock.Acquire(t.Context(), store, lock.Options{})
	require.NoError(t, err)
	defer hold.Unlock()
	exited := make(chan struct{})
	waitLate = func() { <-exited }
	defer func() { waitLate = nil }()
	for _, tc := range []struct {
		program  string
		args     []string
		timedOut bool
	}{
		{"/bin/sh", []string{"-c", "exit 0"}, false},
		{"/bin/sh", []string{"-c", "exec sleep 30"}, true},
	} {
		c := &Command{Name: "late", Program: tc.program, Timeout: 50 * time.Millisecond, Grace: 10 * time.Millisecond}
		r := NewRun(c, tc.args, store, c.Timeout)
		require.NoError(t, r.OpenOutput(store))
		started := func(pid int) {
			go func() {
				// Release Wait only once the command has exited and its
				// timer has fired (or, for the one that runs on, once it
				// has been killed).
				for !zombie(t, pid) {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(2 * c.Timeout)
				exited <- struct{}{}
			}()
		}
		res := r.Exec(nil, hold, nil, started)
		assert.Equal(t, tc.timedOut, res.TimedOut, "%v", tc.args)
		if !tc.timedOut {
			assert.Equal(t, 0, res.Exit)
		}
	}
}

// zombie reports whether process pid has exited and waits to be reaped.
func zombie(t *testing.T, pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	i := bytes.LastIndexByte(b, ')') // the command's name may hold anything
	return i > 0 && len(b) > i+2 && b[i+2] == 'Z'
}
