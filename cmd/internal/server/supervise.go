package server

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
)

// What a supervisor (systemd, launchd, a container runtime) needs from
// `scribe serve`: logs it can parse, and word of when the daemon is ready
// (docs/running.md).

// serveLogger is serve's logger: text or JSON lines on stderr, at level.
func (m *serveCommand) serveLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(m.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(m.Stderr, opts)), nil
	}
	return nil, usageError("--log-format %q: want text or json", format)
}

// notifier speaks systemd's readiness protocol (sd_notify(3)) when the
// daemon runs under a unit of Type=notify, which sets NOTIFY_SOCKET:
// one datagram per state, to a unix socket. Without the variable it does
// nothing. A tiny write of our own: the protocol is a line of text, not
// worth a dependency.
type notifier struct{ addr *net.UnixAddr }

// newNotifier takes NOTIFY_SOCKET out of the environment, so that the
// commands the daemon runs cannot speak for it.
func newNotifier() *notifier {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return &notifier{}
	}
	_ = os.Unsetenv("NOTIFY_SOCKET")
	if strings.HasPrefix(path, "@") { // an abstract socket
		path = "\x00" + path[1:]
	}
	return &notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}}
}

// notify sends state lines such as "READY=1"; an error is logged, never
// fatal: the daemon serves whether or not its supervisor heard.
func (n *notifier) notify(log *slog.Logger, state ...string) {
	if n.addr == nil {
		return
	}
	if err := n.send(strings.Join(state, "\n") + "\n"); err != nil {
		log.Warn("notify the supervisor (NOTIFY_SOCKET)", "state", state, "err", err)
	}
}

func (n *notifier) send(msg string) error {
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return err
	}
	defer c.Close()
	k, err := c.Write([]byte(msg))
	if err == nil && k != len(msg) {
		err = errors.New("short write")
	}
	return err
}
