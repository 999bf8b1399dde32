package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scribe, the lean binary, answers as scribed, the whole one: the same
// list of commands, the same version, and the heavy commands' help and
// completion (which it hands to scribed) word for word.
func TestLeanBinaryAnswersAsScribed(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"version"}, {"serve", "--help"}, {"help", "mcp"}, {"demo", "--help"},
		{"bench", "--help"}, {"completion", "bash"}, {"submit", "--help"}} {
		lean := scribe(t, "", args...)
		whole := runProgram(t, scribedBin, "", args...)
		require.Equal(t, 0, whole.code, "scribed %v: %s", args, whole.stderr)
		assert.Equal(t, whole.code, lean.code, "%v: %s", args, lean.stderr)
		assert.Equal(t, whole.stdout, lean.stdout, "%v", args)
		assert.NotEmpty(t, lean.stdout, "%v", args)
	}
}

// Without scribed beside it or on PATH, and with no go to build one, the
// lean binary's heavy commands and autostart exit 69 naming the fix; its
// light commands work as ever, autostart too while a daemon serves.
func TestLeanBinaryWithoutScribed(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "scribe")
	// A link, not a copy: a copy open for writing while a parallel test
	// forks cannot be run (ETXTBSY).
	require.NoError(t, os.Link(scribeBin, bin))
	store := newStore(t)
	env := []string{"PATH=" + t.TempDir()} // neither scribed nor go
	for _, args := range [][]string{{"serve", "--store", store}, {"mcp", "--help"},
		{"submit", "--store", store, "--autostart", "append", "f.txt", "x\n"}} {
		r := runWith(t, bin, env, nil, args...)
		assert.Equal(t, 69, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "scribed, the daemon's binary, is not installed", args)
		assert.Contains(t, r.stderr, "go install github.com/scribehq/scribe/cmd/...@latest", args)
		assert.Empty(t, r.stdout, args)
	}
	assert.NoFileExists(t, filepath.Join(store, "f.txt"), "the refused autostart wrote nothing")
	r := runWith(t, bin, env, nil, "submit", "--store", store, "append", "f.txt", "x\n")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "x\n", readFile(t, filepath.Join(store, "f.txt")))

	// A daemon that serves the store needs no scribed beside the caller:
	// --autostart goes through it.
	startDaemon(t, store)
	r = runWith(t, bin, env, nil, "submit", "--store", store, "--autostart", "--route", "require", "--wait", "append", "f.txt", "y\n")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "x\ny\n", readFile(t, filepath.Join(store, "f.txt")))
}

// The lean binary's serve is scribed in the same process: the discovery
// file names the pid the caller started (startDaemon waits for that), and
// the process runs scribed's image.
func TestLeanServeIsScribedInPlace(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, newStore(t))
	exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(d.cmd.Process.Pid), "exe"))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	want, err := filepath.EvalSymlinks(scribedBin)
	require.NoError(t, err)
	assert.Equal(t, want, exe)
}

// The lean binary runs its Go code on one processor unless GOMAXPROCS in
// its environment is set; the Go runtime's scheduler trace says how many
// it runs with while `scribe lock` holds the store for a command.
func TestLeanBinaryRunsOnOneProcessor(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"GOMAXPROCS="}, "1"},
		{[]string{"GOMAXPROCS=2"}, "2"},
	} {
		r := runWith(t, scribeBin, append(c.env, "GODEBUG=schedtrace=10"), nil, "lock", "--store", store, "--", "sleep", "0.2")
		require.Equal(t, 0, r.code, r.stderr)
		traces := regexp.MustCompile(`(?m)^SCHED .* gomaxprocs=(\d+)`).FindAllStringSubmatch(r.stderr, -1)
		require.NotEmpty(t, traces, r.stderr)
		assert.Equal(t, c.want, traces[len(traces)-1][1], "%v: the processors of the last trace, while the command ran", c.env)
	}
}
