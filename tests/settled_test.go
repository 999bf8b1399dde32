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

// assertTold checks, with no daemon and no other holder of the store,
// that every way of asking reports the outcome each job's caller was
// told: status, wait, jobs and MCP's outcome tool; that status shows no
// interrupted batch; and that status --json counts the journal's applied
// and rejected jobs.
func assertTold(t *testing.T, store string, told map[string]queue.Status) {
	t.Helper()
	var applied, rejected int
	for id, want := range told {
		r := scribe(t, "", "status", "--store", store, id)
		wantCode := 0 // status exits 0 for any recorded outcome
		assert.Equal(t, wantCode, r.code, "status %s: %s", id, r.stderr)
		assert.Contains(t, r.stdout, fmt.Sprintf("job %s: %s", id, want), "status %s", id)
		r = scribe(t, "", "wait", "--store", store, "--timeout", "2s", id)
		if want == queue.StatusApplied {
			applied++
			assert.Equal(t, 0, r.code, "wait %s: %s", id, r.stderr)
		} else {
			rejected++
			assert.Equal(t, 1, r.code, "wait %s (rejected): %s", id, r.stderr)
		}
	}
	r := scribe(t, "", "jobs", "--store", store, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var list struct {
		Outcomes []queue.Outcome `json:"outcomes"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	listed := map[string]queue.Status{}
	for _, o := range list.Outcomes {
		listed[o.ID] = o.Status
	}
	assert.Equal(t, told, listed, "jobs lists every outcome a caller heard")

	m, _ := statusKeys(t, store)
	assert.Nil(t, m["daemon"])
	assert.Nil(t, m["interrupted"], "nothing is unfinished")
	assert.EqualValues(t, applied, m["applied"], "applied, counted from the journal")
	assert.EqualValues(t, rejected, m["rejected"], "rejected, counted from the journal")
	assert.EqualValues(t, len(told), m["journal"].(map[string]any)["outcomes"])
	r = scribe(t, "", "status", "--store", store)
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "interrupted batch")
	assert.Contains(t, r.stdout, fmt.Sprintf("journal: %d outcomes (%d applied, %d rejected)", len(told), applied, rejected))

	mcp := startMCP(t, store)
	for id, want := range told {
		res := mcp.call(t, "outcome", map[string]any{"id": id})
		assert.False(t, res.IsError, mcpText(res))
		assert.Contains(t, mcpText(res), fmt.Sprintf("job %s: %s", id, want), "MCP outcome %s", id)
	}
	mcp.close(t)
}

// An outcome a caller has been told is reported as told at every instant,
// daemon or not: the daemon SIGKILLed right after answering, or idle after
// answering everything, leaves nothing that status, wait, jobs or MCP's
// outcome tool hide, and no interrupted batch. (The daemon keeps the
// store lock while idle, --idle-release 1h, so that the kill finds the
// last batch's intent still in the journal, as a kill within the default
// 500 ms does.) Then a daemon started on the store tells the same through
// its status service.
func TestStatusKeepsWhatCallerWasTold(t *testing.T) {
	t.Parallel()
	submit := func(t *testing.T, store, id string, args ...string) queue.Outcome {
		t.Helper()
		r := scribe(t, "", append([]string{"submit", "--store", store, "--route", "require", "--wait=30s", "--json", "--id", id}, args...)...)
		require.Contains(t, []int{0, 1}, r.code, "%s: %s", id, r.stderr)
		var o queue.Outcome
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &o), r.stdout)
		require.Equal(t, id, o.ID)
		return o
	}
	t.Run("killed right after answering", func(t *testing.T) {
		store := newStore(t)
		d := startDaemon(t, store, "--idle-release", "1h")
		o := submit(t, store, "note-4", "append", "notes.md", "four\n")
		require.Equal(t, queue.StatusApplied, o.Status)
		d.kill(t)
		assertTold(t, store, map[string]queue.Status{"note-4": queue.StatusApplied})

		d = startDaemon(t, store)
		r := scribe(t, "", "status", "--store", store, "--json", "note-4")
		assert.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, `"status": "applied"`, "the status service")
		assert.Equal(t, "four\n", readFile(t, filepath.Join(store, "notes.md")))
	})
	t.Run("killed idle after answering everything", func(t *testing.T) {
		store := newStore(t)
		d := startDaemon(t, store, "--idle-release", "1h")
		told := map[string]queue.Status{}
		for i := range 3 {
			id := fmt.Sprintf("note-%d", i)
			told[id] = submit(t, store, id, "append", "notes.md", id+"\n").Status
		}
		told["taken"] = submit(t, store, "taken", "--if-match", "absent", "put", "notes.md", "x").Status
		require.Equal(t, queue.StatusRejected, told["taken"])
		told["last"] = submit(t, store, "last", "put", "last.md", "the last one").Status
		require.Eventually(t, func() bool {
			m, _ := statusKeys(t, store)
			return m["daemon"] != nil && m["queued"] == float64(0) && m["in_flight"] == float64(0)
		}, 10*time.Second, 20*time.Millisecond, "idle")
		d.kill(t)
		assertTold(t, store, told)
		assert.Equal(t, "note-0\nnote-1\nnote-2\n", readFile(t, filepath.Join(store, "notes.md")))
	})
}

// What may really be unfinished still shows so: a daemon killed after a
// batch's journal commit but before its files are all on disk and
// fsynced (SCRIBE_CRASH_AT=intent, file, files; its caller was told
// nothing) leaves an interrupted batch whose outcome no look-up shows
// as applied, until a holder redoes it.
func TestStatusShowsUnfinishedBatchUntilRedone(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"intent", "file", "files"} {
		t.Run(step, func(t *testing.T) {
			store := newStore(t)
			d := spawnDaemon(t, store, []string{"SCRIBE_CRASH_AT=" + step})
			d.killed = true // by its own hand
			require.Eventually(t, func() bool {
				r := scribe(t, "", "submit", "--store", store, "--route", "require", "--id", "cut", "append", "notes.md", "cut\n")
				return r.code == 0
			}, 30*time.Second, 20*time.Millisecond, "queued")
			select {
			case <-d.exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("the daemon did not die at %s:\n%s", step, d.log.String())
			}

			r := scribe(t, "", "status", "--store", store, "cut")
			assert.Equal(t, 1, r.code, "status: not applied: %s", r.stdout)
			assert.NotContains(t, r.stdout, "applied")
			r = scribe(t, "", "wait", "--store", store, "--timeout", "2s", "cut")
			assert.Equal(t, 75, r.code, "wait: not decided: %+v", r)
			applied, rejected, _ := jobsList(t, store)
			assert.Equal(t, []int{0, 0}, []int{applied, rejected}, "jobs lists nothing")
			m, _ := statusKeys(t, store)
			assert.Equal(t, map[string]any{"jobs": float64(1), "files": float64(1)}, m["interrupted"])
			assert.EqualValues(t, 0, m["applied"])
			assert.EqualValues(t, 0, m["journal"].(map[string]any)["outcomes"])
			r = scribe(t, "", "status", "--store", store)
			assert.Contains(t, r.stdout, "interrupted batch: 1 jobs, 1 files")

			// A direct holder redoes it; then it stands, once.
			r = scribe(t, "", "lock", "--store", store, "--", "true")
			require.Equal(t, 0, r.code, r.stderr)
			assertTold(t, store, map[string]queue.Status{"cut": queue.StatusApplied})
			assert.Equal(t, "cut\n", readFile(t, filepath.Join(store, "notes.md")))
		})
	}
}

// The settled mark is owner-only like the rest of .scribe, and is found
// by no job: a path into .scribe is rejected.
func TestSettledMarkIsPrivate(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	r := scribe(t, "", "submit", "--store", store, "--route", "direct", "append", "a.md", "x")
	require.Equal(t, 0, r.code, r.stderr)
	fi, err := os.Lstat(queue.Layout{Root: store}.Settled())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode())
	r = scribe(t, "", "submit", "--store", store, "--route", "direct", "put", ".scribe/settled", "forged")
	assert.Equal(t, 1, r.code)
	assert.True(t, strings.Contains(r.stderr, "path_escapes") || strings.Contains(r.stderr, ".scribe"), r.stderr)
}
