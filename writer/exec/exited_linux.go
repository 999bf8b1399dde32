package exec

import (
	"errors"

	"golang.org/x/sys/unix"
)

// hasExited reports whether the child pid has exited, or was reaped
// already, without reaping it: Wait, in its own goroutine, still does.
func hasExited(pid int) bool {
	var info unix.Siginfo // WNOHANG with nothing to report leaves it zero
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if errors.Is(err, unix.ECHILD) {
		return true
	}
	return err == nil && info.Signo == int32(unix.SIGCHLD)
}
