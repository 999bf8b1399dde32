package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// queueAppends queues one append of its ID's line to order.txt per ID,
// in order, each with the priority given.
func queueAppends(t *testing.T, store, priority string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		r := scribe(t, "", "submit", "--store", store, "--priority", priority, "--id", id, "append", "order.txt", id+"\n")
		require.Equal(t, 0, r.code, r.stderr)
	}
}

// applyOrder waits until every job is applied and returns the order they
// were applied in: order.txt's lines.
func applyOrder(t *testing.T, store string, ids ...string) []string {
	t.Helper()
	for _, id := range ids {
		o := decided(t, store, id)
		require.Equal(t, queue.StatusApplied, o.Status, "%s: %s %s", id, o.Reason, o.Detail)
	}
	return strings.Fields(readFile(t, filepath.Join(store, "order.txt")))
}

func names(prefix string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return s
}

// A high job queued behind normal ones is decided before them; the order
// within each class is kept.
func TestPriorityHighFirst(t *testing.T) {
	t.Parallel()
	g := newGatedStore(t)
	startDaemon(t, g.store)
	open := g.close(t, "gate-1")
	normal := names("n", 5)
	queueAppends(t, g.store, "normal", normal...)
	queueAppends(t, g.store, "high", "h1", "h2")
	open()
	got := applyOrder(t, g.store, append(normal, "h1", "h2")...)
	assert.Equal(t, append([]string{"h1", "h2"}, normal...), got)

	r := scribe(t, "", "submit", "--store", g.store, "--priority", "urgent", "append", "order.txt", "x\n")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, `priority "urgent"`)
}

// A flood of high jobs does not starve normal ones: after
// queue.MaxHighBatches batches of high jobs in a row while normal jobs
// wait, one batch of normal jobs is decided. A writer that has just
// started decides its first jobs one per batch (its guard against
// poison), so here each job is a batch of its own. So too with a batch
// smaller than the high jobs waiting: the writer takes in a normal job
// too, to know that one waits.
func TestPriorityNoStarvation(t *testing.T) {
	t.Parallel()
	for _, batch := range []string{"256", "2", "1"} {
		t.Run("batch "+batch, func(t *testing.T) {
			t.Parallel()
			g := newGatedStore(t)
			startDaemon(t, g.store, "--batch", batch)
			open := g.close(t, "gate-1")
			normal, high := names("n", 3), names("h", 10)
			queueAppends(t, g.store, "normal", normal...)
			queueAppends(t, g.store, "high", high...)
			open()
			got := applyOrder(t, g.store, append(normal, high...)...)
			require.Equal(t, 4, queue.MaxHighBatches, "the order below assumes it")
			assert.Equal(t, []string{"h1", "h2", "h3", "h4", "n1", "h5", "h6", "h7", "h8", "n2", "h9", "h10", "n3"}, got)
			var gotNormal, gotHigh []string
			for _, id := range got {
				if strings.HasPrefix(id, "n") {
					gotNormal = append(gotNormal, id)
				} else {
					gotHigh = append(gotHigh, id)
				}
			}
			assert.Equal(t, normal, gotNormal, "normal jobs keep their order")
			assert.Equal(t, high, gotHigh, "high jobs keep their order")
		})
	}
}

// A job file may set the priority itself; --priority, given, overrides it.
func TestPriorityInJobFile(t *testing.T) {
	t.Parallel()
	g := newGatedStore(t)
	startDaemon(t, g.store)
	open := g.close(t, "gate-1")
	queueAppends(t, g.store, "normal", "n1")
	job := filepath.Join(t.TempDir(), "job.json")
	require.NoError(t, os.WriteFile(job, []byte(`{"id":"h1","priority":"high","ops":[{"op":"append","path":"order.txt","data":"h1\n"}]}`), 0o600))
	r := scribe(t, "", "submit", "--store", g.store, "--job", job)
	require.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "", "submit", "--store", g.store, "--priority", "normal", "--id", "x1", "--job", job)
	require.Equal(t, 0, r.code, r.stderr)
	open()
	got := applyOrder(t, g.store, "n1", "h1", "x1")
	assert.Equal(t, []string{"h1", "n1", "h1"}, got, "x1 (the same file's data) normal, after n1")
	require.Eventually(t, func() bool {
		rep, ok := report(t, g.store)
		return ok && rep.Queued == 0
	}, 10*time.Second, 20*time.Millisecond)
}

