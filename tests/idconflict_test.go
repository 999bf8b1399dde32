package tests

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// Promise 10 through the CLI: a job ID reused for a different job is an
// id_conflict the caller sees (exit 1, the reason on stderr, never
// "queued" or "applied"), with or without --wait, whether JetStream's
// dedupe window still holds the first job or only the journal knows it
// (after a restart); the same job under the same ID is a retry (exit 0);
// the first outcome and the store never change.
func TestIDConflictThroughTheCLI(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemon(t, store)
	path := filepath.Join(store, "n.txt")
	first := scribe(t, "", "submit", "--store", store, "--wait", "--id", "nightly-X", "append", "n.txt", "first\n")
	require.Equal(t, 0, first.code, first.stderr)
	require.Equal(t, "first\n", readFile(t, path))

	check := func(t *testing.T) {
		for _, c := range []struct {
			name string
			flag []string
		}{
			{"queue only", nil},
			{"wait", []string{"--wait"}},
			{"wait json", []string{"--wait", "--json"}},
		} {
			t.Run("another job/"+c.name, func(t *testing.T) {
				args := append([]string{"submit", "--store", store, "--id", "nightly-X"}, c.flag...)
				r := scribe(t, "", append(args, "append", "n.txt", "second\n")...)
				assert.Equal(t, 1, r.code, "stdout %q, stderr %q", r.stdout, r.stderr)
				assert.Contains(t, r.stderr, "id_conflict")
				if len(c.flag) == 2 { // --json prints the rejection
					var o queue.Outcome
					require.NoError(t, json.Unmarshal([]byte(r.stdout), &o), r.stdout)
					assert.Equal(t, queue.StatusRejected, o.Status)
					assert.Equal(t, queue.ReasonIDConflict, o.Reason)
				} else {
					assert.Empty(t, r.stdout, "neither queued nor applied")
				}
			})
			t.Run("same job/"+c.name, func(t *testing.T) {
				args := append([]string{"submit", "--store", store, "--id", "nightly-X"}, c.flag...)
				r := scribe(t, "", append(args, "append", "n.txt", "first\n")...)
				assert.Equal(t, 0, r.code, "stdout %q, stderr %q", r.stdout, r.stderr)
				assert.Contains(t, r.stdout, "nightly-X")
			})
		}
		assert.Equal(t, "first\n", readFile(t, path), "nothing applied twice, no conflicting job applied")
		st := scribe(t, "", "status", "--store", store, "--json", "nightly-X")
		assert.Equal(t, 0, st.code, st.stderr)
		assert.Contains(t, st.stdout, queue.StatusApplied, "the first outcome never changes")
	}
	t.Run("in the dedupe window", check)
	// JetStream's dedupe window does not survive a restart of a work-queue
	// stream: then only the journal knows the ID.
	d.stop(t)
	startDaemon(t, store)
	t.Run("after a restart", check)
}
