package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/daemon"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// locate waits until Locate answers id with state, and returns it.
func locate(t *testing.T, w *daemon.Writer, id string, state queue.JobState) queue.Lookup {
	t.Helper()
	var l queue.Lookup
	require.Eventually(t, func() bool {
		l = w.Locate(t.Context(), id)
		return l.State == state
	}, 10*time.Second, 10*time.Millisecond, "%s never %s; last: %+v", id, state, &l)
	return l
}

// While another process holds the store, queued jobs are located with
// their positions (the one in the writer's hand too: it waits), an ID not
// queued is unknown, and the listing shows them in order; once applied,
// they are found in the journal and listed newest first.
func TestLocateQueuedJobs(t *testing.T) {
	nc, js := startJetStream(t)
	store, sid := writerStore(t)
	holder := holdInChild(t, store, lock.Options{Command: "outside"})
	w := startWriter(t, store, nc, nil)
	for _, id := range []string{"a", "b", "c"} {
		publishJob(t, js, sid, id, wireJob(t, sid, id, id))
	}
	publishJob(t, js, sid, "", wireJob(t, sid, "d", "no header")) // found by the ID in its body
	// As scribe's clients send data: version 2, the data after the JSON.
	raw, err := queue.Encode(&queue.Job{ID: "e", Store: sid, Submitted: time.Now().UTC(), Ops: []queue.Op{{Kind: queue.OpAppend, Path: "log.txt", Data: []byte("raw\n")}}})
	require.NoError(t, err)
	decoded, err := queue.Decode(raw)
	require.NoError(t, err)
	require.Equal(t, queue.VersionRaw, decoded.V, "%s", raw)
	publishJob(t, js, sid, "", raw)

	l := locate(t, w, "a", queue.StateQueued)
	require.Eventually(t, func() bool {
		l = w.Locate(t.Context(), "a")
		return l.Detail != ""
	}, 10*time.Second, 10*time.Millisecond, "the writer takes a in hand")
	assert.Equal(t, uint64(1), l.Position)
	assert.Equal(t, uint64(5), l.Queued)
	assert.Contains(t, l.Detail, "waits for the store", "in hand, but waiting: as good as queued")
	assert.False(t, l.Found)

	for _, tt := range []struct {
		id   string
		pos  uint64
		want queue.JobState
	}{
		{"b", 2, queue.StateQueued},
		{"c", 3, queue.StateQueued},
		{"d", 4, queue.StateQueued},
		{"e", 5, queue.StateQueued},
		{"nope", 0, queue.StateUnknown},
		{"bad id!", 0, queue.StateUnknown},
	} {
		l := w.Locate(t.Context(), tt.id)
		assert.Equal(t, tt.want, l.State, tt.id)
		assert.Equal(t, tt.pos, l.Position, tt.id)
		assert.Empty(t, l.Error, tt.id)
	}
	assert.Contains(t, w.Locate(t.Context(), "nope").Detail, "not among the 5 queued jobs")

	list := w.Jobs(t.Context(), queue.JobsQuery{})
	require.Empty(t, list.Error)
	assert.Empty(t, list.Outcomes)
	assert.Equal(t, uint64(5), list.QueuedTotal)
	require.Len(t, list.Queued, 5)
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		q := list.Queued[i]
		assert.Equal(t, id, q.ID)
		assert.Equal(t, uint64(i+1), q.Position)
		assert.Equal(t, queue.StateQueued, q.State)
		assert.Equal(t, []string{"append"}, q.Ops, id)
	}
	assert.False(t, list.Queued[4].Submitted.IsZero(), "a version 2 job's submitted time is read")
	assert.Len(t, w.Jobs(t.Context(), queue.JobsQuery{State: queue.StateQueued, Limit: 2}).Queued, 2, "the limit holds")
	assert.NotEmpty(t, w.Jobs(t.Context(), queue.JobsQuery{State: "stuck"}).Error)

	rep := w.Report(t.Context())
	assert.Equal(t, 1, rep.InFlight, "the first jobs are applied one at a time")
	require.NotNil(t, rep.Holder, "the kernel says the helper holds the lock, and it wrote who it is")
	assert.Equal(t, holder.cmd.Process.Pid, rep.Holder.PID)

	holder.Stop(t)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, id).Status)
	}
	l = w.Locate(t.Context(), "c")
	assert.True(t, l.Found)
	assert.Equal(t, queue.StateApplied, l.State)

	list = w.Jobs(t.Context(), queue.JobsQuery{})
	require.Empty(t, list.Error)
	ids := func(outs []*queue.Outcome) (s []string) {
		for _, o := range outs {
			s = append(s, o.ID)
		}
		return s
	}
	assert.Equal(t, []string{"e", "d", "c", "b", "a"}, ids(list.Outcomes), "newest first")
	assert.Equal(t, []string{"e", "d"}, ids(w.Jobs(t.Context(), queue.JobsQuery{State: queue.StateApplied, Limit: 2}).Outcomes))
	assert.Empty(t, w.Jobs(t.Context(), queue.JobsQuery{State: queue.StateRejected}).Outcomes)
	require.Eventually(t, func() bool {
		list = w.Jobs(t.Context(), queue.JobsQuery{})
		return list.QueuedTotal == 0 && len(list.Queued) == 0
	}, 10*time.Second, 10*time.Millisecond, "the acked jobs leave the queue")
	rep = w.Report(t.Context())
	require.NotNil(t, rep.Journal)
	assert.Equal(t, 5, rep.Journal.Outcomes)
	assert.Equal(t, journal.Path(store), rep.Journal.Path)
	assert.Positive(t, rep.Journal.Bytes)
}

