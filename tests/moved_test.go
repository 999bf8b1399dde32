package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
