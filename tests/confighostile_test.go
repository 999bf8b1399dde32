package tests

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// hookBound is the longest a hook's submit may take to settle its route:
// the client's default time to find (or start) the store's daemon. A
// config file, whatever it is, must not make a hook wait longer; the test
// kills a process that does, and fails.
const hookBound = 10 * time.Second

// measured is a finished process with what it cost.
type measured struct {
	result
	maxRSS int64 // bytes
	killed bool  // it outlived hookBound
}

// runBounded runs scribe with args, killing it after hookBound, and says
// how much memory it took at most. It runs under the test binary's
// measure helper (helperMeasure), which alone can tell its own peak.
func runBounded(t testing.TB, args ...string) measured {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), hookBound)
	defer cancel()
	rss := filepath.Join(t.TempDir(), "maxrss")
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{scribeBin}, args...)...)
	cmd.Env = append(os.Environ(), "SCRIBE_TEST_HELPER=measure:"+rss,
		"SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_AUTOSTART=", "SCRIBE_EXIT_IDLE=")
	// The helper and scribe in a group of their own, killed together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(""), &out, &errb
	start := time.Now()
	err := cmd.Run()
	m := measured{result: result{stdout: out.String(), stderr: errb.String(), duration: time.Since(start)}, killed: ctx.Err() != nil}
	var ee *exec.ExitError
	if err != nil {
		require.True(t, errors.As(err, &ee), "run scribe %v: %v", args, err)
		m.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			m.code = 128 + int(ws.Signal())
		}
	}
	if !m.killed {
		b, err := os.ReadFile(rss)
		require.NoError(t, err, "the measure helper: %s", m.stderr)
		m.maxRSS, err = strconv.ParseInt(string(b), 10, 64)
		require.NoError(t, err)
	}
	return m
}

// hookCommands are the commands that read a store's config file on their
// own: a hook's submit (for autostart), the MCP server, and serve.
func hookCommands(store string) map[string][]string {
	return map[string][]string{
		"submit": {"submit", "--store", store, "put", "a.txt", "x"},
		"mcp":    {"mcp", "--store", store},
		"serve":  {"serve", "--store", store},
	}
}

// A FIFO as the config file. It used to block the open with
// no bound, even with a daemon serving the store, and the process then
// ignored SIGTERM. Now every command that reads it refuses it at once.
func TestConfigFIFODoesNotHang(t *testing.T) {
	t.Parallel()
	for _, withDaemon := range []bool{false, true} {
		name := "no daemon"
		if withDaemon {
			name = "daemon running"
		}
		t.Run(name, func(t *testing.T) {
			store := newStore(t)
			l := queue.Layout{Root: store}
			if withDaemon {
				startDaemon(t, store) // before the FIFO: it reads no config
			} else {
				require.NoError(t, os.Mkdir(l.Meta(), 0o700))
			}
			require.NoError(t, syscall.Mkfifo(l.Config(), 0o600))
			for cmd, args := range hookCommands(store) {
				if withDaemon && cmd == "serve" {
					continue // one daemon serves the store already
				}
				t.Run(cmd, func(t *testing.T) {
					r := runBounded(t, args...)
					require.False(t, r.killed, "scribe %s hung on the FIFO (killed after %s)", cmd, hookBound)
					assert.Equal(t, 1, r.code, r.stderr)
					assert.Contains(t, r.stderr, "refusing config file "+l.Config()+": it is not a regular file but a FIFO")
				})
			}
			assert.NoFileExists(t, filepath.Join(store, "a.txt"))
		})
	}
}

