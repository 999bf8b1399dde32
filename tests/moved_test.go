package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// The store ID is a hash of the store's path, so renaming
// the folder gives it a new ID and a new stream, while the queue (inside
// the folder) still holds the old stream's jobs. The daemon on the new
// path must drain them first, in order, exactly once, record their
// outcomes where status finds them, and lift the stranded mark only then.
func TestMovedStoreKeepsQueuedJobs(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	old := filepath.Join(parent, "notes")
	require.NoError(t, os.Mkdir(old, 0o755))
	d := startDaemon(t, old)
	release := holdWithFlock(t, filepath.Join(old, ".scribe", "lock")) // the writer defers
	const n = 20
	id := func(i int) string { return fmt.Sprintf("job-%02d", i) }
	want := ""
	for i := range n {
		r := scribe(t, "", "submit", "--store", old, "--route", "require", "--json", "--id", id(i), "append", "log.txt", id(i)+"\n")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, `"queued"`)
		want += id(i) + "\n"
	}
	d.stop(t) // the jobs stay queued
	release()
	require.FileExists(t, queue.Layout{Root: old}.Stranded(), "the daemon left its queue stranded")
	require.Empty(t, readFile(t, filepath.Join(old, "log.txt")))

	moved := filepath.Join(parent, "Notes")
	require.NoError(t, os.Rename(old, moved))
	require.NotEqual(t, storeID(t, old, parent), storeID(t, moved, parent), "the move changed the store ID")
	d = startDaemon(t, moved)
	log := filepath.Join(moved, "log.txt")
	require.Eventually(t, func() bool { return readFile(t, log) == want }, 30*time.Second, 20*time.Millisecond,
		"the jobs queued under the old path apply once each, in order")
	for i := range n {
		r := scribe(t, "", "status", "--store", moved, "--json", id(i))
		require.Equal(t, 0, r.code, "status finds %s: %s", id(i), r.stderr)
		var o queue.Outcome
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &o))
		assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s", id(i), o.Detail)
	}
	require.Eventually(t, func() bool {
		_, err := os.Stat(queue.Layout{Root: moved}.Stranded())
		return os.IsNotExist(err)
	}, 20*time.Second, 20*time.Millisecond, "the stranded marker is lifted once every stream is drained")
	assert.Contains(t, d.log.String(), "store moved", "the daemon says what it did")

	// New jobs apply after the old ones; a restart finds nothing left.
	r := scribe(t, "", "submit", "--store", moved, "--wait", "--id", "after", "append", "log.txt", "after\n")
	require.Equal(t, 0, r.code, r.stderr)
	d.stop(t)
	assert.NoFileExists(t, queue.Layout{Root: moved}.Stranded())
	d = startDaemon(t, moved)
	assert.Equal(t, want+"after\n", readFile(t, log))
	d.stop(t)
	assert.NotContains(t, d.log.String(), "store moved", "the old stream was deleted once drained")
}

// storeID is the ID of a store folder, which need not exist any more: its
// path with the parent's symlinks resolved.
func storeID(t *testing.T, dir, parent string) string {
	t.Helper()
	real, err := filepath.EvalSymlinks(parent)
	require.NoError(t, err)
	return queue.StoreID(filepath.Join(real, filepath.Base(dir)))
}

// A daemon whose store is moved away while it serves, a new store made
// at the old path, stops within seconds, or at once when told to: it
// applies nothing through the path, leaves the new store's stranded
// marker and discovery alone, and the job it held queued applies once a
// daemon serves the store where it went.
func TestDaemonStopsWhenItsStoreMoves(t *testing.T) {
	t.Parallel()
	for _, told := range []bool{false, true} {
		t.Run(fmt.Sprintf("told=%v", told), func(t *testing.T) {
			t.Parallel()
			parent := t.TempDir()
			path := filepath.Join(parent, "notes")
			require.NoError(t, os.Mkdir(path, 0o755))
			a := startDaemon(t, path)
			r := scribe(t, "", "submit", "--store", path, "--route", "require", "--wait", "append", "log.txt", "one\n")
			require.Equal(t, 0, r.code, r.stderr)
			release := holdWithFlock(t, filepath.Join(path, ".scribe", "lock")) // the writer defers: job two stays queued
			r = scribe(t, "", "submit", "--store", path, "--route", "require", "--id", "two", "append", "log.txt", "two\n")
			require.Equal(t, 0, r.code, r.stderr)

			moved := filepath.Join(parent, "archive")
			require.NoError(t, os.Rename(path, moved))
			require.NoError(t, os.Mkdir(path, 0o755))
			r = scribe(t, "", "submit", "--store", path, "--route", "direct", "append", "log.txt", "new store\n")
			require.Equal(t, 0, r.code, r.stderr)
			require.NoError(t, queue.MarkStranded(path, "the new store's own jobs wait"))

			a.killed = true // its exit is the test's, checked here
			// Told before it sees the move, most often; it may have
			// stopped already.
			if told {
				if err := a.cmd.Process.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
					require.NoError(t, err)
				}
			}
			require.True(t, a.exitedWithin(15*time.Second), "the daemon stops once its store is gone from its path; log:\n%s", a.log.String())
			if !told {
				require.Error(t, a.err, "it stops with an error")
				assert.Contains(t, a.log.String(), "no longer the store this daemon locked")
			}
			s, err := queue.ReadStranded(path)
			require.NoError(t, err)
			require.NotNil(t, s, "the new store's stranded marker stays")
			assert.Equal(t, "the new store's own jobs wait", s.Why)
			assert.NoFileExists(t, queue.Layout{Root: path}.Discovery(), "no daemon announced for the new store")
			assert.Equal(t, "new store\n", readFile(t, filepath.Join(path, "log.txt")), "nothing of the moved store's queue was applied here")

			release()
			startDaemon(t, moved)
			require.Eventually(t, func() bool { return readFile(t, filepath.Join(moved, "log.txt")) == "one\ntwo\n" }, 30*time.Second, 20*time.Millisecond,
				"the queued job applies, once, where the store went")
		})
	}
}
