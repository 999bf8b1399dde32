package caller

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer/lock"
)

// signalDaemon sends SIGTERM to the daemon a discovery file names, once
// it has made sure that the pid is still that daemon's: the daemon may
// have exited since, and its pid gone to another process, and the file
// may say anything its owner wrote. A pidfd pins the process before the
// check, so the signal goes to the process checked or to none.
func signalDaemon(l queue.Layout, d *queue.Discovery) error {
	if d.PID <= 0 {
		// kill(2) would take 0 for this process group, -1 for every process.
		return fmt.Errorf("%s names pid %d, which no process has; nothing was signalled", l.Discovery(), d.PID)
	}
	fd, err := unix.PidfdOpen(d.PID, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		// No such process: gone already, if the lock is free, which
		// the check says (else d names a pid some other process holds).
		_, err := checkDaemonProcess(l, d)
		return err
	case err != nil:
		fd = -1 // a kernel before 5.3: the check, then kill(2)
	default:
		defer unix.Close(fd)
	}
	if daemon, err := checkDaemonProcess(l, d); err != nil || !daemon {
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

// checkDaemonProcess reports whether pid d.PID is the daemon that wrote
// d: it holds the daemon lock (/proc/locks), which no other process can
// while it does. A lock that none holds is a daemon gone, or going: false,
// and nothing to signal. A lock held by other pids, or by one this
// process cannot see (/proc/locks omits a holder in a pid namespace it
// does not see), is an error: d.PID is some other process (its pid
// reused, or the file edited), or cannot be told from one.
func checkDaemonProcess(l queue.Layout, d *queue.Discovery) (bool, error) {
	pids, ok := lock.LockHolders(l.DaemonLock())
	switch {
	case !ok:
		return false, fmt.Errorf("cannot check that pid %d, which %s names, is the daemon (no /proc/locks); nothing was signalled", d.PID, l.Discovery())
	case slices.Contains(pids, d.PID):
		return true, nil
	case len(pids) == 0:
		held, err := discovery.LockHeld(l.DaemonLock())
		switch {
		case err != nil:
			return false, fmt.Errorf("check daemon pid %d: %w", d.PID, err)
		case held:
			return false, fmt.Errorf("the daemon lock %s is held by a process this one cannot see (in another pid namespace?), so pid %d, which %s names, cannot be checked; nothing was signalled",
				l.DaemonLock(), d.PID, l.Discovery())
		}
		return false, nil
	}
	return false, fmt.Errorf("pid %d, which %s names, does not hold the daemon lock %s (pid %s does): it is not the daemon; nothing was signalled",
		d.PID, l.Discovery(), l.DaemonLock(), strings.Trim(fmt.Sprint(pids), "[]"))
}
