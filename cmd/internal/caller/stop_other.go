//go:build !linux

package caller

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
)

// signalDaemon sends SIGTERM to the daemon a discovery file names. Where
// there is no /proc to check the pid against (see stop_linux.go), the
// daemon lock, held a moment ago, is the only proof that the pid is still
// the daemon's.
func signalDaemon(_ queue.Layout, d *queue.Discovery) error {
	err := unix.Kill(d.PID, unix.SIGTERM)
	if err == nil || errors.Is(err, unix.ESRCH) {
		return nil
	}
	return fmt.Errorf("signal daemon pid %d: %w", d.PID, err)
}
