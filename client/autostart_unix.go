//go:build unix

package client

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/scribehq/scribe/queue"
)

// startedDaemon is a daemon process Open started and has not released.
type startedDaemon struct {
	p      *os.Process
	pid    int
	reaped bool
	code   int   // its exit code once reaped here: -1 if it died of a signal, or was let go
	logAt  int64 // the daemon log's size when it started: what it wrote comes after
}

// startDaemon starts cfg.Command --store store --exit-idle D detached:
// its own session (no controlling terminal, out of the caller's process
// group, so a hook's group being killed does not kill it), stdin from
// /dev/null, stdout and stderr appended to the store's daemon log.
func startDaemon(cfg Autostart, store string) (*startedDaemon, error) {
	if len(cfg.Command) == 0 {
		return nil, errors.New("no command to start the daemon with")
	}
	idle := cfg.ExitIdle
	if idle <= 0 {
		idle = DefaultExitIdle
	}
	l := queue.Layout{Root: store}
	if err := l.Make(); err != nil {
		return nil, err
	}
	logf, err := queue.OpenPrivate(l.DaemonLog(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if errors.Is(err, queue.ErrInsecure) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("open daemon log: %w", err)
	}
	defer logf.Close()
	fi, err := logf.Stat()
	if err != nil {
		return nil, fmt.Errorf("open daemon log: %w", err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	args := append(cfg.Command[1:len(cfg.Command):len(cfg.Command)], "--store", store, "--exit-idle", idle.String())
	cmd := exec.Command(cfg.Command[0], args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Command[0], err)
	}
	return &startedDaemon{p: cmd.Process, pid: cmd.Process.Pid, logAt: fi.Size()}, nil
}

// exited reports whether the daemon has exited, reaping it if so.
func (s *startedDaemon) exited() bool {
	if s.reaped {
		return true
	}
	var ws syscall.WaitStatus
	pid, err := syscall.Wait4(s.pid, &ws, syscall.WNOHANG, nil)
	if pid == s.pid || (err != nil && !errors.Is(err, syscall.EINTR)) {
		s.reaped, s.code = true, -1
		if pid == s.pid && ws.Exited() {
			s.code = ws.ExitStatus()
		}
	}
	return s.reaped
}

// failed reports whether the daemon exited at once without serving the
// store, as another would: 2, settings `scribe serve` refused, 1, a start
// that failed, or any other end (-1: a signal), but 75, a daemon that
// found another serving the store (one leaving as it came), which is
// worth another try. It also says the code, and where in the daemon log
// what it wrote begins.
func (s *startedDaemon) failed() (code int, logAt int64, ok bool) {
	if !s.exited() {
		return 0, 0, false
	}
	return s.code, s.logAt, s.code != exitBusy
}

// release lets the daemon go: Open does not wait for it, but a goroutine
// reaps it when it exits, so that a long-lived caller (an MCP server that
// starts a daemon after each idle exit) collects no zombies.
func (s *startedDaemon) release() {
	if !s.reaped {
		s.reaped, s.code = true, -1
		go func() { _, _ = s.p.Wait() }()
	}
}
