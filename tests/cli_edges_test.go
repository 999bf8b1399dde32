package tests

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
)

// The command line's rough edges, each as a new user meets it.

// edgeRun is scribe with more environment, and stdin from a file when one
// is given.
func edgeRun(t *testing.T, env []string, stdin *os.File, args ...string) result {
	t.Helper()
	var in io.Reader
	if stdin != nil {
		in = stdin
	}
	return runWith(t, scribeBin, env, in, args...)
}

// `--wait 10s` is `--wait=10s`, for submit and lock alike; submit's bare
// --wait waits for the outcome without bound, lock refuses one, and a
// bounded one runs out with 75.
func TestEdgeWaitSpelling(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	f := filepath.Join(store, "f.txt")

	r := scribe(t, "", "submit", "--store", store, "--wait", "10s", "append", "f.txt", "a")
	require.Equal(t, 0, r.code, "submit --wait 10s OP…: %s", r.stderr)
	r = scribe(t, "", "submit", "--store", store, "--wait=10s", "append", "f.txt", "b")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "ab", readFile(t, f))
	r = scribe(t, "", "submit", "--store", store, "--wait", "0s", "append", "f.txt", "c")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "--wait 0s: want a positive duration")

	for _, wait := range [][]string{{"--wait", "10s"}, {"--wait=10s"}} {
		args := append(append([]string{"lock", "--store", store}, wait...), "--", "true")
		r := scribe(t, "", args...)
		assert.Equal(t, 0, r.code, "%v: %s", wait, r.stderr)
	}
	// Waiting for the lock is always bounded: lock refuses a bare --wait,
	// and submit's bare --wait does not wait for the lock.
	r = scribe(t, "", "lock", "--store", store, "--wait", "--", "true")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "--wait needs a bound")

	// Bounded, against a holder that stays: 75 after the bound.
	release := holdWithFlock(t, queue.Layout{Root: store}.Lock())
	for _, args := range [][]string{
		{"lock", "--store", store, "--wait", "300ms", "--", "true"},
		{"submit", "--store", store, "--route", "direct", "--wait", "300ms", "append", "f.txt", "x"},
	} {
		r := scribe(t, "", args...)
		assert.Equal(t, 75, r.code, "%v: %s", args, r.stderr)
		assert.GreaterOrEqual(t, r.duration, 300*time.Millisecond, "%v", args)
	}
	r = scribe(t, "", "submit", "--store", store, "--route", "direct", "--wait", "append", "f.txt", "x")
	assert.Equal(t, 75, r.code, "a bare --wait fails at once on a busy lock: %s", r.stderr)
	release()
	assert.Equal(t, "ab", readFile(t, f), "the bounded submit wrote nothing")
}

// After a daemon's write, a direct writer meets the daemon's idle-release
// period: the busy error says so, and how to wait.
func TestEdgeBusyHintAfterDaemonWrite(t *testing.T) {
	// Not parallel: it times processes (its 5 s idle window), and the
	// other tests' load would time the machine instead.
	store := newStore(t)
	const idle = 5 * time.Second
	startDaemon(t, store, "--idle-release", idle.String())
	r := scribe(t, "", "submit", "--store", store, "--wait", "append", "f.txt", "x\n")
	require.Equal(t, 0, r.code, r.stderr)
	submitted := time.Now()

	r = scribe(t, "", "lock", "--store", store, "--", "true")
	lockRefused := scribe(t, "", "submit", "--store", store, "--route", "direct", "append", "f.txt", "y\n")
	require.Less(t, time.Since(submitted), idle, "the machine is too slow for this test's idle window")
	require.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, "scribe: store is busy: lock ")
	assert.Contains(t, r.stderr, "(daemon: \"scribe serve --store ")
	assert.Contains(t, r.stderr, "\nscribe: the daemon keeps the store lock while it applies jobs or runs an exec command, and for its idle-release period (5s) after; retry after that")
	assert.Contains(t, r.stderr, "--wait=DUR")
	assert.NotContains(t, r.stderr, "--route direct")

	require.Equal(t, 75, lockRefused.code, lockRefused.stderr)
	assert.Contains(t, lockRefused.stderr, "(5s)")
	assert.Contains(t, lockRefused.stderr, "without --route direct the job would queue through the daemon")

	// Waiting, as the hint says, gets in once the daemon lets go.
	r = scribe(t, "", "lock", "--store", store, "--wait", "30s", "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "x\n", readFile(t, filepath.Join(store, "f.txt")))
}

