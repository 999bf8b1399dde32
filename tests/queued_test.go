package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

const producers, perProducer = 16, 25

// runProducers runs producers concurrent goroutines, each running
// perProducer `scribe submit --wait` processes one after another.
func runProducers(t *testing.T, store string, args func(p, i int) []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, producers*perProducer)
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				r := scribe(t, "", append([]string{"submit", "--store", store, "--wait"}, args(p, i)...)...)
				if r.code != 0 {
					errs <- fmt.Sprintf("producer %d job %d: exit %d: %s", p, i, r.code, r.stderr)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// 16 concurrent producers × 25 real `scribe submit --wait`
// processes through one daemon lose, double and reorder nothing.
func TestConcurrentSubmitProcesses(t *testing.T) {
	t.Parallel()
	heavy(t)
	store := newStore(t)
	startDaemon(t, store)

	t.Run("append", func(t *testing.T) {
		runProducers(t, store, func(p, i int) []string {
			return []string{"append", "log.txt", fmt.Sprintf("producer %02d line %02d\n", p, i)}
		})
		lines := strings.Split(strings.TrimSuffix(readFile(t, filepath.Join(store, "log.txt")), "\n"), "\n")
		require.Len(t, lines, producers*perProducer)
		seen := map[string]int{}
		next := map[int]int{} // producer → next line number expected
		for _, l := range lines {
			seen[l]++
			var p, i int
			_, err := fmt.Sscanf(l, "producer %d line %d", &p, &i)
			require.NoError(t, err, "line %q", l)
			assert.Equal(t, next[p], i, "producer %d's lines out of order", p)
			next[p] = i + 1
		}
		for p := range producers {
			for i := range perProducer {
				assert.Equal(t, 1, seen[fmt.Sprintf("producer %02d line %02d", p, i)], "producer %d line %d", p, i)
			}
		}
	})

	t.Run("merge", func(t *testing.T) {
		runProducers(t, store, func(p, i int) []string {
			return []string{"merge", "state.json", fmt.Sprintf(`{"p%02d-%02d": {"n": %d}}`, p, i, i)}
		})
		var doc map[string]map[string]int
		require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(store, "state.json"))), &doc), "state.json must be valid JSON")
		assert.Len(t, doc, producers*perProducer)
		for p := range producers {
			for i := range perProducer {
				assert.Equal(t, map[string]int{"n": i}, doc[fmt.Sprintf("p%02d-%02d", p, i)])
			}
		}
	})
}

// A job ID already applied returns the recorded outcome and
// changes nothing, through the daemon and directly; the same ID for a
// different job is a conflict.
func TestResubmitAppliedID(t *testing.T) {
	t.Parallel()
	for _, route := range []string{"prefer", "direct"} {
		t.Run(route, func(t *testing.T) {
			store := newStore(t)
			if route == "prefer" {
				startDaemon(t, store)
			}
			first := scribe(t, "", "submit", "--store", store, "--route", route, "--wait", "--json", "--id", "job-1", "append", "f.txt", "once\n")
			require.Equal(t, 0, first.code, first.stderr)
			again := scribe(t, "", "submit", "--store", store, "--route", route, "--wait", "--json", "--id", "job-1", "append", "f.txt", "once\n")
			require.Equal(t, 0, again.code, again.stderr)
			// The same ID for a different job is a conflict, never the
			// first job's outcome.
			other := scribe(t, "", "submit", "--store", store, "--route", route, "--wait", "--json", "--id", "job-1", "append", "f.txt", "twice\n")
			require.Equal(t, 1, other.code, "%+v", other)
			assert.Contains(t, other.stderr, string(queue.ReasonIDConflict))

			var o1, o2 queue.Outcome
			require.NoError(t, json.Unmarshal([]byte(first.stdout), &o1))
			require.NoError(t, json.Unmarshal([]byte(again.stdout), &o2))
			assert.Equal(t, o1, o2, "the recorded outcome must be returned unchanged")
			assert.Equal(t, queue.StatusApplied, o1.Status)
			assert.Equal(t, "once\n", readFile(t, filepath.Join(store, "f.txt")))
		})
	}
}