// submitAppends queues, through one Go client, one append of its ID's
// line to order.txt per ID, in order: faster than a process each, for a
// backlog deeper than the writer takes at once.
func submitAppends(t *testing.T, store string, p queue.Priority, ids ...string) {
	t.Helper()
	cl, err := client.Open(t.Context(), store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	defer cl.Close()
	for _, id := range ids {
		job := &queue.Job{ID: id, Priority: p, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "order.txt", Data: []byte(id + "\n")}}}
		require.NoError(t, cl.Submit(t.Context(), job))
	}
}

// A high job is decided first however deep the backlog of normal jobs
// queued ahead of it: here four times what the writer takes at once (a
// batch). scribe jobs lists it first, marked high.
func TestPriorityOvertakesDeepBacklog(t *testing.T) {
	t.Parallel()
	g := newGatedStore(t)
	startDaemon(t, g.store)
	open := g.close(t, "gate-1")
	normal := names("n", 4*256)
	submitAppends(t, g.store, queue.PriorityNormal, normal...)
	queueAppends(t, g.store, "high", "h1")

	r := scribe(t, "", "jobs", "--store", g.store, "--state", "queued", "--limit", "3", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var list struct {
		Queued      []queue.QueuedJob `json:"queued"`
		QueuedTotal uint64            `json:"queued_total"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.Len(t, list.Queued, 3, r.stdout)
	assert.Equal(t, "gate-1", list.Queued[0].ID, "in hand, waiting for the gate")
	assert.Equal(t, "h1", list.Queued[1].ID, "the next to be decided")
	assert.Equal(t, queue.PriorityHigh, list.Queued[1].Priority)
	assert.Equal(t, "n1", list.Queued[2].ID)
	assert.Empty(t, list.Queued[2].Priority)
	assert.EqualValues(t, len(normal)+2, list.QueuedTotal)
	r = scribe(t, "", "jobs", "--store", g.store, "--state", "queued", "--limit", "2")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "2. h1  queued  high, seq ")

	open()
	got := applyOrder(t, g.store, "h1", normal[len(normal)-1])
	assert.Equal(t, append([]string{"h1"}, normal...), got)
}

// A daemon killed while it decides high and normal jobs loses none and
// applies none twice: each class is purged from the queue only up to its
// own oldest undecided job, and the next daemon finds the rest, in order.
func TestPriorityClassesSurviveKill(t *testing.T) {
	t.Parallel()
	heavy(t)
	g := newGatedStore(t)
	d := startDaemon(t, g.store)
	open := g.close(t, "gate-1")
	normal, high := names("n", 300), names("h", 150)
	submitAppends(t, g.store, queue.PriorityNormal, normal...)
	submitAppends(t, g.store, queue.PriorityHigh, high...)
	open()
	order := filepath.Join(g.store, "order.txt")
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(order)
		return len(strings.Fields(string(b))) >= 200
	}, 30*time.Second, time.Millisecond, "the writer decides jobs of both classes")
	d.kill(t)
	startDaemon(t, g.store)
	got := applyOrder(t, g.store, append(normal, high...)...)
	seen := map[string]int{}
	var gotNormal, gotHigh []string
	for _, id := range got {
		seen[id]++
		if strings.HasPrefix(id, "n") {
			gotNormal = append(gotNormal, id)
		} else {
			gotHigh = append(gotHigh, id)
		}
	}
	for id, n := range seen {
		assert.Equal(t, 1, n, "%s applied once", id)
	}
	assert.Equal(t, normal, gotNormal, "every normal job, once, in order")
	assert.Equal(t, high, gotHigh, "every high job, once, in order")
	assert.Less(t, slices.Index(got, "h150"), slices.Index(got, "n300"), "the high jobs went first")
}