// What the lock file says of a holder is shown quoted and cut, whoever
// wrote it; a direct submit records its op and path there, never DATA.
func TestEdgeHolderCommandQuoted(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	lockFile := queue.Layout{Root: store}.Lock()
	require.NoError(t, os.MkdirAll(filepath.Dir(lockFile), 0o700))

	t.Run("shown quoted and cut", func(t *testing.T) {
		pid, release := testkit.HoldFlock(t, lockFile)
		defer release()
		host, err := os.Hostname()
		require.NoError(t, err)
		id, err := json.Marshal(queue.Holder{
			PID: pid, Host: host, Mode: queue.ModeDirect, Since: time.Now().UTC(),
			Command: "tool --data secret\nscribe: a forged line" + strings.Repeat("x", 500),
		})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(lockFile, id, 0o600))

		r := scribe(t, "", "submit", "--store", store, "--route", "direct", "append", "f.txt", "x")
		require.Equal(t, 75, r.code, r.stderr)
		assert.Contains(t, r.stderr, `(direct: "tool --data secret\nscribe: a forged line`)
		assert.Contains(t, r.stderr, `xxx…")`)
		for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
			assert.False(t, strings.HasPrefix(line, "scribe: a forged line"), "a line forged: %q", r.stderr)
			assert.Less(t, len(line), 500, "the command is cut: %q", line)
		}
	})

	t.Run("recorded without data", func(t *testing.T) {
		// Killed while it holds the lock (a fault hook of the test
		// build): its identity stays in the lock file.
		r := edgeRun(t, []string{"SCRIBE_CRASH_AT=intent"}, nil,
			"submit", "--store", store, "--route", "direct", "append", "notes.txt", "private\nline")
		require.Equal(t, 128+int(syscall.SIGKILL), r.code, r.stderr)
		var h queue.Holder
		require.NoError(t, json.Unmarshal([]byte(readFile(t, lockFile)), &h))
		assert.Equal(t, "scribe submit append notes.txt", h.Command)
	})
}

// DATA: --newline ends it with one; left out, it is read from stdin only
// when stdin is not a terminal.
func TestEdgeDataAndNewline(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	notes := filepath.Join(store, "notes.txt")
	for range 2 {
		r := scribe(t, "", "submit", "--store", store, "--newline", "append", "notes.txt", "a line")
		require.Equal(t, 0, r.code, r.stderr)
	}
	r := scribe(t, "", "submit", "--store", store, "--newline", "append", "notes.txt", "ends with one\n")
	require.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "piped line\n", "submit", "--store", store, "append", "notes.txt")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "a line\na line\nends with one\npiped line\n", readFile(t, notes))

	_, tty := testkit.OpenPTY(t)
	r = edgeRun(t, nil, tty, "submit", "--store", store, "append", "notes.txt")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "DATA is missing; give DATA, or - to read it from stdin (stdin is a terminal)")
	assert.Equal(t, "a line\na line\nends with one\npiped line\n", readFile(t, notes), "nothing written")

	// /dev/null is a character device, not a terminal: empty DATA.
	devNull, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer devNull.Close()
	r = edgeRun(t, nil, devNull, "submit", "--store", store, "append", "empty.txt")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.FileExists(t, filepath.Join(store, "empty.txt"))

	// More than the store's jobs may be: refused before anything is sent.
	r = scribe(t, strings.Repeat("x", 3<<20), "submit", "--store", store, "append", "big.txt")
	assert.Equal(t, 1, r.code)
	assert.Regexp(t, `rejected \(too_large\): job is 3145\d\d\d bytes encoded, limit 1048576 \(1 MiB: a direct write's always, a daemon's unless it takes more`, r.stderr)
	assert.NoFileExists(t, filepath.Join(store, "big.txt"))
}

// "./notes.txt" is notes.txt, on every route; "a/./b" is refused with a
// hint. An unknown OP is a usage error.
func TestEdgePathsAndOps(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	r := scribe(t, "", "submit", "--store", store, "--route", "direct", "put", "./direct.txt", "d")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "d", readFile(t, filepath.Join(store, "direct.txt")))

	startDaemon(t, store)
	r = scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "put", "./queued.txt", "q")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "q", readFile(t, filepath.Join(store, "queued.txt")))

	r = scribe(t, "", "submit", "--store", store, "--wait", "put", "a/./b.txt", "x")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `rejected (path_escapes): op 0: path "a/./b.txt" has a "." segment; use a path relative to the store`)

	r = scribe(t, "", "submit", "--store", store, "frob", "x", "y")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, `unknown op "frob": want put, append, merge, delete or exec`)
}