// A search of the queue is bounded: a job beyond the bound is unknown,
// and the answer says how far the search went.
func TestLocateScanLimit(t *testing.T) {
	t.Cleanup(daemon.SetScanLimit(2))
	nc, js := startJetStream(t)
	store, sid := writerStore(t)
	holdInChild(t, store, lock.Options{Command: "outside"})
	w := startWriter(t, store, nc, nil)
	for _, id := range []string{"a", "b", "c"} {
		publishJob(t, js, sid, id, wireJob(t, sid, id, id))
	}
	assert.Equal(t, uint64(2), locate(t, w, "b", queue.StateQueued).Position)
	l := w.Locate(t.Context(), "c")
	assert.Equal(t, queue.StateUnknown, l.State)
	assert.Contains(t, l.Detail, "not among the 2 oldest of 3 queued jobs")
	assert.Len(t, w.Jobs(t.Context(), queue.JobsQuery{State: queue.StateQueued}).Queued, 2)
}

// An exec job whose command runs is in hand; the job behind it is queued.
func TestLocateRunningCommand(t *testing.T) {
	w, js, store, sid := startExecWriter(t, shCommand("block", `touch started; while [ ! -e go ]; do sleep 0.05; done`))
	publishJob(t, js, sid, "x", execJob(t, sid, "x", "block", ""))
	publishJob(t, js, sid, "y", wireJob(t, sid, "y", "after"))
	var l queue.Lookup
	require.Eventually(t, func() bool {
		l = w.Locate(t.Context(), "x")
		return l.State == queue.StateInHand && strings.Contains(l.Detail, "its command runs")
	}, 10*time.Second, 10*time.Millisecond, "x's command runs; last: %+v", &l)
	assert.Equal(t, uint64(1), l.Position)
	l = locate(t, w, "y", queue.StateQueued)
	assert.Equal(t, uint64(2), l.Position)
	list := w.Jobs(t.Context(), queue.JobsQuery{State: queue.StateQueued})
	require.Len(t, list.Queued, 2)
	assert.Equal(t, queue.StateInHand, list.Queued[0].State)
	assert.Equal(t, []string{"exec block"}, list.Queued[0].Ops)
	require.NoError(t, os.WriteFile(filepath.Join(store, "go"), nil, 0o644))
	assert.Equal(t, queue.StatusApplied, outcomeOf(t, w, "y").Status)
	assert.Equal(t, queue.StateApplied, w.Locate(t.Context(), "x").State)
}
