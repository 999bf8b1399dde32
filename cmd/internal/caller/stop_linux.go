package caller

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/lock"
)

// signalDaemon sends SIGTERM to the daemon a discovery file names, once
// it has made sure that the pid is still that daemon's: the daemon may
// have exited since, and its pid gone to another process. A pidfd pins
// the process before the check, so the signal goes to the process
// checked or to none.
func signalDaemon(l queue.Layout, d *queue.Discovery) error {
	fd, err := unix.PidfdOpen(d.PID, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return nil // gone already: stop sees the lock free
	case err != nil:
		fd = -1 // a kernel before 5.3: the check, then kill(2)
	default:
		defer unix.Close(fd)
	}
	if err := checkDaemonProcess(l, d); err != nil {
		return err
	}
	if fd >= 0 {
		err = unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0)
	} else {
		err = unix.Kill(d.PID, unix.SIGTERM)
	}
	switch {
	case err == nil, errors.Is(err, unix.ESRCH):
		return nil
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("signal daemon pid %d: %w (it runs as another user)", d.PID, err)
	}
	return fmt.Errorf("signal daemon pid %d: %w", d.PID, err)
}

// checkDaemonProcess checks that pid d.PID is the daemon that wrote d:
// it holds a lock on the daemon lock file (/proc/locks), or it started
// no later than the daemon announced itself (a process that took over a
// reused pid started after the daemon died, after that). Either is proof.
func checkDaemonProcess(l queue.Layout, d *queue.Discovery) error {
	if holdsLock(d.PID, l.DaemonLock()) {
		return nil
	}
	started, err := lock.ProcessStart(d.PID)
	if errors.Is(err, os.ErrNotExist) {
		return nil // gone already
	}
	if err != nil {
		return fmt.Errorf("check daemon pid %d: %w", d.PID, err)
	}
	// /proc/stat's boot time is in whole seconds, and the daemon
	// announces itself after it starts: allow for both.
	if started.After(d.Started.Add(2 * time.Second)) {
		return fmt.Errorf("pid %d, which %s names, started at %s, after that daemon announced itself (%s): it is not the daemon (its pid was reused); nothing was signalled",
			d.PID, l.Discovery(), started.Format(time.RFC3339), d.Started.Format(time.RFC3339))
	}
	return nil
}

// holdsLock reports whether the kernel shows pid holding a lock on the
// file at path (lock.LockHolders).
func holdsLock(pid int, path string) bool {
	pids, _ := lock.LockHolders(path)
	return slices.Contains(pids, pid)
}