// Bad jobs are rejected with a reason code, change nothing,
// and do not block the next job: from the CLI, and published raw on the
// queue so that only the daemon's writer can catch them.
func TestRejectedJobsDoNotBlock(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	require.NoError(t, os.WriteFile(filepath.Join(store, "doc.json"), []byte(`{"a":1}`), 0o644))
	outside := filepath.Join(filepath.Dir(store), "outside.txt")
	// An unknown OP on the command line is a usage error (exit 2, no job
	// built); in a job file it is the job's rejection.
	unknownOp := filepath.Join(t.TempDir(), "unknown-op.json")
	require.NoError(t, os.WriteFile(unknownOp, []byte(`{"ops":[{"op":"frobnicate","path":"f.txt","data":"x"}]}`), 0o644))

	cli := []struct {
		name   string
		args   []string
		reason queue.Reason
	}{
		{"path leaves the store", []string{"append", "../outside.txt", "x"}, queue.ReasonPathEscapes},
		{"unknown op", []string{"--job", unknownOp}, queue.ReasonUnknownOp},
		{"merge of invalid JSON", []string{"merge", "doc.json", "{not json"}, queue.ReasonInvalidJSON},
		{"merge into a non-object", []string{"merge", "list.json", `{"a":1}`}, queue.ReasonInvalidJSON},
	}
	require.NoError(t, os.WriteFile(filepath.Join(store, "list.json"), []byte(`[1,2]`), 0o644))
	for _, c := range cli {
		t.Run("cli/"+c.name, func(t *testing.T) {
			r := scribe(t, "", append([]string{"submit", "--store", store, "--wait"}, c.args...)...)
			assert.Equal(t, 1, r.code, r.stderr)
			assert.Contains(t, r.stderr, string(c.reason))
			ok := scribe(t, "", "submit", "--store", store, "--wait", "append", "next.txt", c.name+"\n")
			assert.Equal(t, 0, ok.code, ok.stderr)
		})
	}

	// Raw publishes, as a client in another language could send them.
	disc, err := queue.ReadDiscovery(store)
	require.NoError(t, err)
	nc, err := nats.Connect(disc.URL, pinned(t, disc), nats.UserInfo(disc.User, disc.Password))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	id := queue.StoreID(disc.Store)
	raw := []struct {
		id, body string
		reason   queue.Reason
	}{
		{"raw-escape", `{"v":1,"id":"raw-escape","store":"` + id + `","ops":[{"op":"put","path":"../outside.txt","data":"x"}]}`, queue.ReasonPathEscapes},
		{"raw-unknown", `{"v":1,"id":"raw-unknown","store":"` + id + `","ops":[{"op":"chmod","path":"f.txt"}]}`, queue.ReasonUnknownOp},
		{"raw-badmerge", `{"v":1,"id":"raw-badmerge","store":"` + id + `","ops":[{"op":"merge","path":"doc.json","data":"[1"}]}`, queue.ReasonInvalidJSON},
		{"raw-version", `{"v":7,"id":"raw-version","store":"` + id + `","ops":[]}`, queue.ReasonBadVersion},
		{"raw-notjson", `{"v":1,"id":"raw-notjson", garbage`, queue.ReasonBadInput},
		{"raw-good", `{"v":1,"id":"raw-good","store":"` + id + `","ops":[{"op":"append","path":"next.txt","data":"raw good\n"}]}`, ""},
	}
	for _, r := range raw {
		_, err := queue.Publish(t.Context(), js, id, queue.JobsSubject(id), r.id, []byte(r.body))
		require.NoError(t, err)
	}
	for _, r := range raw {
		var out *queue.Outcome
		require.Eventually(t, func() bool {
			res := scribe(t, "", "status", "--store", store, "--json", r.id)
			if res.code != 0 {
				return false
			}
			out = new(queue.Outcome)
			return json.Unmarshal([]byte(res.stdout), out) == nil
		}, 20*time.Second, 50*time.Millisecond, "outcome of %s", r.id)
		if r.reason == "" {
			assert.Equal(t, queue.StatusApplied, out.Status, r.id)
		} else {
			assert.Equal(t, queue.StatusRejected, out.Status, r.id)
			assert.Equal(t, r.reason, out.Reason, r.id)
		}
	}
	assert.NoFileExists(t, outside)
	assert.Equal(t, `{"a":1}`, readFile(t, filepath.Join(store, "doc.json")))
	assert.Equal(t, `[1,2]`, readFile(t, filepath.Join(store, "list.json")))
	assert.NoFileExists(t, filepath.Join(store, "f.txt"))
	want := ""
	for _, c := range cli {
		want += c.name + "\n"
	}
	assert.Equal(t, want+"raw good\n", readFile(t, filepath.Join(store, "next.txt")))
}