// Three million nested arrays used to crash every hook with
// a Go stack overflow after growing a 1 GB stack. Now the file is refused
// before the decoder sees it: FILE:LINE: PROBLEM, the config error's exit
// code (2), in little memory.
func TestConfigDeepNestingRefused(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	path := writeConfig(t, store, "autostart = true\nexit_idle = "+strings.Repeat("[", 3_000_000)+"\n", 0o600)
	for cmd, args := range hookCommands(store) {
		t.Run(cmd, func(t *testing.T) {
			r := runBounded(t, args...)
			require.False(t, r.killed, "scribe %s did not exit within %s", cmd, hookBound)
			assert.False(t, strings.Contains(r.stderr, "goroutine stack exceeds"), "scribe %s crashed: stack overflow", cmd)
			if len(r.stderr) > 4096 { // a crash's stack: millions of frames
				r.stderr = r.stderr[:4096] + "…"
			}
			assert.Equal(t, 2, r.code, r.stderr)
			assert.Contains(t, r.stderr, path+":2: the file goes on past 65536 bytes here; a config file holds at most 64 KiB\n")
			assert.Contains(t, r.stderr, path+":2: nested more than 16 levels deep (arrays, inline tables, dotted keys); a config file needs 4\n")
			assert.Less(t, r.maxRSS, int64(256<<20), "scribe %s took %d MiB", cmd, r.maxRSS>>20)
			t.Logf("scribe %s: exit %d in %s, max RSS %d MiB", cmd, r.code, r.duration.Round(time.Millisecond), r.maxRSS>>20)
		})
	}
	// Within the size bound, the nesting alone is refused, at its line.
	path = writeConfig(t, store, "# hooks read this\nautostart = true\nexit_idle = "+strings.Repeat("[", 30_000)+"\n", 0o600)
	for cmd, args := range hookCommands(store) {
		r := runBounded(t, args...)
		assert.Equal(t, 2, r.code, "%s: %s", cmd, r.stderr)
		assert.Equal(t, path+":3: nested more than 16 levels deep (arrays, inline tables, dotted keys); a config file needs 4\n"+
			"scribe: config "+path+": 1 problem\n", r.stderr, cmd)
	}
	assert.NoFileExists(t, filepath.Join(store, "a.txt"))
}

// A config file larger than the bound (64 KiB) is refused,
// naming the line where it goes past it.
func TestConfigTooLargeRefused(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	path := writeConfig(t, store, "autostart = false\n"+strings.Repeat("# padding\n", 7000), 0o600)
	for cmd, args := range hookCommands(store) {
		t.Run(cmd, func(t *testing.T) {
			r := runBounded(t, args...)
			require.False(t, r.killed)
			assert.Equal(t, 2, r.code, r.stderr)
			assert.Contains(t, r.stderr, path+":6553: the file goes on past 65536 bytes here; a config file holds at most 64 KiB\n")
		})
	}
}

// A config file that is a folder, a symlink (to a device), or
// a device is refused at once by the one check of .scribe: neither read
// nor followed, exit 1 as for any file of .scribe another user could have
// put there.
func TestConfigNotARegularFileRefused(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		make    func(t *testing.T, path string)
		problem string
	}{
		"folder":               {func(t *testing.T, path string) { require.NoError(t, os.Mkdir(path, 0o700)) }, "it is not a regular file but a folder"},
		"symlink to a file":    {func(t *testing.T, path string) { require.NoError(t, os.Symlink("/etc/passwd", path)) }, "it is a symlink"},
		"symlink to /dev/zero": {func(t *testing.T, path string) { require.NoError(t, os.Symlink("/dev/zero", path)) }, "it is a symlink"},
	}
	if os.Geteuid() == 0 {
		cases["character device"] = struct {
			make    func(t *testing.T, path string)
			problem string
		}{func(t *testing.T, path string) {
			require.NoError(t, syscall.Mknod(path, syscall.S_IFCHR|0o600, 1<<8|5)) // /dev/zero
		}, "it is not a regular file but a character device"}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			store := newStore(t)
			l := queue.Layout{Root: store}
			require.NoError(t, os.Mkdir(l.Meta(), 0o700))
			c.make(t, l.Config())
			for cmd, args := range hookCommands(store) {
				r := runBounded(t, args...)
				require.False(t, r.killed, "scribe %s did not exit within %s", cmd, hookBound)
				assert.Equal(t, 1, r.code, "%s: %s", cmd, r.stderr)
				assert.Contains(t, r.stderr, "refusing config file "+l.Config()+": "+c.problem, cmd)
			}
			assert.NoFileExists(t, filepath.Join(store, "a.txt"))
		})
	}
}
