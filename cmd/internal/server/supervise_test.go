package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/cmd/internal/cli"
)

func TestServeLogger(t *testing.T) {
	var buf bytes.Buffer
	m := &serveCommand{&cli.Main{Stderr: &buf}}
	log, err := m.serveLogger("debug", "json")
	require.NoError(t, err)
	log.Debug("job outcome", "id", "j1")
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line), buf.String())
	assert.Equal(t, "DEBUG", line["level"])
	assert.Equal(t, "job outcome", line["msg"])
	assert.Equal(t, "j1", line["id"])

	buf.Reset()
	log, err = m.serveLogger("info", "text")
	require.NoError(t, err)
	log.Debug("hidden")
	log.Info("shown", "id", "j2")
	assert.Equal(t, 1, strings.Count(buf.String(), "\n"))
	assert.Contains(t, buf.String(), "msg=shown id=j2")

	_, err = m.serveLogger("info", "xml")
	assert.Equal(t, exitUsage, exitCode(err))
	assert.ErrorContains(t, err, "--log-format")
	_, err = m.serveLogger("loud", "text")
	assert.Equal(t, exitUsage, exitCode(err))
}

// listenNotify is a supervisor's NOTIFY_SOCKET, on a short path: a unix
// socket's path is limited to about 100 bytes.
func listenNotify(t *testing.T) (string, *net.UnixConn) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sd")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return path, conn
}

func TestNotifier(t *testing.T) {
	path, conn := listenNotify(t)
	t.Setenv("NOTIFY_SOCKET", path)
	n := newNotifier()
	_, set := os.LookupEnv("NOTIFY_SOCKET")
	assert.False(t, set, "the commands the daemon runs must not inherit NOTIFY_SOCKET")
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	n.notify(log, "READY=1", "MAINPID=42")
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, 256)
	k, err := conn.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "READY=1\nMAINPID=42\n", string(buf[:k]))
	assert.Empty(t, logged.String())

	// A supervisor that went away is logged, not fatal.
	conn.Close()
	n.notify(log, "STOPPING=1")
	assert.Contains(t, logged.String(), "NOTIFY_SOCKET")

	// Without the variable, nothing is sent, nothing logged.
	logged.Reset()
	(&notifier{}).notify(log, "READY=1")
	assert.Empty(t, logged.String())
}