// Ctrl-C during submit --wait exits 130 and names the job, which is
// applied later all the same.
func TestEdgeInterruptedWait(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	release := holdStore(t, "--store", store, "--wait", "10s") // the daemon cannot apply anything
	cmd := exec.Command(scribeBin, "submit", "--store", store, "--wait", "--id", "interrupted-1", "append", "f.txt", "x")
	cmd.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=")
	var stderr testkit.SyncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	c, err := client.Open(t.Context(), store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	defer c.Close()
	require.Eventually(t, func() bool {
		rep, err := c.Report(t.Context())
		return err == nil && rep.Queued == 1
	}, 30*time.Second, 20*time.Millisecond, "the job was never queued")

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 130, ee.ExitCode(), stderr.String())
	assert.Contains(t, stderr.String(), "scribe: interrupted: job interrupted-1 may still be applied; see its outcome with: scribe status --store "+store+" interrupted-1")

	release()
	require.Eventually(t, func() bool { return readFile(t, filepath.Join(store, "f.txt")) == "x" },
		30*time.Second, 20*time.Millisecond, "the interrupted job is applied once the store is free")
	r := scribe(t, "", "status", "--store", store, "interrupted-1")
	assert.Equal(t, 0, r.code, r.stderr)
}

// Help is on stdout when asked for, flags may follow a command's
// arguments, and the store comes from $SCRIBE_STORE, or is named when
// it is missing.
func TestCLIHelpFlagsAndStore(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	for _, args := range [][]string{{"-h"}, {"help"}, {"submit", "-h"}, {"help", "lock"}, {"lock", "--help"}} {
		r := scribe(t, "", args...)
		assert.Equal(t, 0, r.code, "%v", args)
		assert.Contains(t, r.stdout, "Usage:", "%v", args)
		assert.Empty(t, r.stderr, "%v", args)
	}
	r := scribe(t, "", "submit", "-h")
	assert.Contains(t, r.stdout, "1 MiB")
	assert.Contains(t, r.stdout, "--wait 10s is --wait=10s")
	assert.Contains(t, r.stdout, "only when stdin is not a")
	r = scribe(t, "")
	assert.Equal(t, 2, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "Usage:")

	r = edgeRun(t, []string{"SCRIBE_STORE=" + store}, nil, "submit", "--id", "env-1", "put", "e.txt", "e")
	require.Equal(t, 0, r.code, r.stderr)
	r = edgeRun(t, []string{"SCRIBE_STORE=" + store}, nil, "status", "env-1", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var out queue.Outcome
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	assert.Equal(t, "env-1", out.ID)

	r = scribe(t, "", "submit", "put", "e.txt", "e")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "--store is required (or set $SCRIBE_STORE)")
	missing := filepath.Join(store, "no", "such")
	r = scribe(t, "", "submit", "--store", missing, "put", "e.txt", "e")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "store "+missing+" does not exist; create the folder first: mkdir -p "+missing)
}

