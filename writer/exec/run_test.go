package exec

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
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
