package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// settledMark is what the store's settled mark says: "written" (the
// files of the last batch written, not yet fsynced), "synced", or "".
func settledMark(t testing.TB, store string) string {
	t.Helper()
	b, err := os.ReadFile(queue.Layout{Root: store}.Settled())
	if os.IsNotExist(err) {
		return ""
	}
	require.NoError(t, err)
	switch {
	case strings.HasPrefix(string(b), "scribe written v1 "):
		return "written"
	case strings.HasPrefix(string(b), "scribe settled v1 "):
		return "synced"
	}
	return ""
}

// With --sync a duration, a batch is answered before its files are
// fsynced; the fsync follows, by a timer, while the daemon keeps the
// store. A daemon SIGKILLed before it came hides nothing from status,
// wait, jobs or MCP, and the next daemon finishes the batches, writing
// no job's bytes twice.
func TestSyncBehindAnswersBeforeTheFilesSync(t *testing.T) {
	t.Parallel()
	submit := func(t *testing.T, store, id string, args ...string) queue.Status {
		t.Helper()
		r := scribe(t, "", append([]string{"submit", "--store", store, "--route", "require", "--wait=30s", "--json", "--id", id}, args...)...)
		require.Contains(t, []int{0, 1}, r.code, "%s: %s", id, r.stderr)
		var o queue.Outcome
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &o), r.stdout)
		return o.Status
	}
	t.Run("synced later", func(t *testing.T) {
		store := newStore(t)
		startDaemon(t, store, "--sync", "300ms", "--idle-release", "1h")
		require.Equal(t, queue.StatusApplied, submit(t, store, "a", "append", "notes.md", "one\n"))
		assert.Equal(t, "written", settledMark(t, store), "answered before the fsync")
		require.Eventually(t, func() bool { return settledMark(t, store) == "synced" }, 10*time.Second, 20*time.Millisecond,
			"the idle daemon syncs the files")
	})
	t.Run("killed before the fsync", func(t *testing.T) {
		store := newStore(t)
		d := startDaemon(t, store, "--sync", "1h", "--idle-release", "1h")
		told := map[string]queue.Status{}
		for i := range 3 {
			id := fmt.Sprintf("note-%d", i)
			told[id] = submit(t, store, id, "append", "notes.md", id+"\n")
		}
		told["doc"] = submit(t, store, "doc", "put", "docs/a.md", "# a\n")
		told["taken"] = submit(t, store, "taken", "--if-match", "absent", "put", "notes.md", "x")
		require.Equal(t, queue.StatusRejected, told["taken"])
		assert.Equal(t, "written", settledMark(t, store))
		d.kill(t)
		assertTold(t, store, told)

		startDaemon(t, store)
		r := scribe(t, "", "status", "--store", store, "--json", "note-2")
		assert.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, `"status": "applied"`, "the status service")
		assert.Equal(t, "note-0\nnote-1\nnote-2\n", readFile(t, filepath.Join(store, "notes.md")))
		assert.Equal(t, "# a\n", readFile(t, filepath.Join(store, "docs/a.md")))
	})
	t.Run("power cut after a rejected exec job", func(t *testing.T) {
		// An exec job decided without a run records its outcome between
		// the batches; the journal must still hold the append it follows,
		// whose file is not synced.
		store := newStore(t)
		d := startDaemon(t, store, "--sync", "1h", "--idle-release", "1h")
		require.Equal(t, queue.StatusApplied, submit(t, store, "a", "append", "notes.md", "one\n"))
		require.Equal(t, queue.StatusRejected, submit(t, store, "x", "exec", "nope"))
		assert.Equal(t, "written", settledMark(t, store))
		d.kill(t)
		// The page cache lost: the unsynced file and mark are gone.
		require.NoError(t, os.Remove(filepath.Join(store, "notes.md")))
		require.NoError(t, os.Remove(queue.Layout{Root: store}.Settled()))

		r := scribe(t, "", "recover", "--store", store)
		require.Equal(t, 0, r.code, r.stderr)
		assertTold(t, store, map[string]queue.Status{"a": queue.StatusApplied, "x": queue.StatusRejected})
		assert.Equal(t, "one\n", readFile(t, filepath.Join(store, "notes.md")), "the applied job's line is redone")
	})
}