// A --job file that is not a job says where, in JSON's words.
func TestEdgeJobFileErrors(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	job := filepath.Join(t.TempDir(), "job.json")
	require.NoError(t, os.WriteFile(job, []byte(`{"ops":[{"op":"put","path":"a","data":"x"},{"op":"put","path":5}]}`), 0o600))
	r := scribe(t, "", "submit", "--store", store, "--job", job)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "rejected (bad_input): job file is not a valid job: ops[1].path: want a string, not a number")
	assert.NotContains(t, r.stderr, "Go struct")

	// Text JSON would read as U+FFFD is not what was sent: refused before
	// any route is taken, and nothing is written.
	for name, body := range map[string]string{
		"not UTF-8":      `{"ops":[{"op":"put","path":"caf` + "\xe9" + `.txt","data":"x"}]}`,
		"lone surrogate": `{"ops":[{"op":"put","path":"u\ud800.txt","data":"x"}]}`,
	} {
		require.NoError(t, os.WriteFile(job, []byte(body), 0o600))
		r := scribe(t, "", "submit", "--store", store, "--job", job)
		assert.Equal(t, 1, r.code, "%s: %s", name, r.stderr)
		assert.Contains(t, r.stderr, "rejected (bad_input): job file is not a valid job: byte ", name)
	}

	// An empty precondition (a hash left unset) is no blind write, in a
	// job file or as --if-match; nor is an empty --id a new job.
	require.NoError(t, os.WriteFile(job, []byte(`{"ops":[{"op":"put","path":"a","data":"x","if_match":""}]}`), 0o600))
	r = scribe(t, "", "submit", "--store", store, "--job", job)
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "rejected (bad_input): job file is not a valid job: ops[0]: op if_match: empty")
	r = scribe(t, "", "submit", "--store", store, "--if-match", "", "put", "a", "x")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "--if-match is empty")
	// Nor is a job file's empty priority a normal job, as the daemon's
	// decoder holds.
	require.NoError(t, os.WriteFile(job, []byte(`{"ops":[{"op":"put","path":"a","data":"x"}],"priority":""}`), 0o600))
	r = scribe(t, "", "submit", "--store", store, "--job", job)
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "rejected (bad_input): job file is not a valid job: priority: empty")
	r = scribe(t, "", "submit", "--store", store, "--id", "", "put", "a", "x")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "--id is empty")
	// Nor is an empty --priority or --coalesce (a variable left unset)
	// taken as none.
	r = scribe(t, "", "submit", "--store", store, "--priority", "", "put", "a", "x")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "--priority: empty")
	r = scribe(t, "", "submit", "--store", store, "--coalesce", "", "exec", "mine")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "--coalesce is empty")

	// A job file bound to another store is not applied to this one.
	require.NoError(t, os.WriteFile(job, []byte(`{"store":"0123456789abcdef","ops":[{"op":"put","path":"a","data":"x"}]}`), 0o600))
	r = scribe(t, "", "submit", "--store", store, "--job", job)
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "rejected (wrong_store): job is for store 0123456789abcdef, this is ")
	entries, err := os.ReadDir(store)
	require.NoError(t, err)
	for _, e := range entries {
		assert.Equal(t, ".scribe", e.Name(), "nothing but scribe's own folder")
	}
}

// serve refuses a --lock-file in a folder that does not exist, instead of
// waiting for ever for a lock it cannot take.
func TestEdgeServeLockFileFolder(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	gone := filepath.Join(t.TempDir(), "gone")
	r := scribe(t, "", "serve", "--store", store, "--lock-file", filepath.Join(gone, "index.lock"))
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "its folder "+gone+" does not exist")
	assert.NoFileExists(t, queue.Layout{Root: store}.Discovery())
}

// A direct writer given no --lock-file takes the one the store's daemon
// names in its discovery file: while the daemon holds it, the writer is
// refused, and writes nothing. Given another, it is told which to use.
func TestEdgeDirectWriterUsesDaemonLockFile(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	shared := filepath.Join(t.TempDir(), "index.lock")
	startDaemon(t, store, "--lock-file", shared, "--idle-release", "30s")
	real, err := queue.ResolveStore(store)
	require.NoError(t, err)
	d, err := queue.ReadDiscovery(real)
	require.NoError(t, err)
	sharedReal, err := filepath.EvalSymlinks(filepath.Dir(shared))
	require.NoError(t, err)
	sharedReal = filepath.Join(sharedReal, filepath.Base(shared))
	assert.Equal(t, sharedReal, d.LockFile)
	assert.EqualValues(t, 30000, d.IdleReleaseMS)

	r := scribe(t, "", "submit", "--store", store, "--wait", "append", "f.txt", "queued\n")
	require.Equal(t, 0, r.code, r.stderr) // the daemon now holds its lock for 30 s

	r = scribe(t, "", "submit", "--store", store, "--route", "direct", "append", "f.txt", "direct\n")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, "store is busy: lock "+sharedReal+" is held by pid")
	r = scribe(t, "", "lock", "--store", store, "--", "true")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, "lock "+sharedReal)

	other := filepath.Join(t.TempDir(), "other.lock")
	for _, cmd := range [][]string{
		{"submit", "--store", store, "--route", "direct", "--lock-file", other, "append", "f.txt", "other\n"},
		{"lock", "--store", store, "--lock-file", other, "--", "true"},
	} {
		r = scribe(t, "", cmd...)
		assert.Equal(t, 2, r.code, "%v: %s", cmd, r.stderr)
		assert.Contains(t, r.stderr, "takes the store lock "+sharedReal+", not ")
		assert.Contains(t, r.stderr, "scribe: give --lock-file "+sharedReal+", or none")
	}
	assert.Equal(t, "queued\n", readFile(t, filepath.Join(store, "f.txt")), "no direct writer wrote past the daemon")
}
