package writer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// locate waits until Locate answers id with state, and returns it.
func locate(t *testing.T, w *writer.Writer, id string, state queue.JobState) queue.Lookup {
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

	l := locate(t, w, "a", queue.StateQueued)
	require.Eventually(t, func() bool {
		l = w.Locate(t.Context(), "a")
		return l.Detail != ""
	}, 10*time.Second, 10*time.Millisecond, "the writer takes a in hand")
	assert.Equal(t, uint64(1), l.Position)
	assert.Equal(t, uint64(4), l.Queued)
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
		{"nope", 0, queue.StateUnknown},
		{"bad id!", 0, queue.StateUnknown},
	} {
		l := w.Locate(t.Context(), tt.id)
		assert.Equal(t, tt.want, l.State, tt.id)
		assert.Equal(t, tt.pos, l.Position, tt.id)
		assert.Empty(t, l.Error, tt.id)
	}
	assert.Contains(t, w.Locate(t.Context(), "nope").Detail, "not among the 4 queued jobs")

	list := w.Jobs(t.Context(), queue.JobsQuery{})
	require.Empty(t, list.Error)
	assert.Empty(t, list.Outcomes)
	assert.Equal(t, uint64(4), list.QueuedTotal)
	require.Len(t, list.Queued, 4)
	for i, id := range []string{"a", "b", "c", "d"} {
		q := list.Queued[i]
		assert.Equal(t, id, q.ID)
		assert.Equal(t, uint64(i+1), q.Position)
		assert.Equal(t, queue.StateQueued, q.State)
		assert.Equal(t, []string{"append"}, q.Ops)
	}
	assert.Len(t, w.Jobs(t.Context(), queue.JobsQuery{State: queue.StateQueued, Limit: 2}).Queued, 2, "the limit holds")
	assert.NotEmpty(t, w.Jobs(t.Context(), queue.JobsQuery{State: "stuck"}).Error)

	rep := w.Report(t.Context())
	assert.Equal(t, 1, rep.InFlight, "the first jobs are applied one at a time")
	require.NotNil(t, rep.Holder, "the kernel says the helper holds the lock, and it wrote who it is")
	assert.Equal(t, holder.cmd.Process.Pid, rep.Holder.PID)

	holder.Stop(t)
	for _, id := range []string{"a", "b", "c", "d"} {
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
	assert.Equal(t, []string{"d", "c", "b", "a"}, ids(list.Outcomes), "newest first")
	assert.Equal(t, []string{"d", "c"}, ids(w.Jobs(t.Context(), queue.JobsQuery{State: queue.StateApplied, Limit: 2}).Outcomes))
	assert.Empty(t, w.Jobs(t.Context(), queue.JobsQuery{State: queue.StateRejected}).Outcomes)
	require.Eventually(t, func() bool {
		list = w.Jobs(t.Context(), queue.JobsQuery{})
		return list.QueuedTotal == 0 && len(list.Queued) == 0
	}, 10*time.Second, 10*time.Millisecond, "the acked jobs leave the queue")
	rep = w.Report(t.Context())
	require.NotNil(t, rep.Journal)
	assert.Equal(t, 4, rep.Journal.Outcomes)
	assert.Equal(t, journal.Path(store), rep.Journal.Path)
	assert.Positive(t, rep.Journal.Bytes)
}

// A search of the queue is bounded: a job beyond the bound is unknown,
// and the answer says how far the search went.
func TestLocateScanLimit(t *testing.T) {
	t.Cleanup(writer.SetScanLimit(2))
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

// ProbeLock tells what the kernel says, not what the lock file remembers.
func TestProbeLock(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)
	dead := deadPID(t)
	identity := func(pid int) []byte {
		b, err := json.Marshal(queue.Holder{PID: pid, Host: host, Mode: queue.ModeDaemon, Command: "scribe serve", Since: time.Now()})
		require.NoError(t, err)
		return b
	}
	tests := []struct {
		name string
		// setup writes the lock file (or not) and holds it (or not); it
		// returns the pid expected among the holders, 0 for none.
		setup      func(t *testing.T, store, path string) int
		held       bool
		holderPID  int  // expected holder identity's pid; 0: none
		holderSelf bool // the holder is the helper started by setup
	}{
		{name: "no lock file", setup: func(t *testing.T, _, _ string) int { return 0 }},
		{name: "a dead holder's identity, lock free", setup: func(t *testing.T, _, path string) int {
			require.NoError(t, os.WriteFile(path, identity(dead), 0o600))
			return 0
		}},
		{name: "a dead holder's identity, held by one that wrote none", held: true, setup: func(t *testing.T, _, path string) int {
			require.NoError(t, os.WriteFile(path, identity(dead), 0o600))
			f, err := os.Open(path)
			require.NoError(t, err)
			t.Cleanup(func() { f.Close() })
			require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB))
			return os.Getpid()
		}},
		{name: "a live process's identity, held by another", held: true, setup: func(t *testing.T, _, path string) int {
			require.NoError(t, os.WriteFile(path, identity(os.Getpid()), 0o600))
			return holdWithFlock1(t, path)
		}},
		{name: "held by scribe, which wrote who it is", held: true, holderSelf: true, setup: func(t *testing.T, store, _ string) int {
			return holdInChild(t, store, lock.Options{Command: "outside"}).cmd.Process.Pid
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, _ := writerStore(t)
			path := lock.DefaultPath(store)
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
			pid := tt.setup(t, store, path)
			held, pids, h := lock.ProbeLock(path)
			assert.Equal(t, tt.held, held)
			if pid != 0 {
				assert.True(t, slices.Contains(pids, pid), "pids %v, want %d among them", pids, pid)
			} else {
				assert.Empty(t, pids)
			}
			if tt.holderSelf {
				require.NotNil(t, h)
				assert.Equal(t, pid, h.PID)
			} else {
				assert.Nil(t, h, "the identity is not the holder's")
			}
		})
	}
}

// deadPID is the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

// holdWithFlock1 has flock(1), which writes no identity, hold the lock
// file until the test ends, and returns its pid.
func holdWithFlock1(t *testing.T, path string) int {
	t.Helper()
	bin, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("flock(1) from util-linux is needed")
	}
	cmd := exec.Command(bin, "--exclusive", path, "sh", "-c", "echo held; read _")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", line)
	return cmd.Process.Pid
}

// Recent lists the journal's outcomes newest first, filtered by status,
// time and count; Info counts them.
func TestJournalRecent(t *testing.T) {
	store, sid := writerStore(t)
	s, err := writer.Open(context.Background(), store, writer.Options{Command: "test"})
	require.NoError(t, err)
	defer s.Close()
	job := func(id, ifMatch string) writer.Entry {
		return writer.Entry{Job: &queue.Job{V: queue.Version, ID: id, Store: sid,
			Ops: []queue.Op{{Kind: queue.OpPut, Path: "f", Data: []byte(id), IfMatch: ifMatch}}}}
	}
	var at []time.Time
	for _, e := range []writer.Entry{job("a", ""), job("b", queue.IfAbsent), job("c", "")} {
		res, err := s.Apply([]writer.Entry{e})
		require.NoError(t, err)
		at = append(at, res[0].Outcome.At)
	}
	ids := func(outs []*queue.Outcome) []string {
		s := []string{}
		for _, o := range outs {
			s = append(s, o.ID)
		}
		return s
	}
	for _, tt := range []struct {
		name string
		f    journal.OutcomeFilter
		want []string
	}{
		{"all", journal.OutcomeFilter{}, []string{"c", "b", "a"}},
		{"applied", journal.OutcomeFilter{Status: queue.StatusApplied}, []string{"c", "a"}},
		{"rejected", journal.OutcomeFilter{Status: queue.StatusRejected}, []string{"b"}},
		{"limit", journal.OutcomeFilter{Limit: 2}, []string{"c", "b"}},
		{"limit and status", journal.OutcomeFilter{Status: queue.StatusApplied, Limit: 1}, []string{"c"}},
		{"since b", journal.OutcomeFilter{Since: at[1]}, []string{"c", "b"}},
		{"since the future", journal.OutcomeFilter{Since: time.Now().Add(time.Hour)}, []string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			outs, err := s.Journal().Recent(tt.f)
			require.NoError(t, err)
			assert.Equal(t, tt.want, ids(outs))
		})
	}
	info, err := s.Journal().Info()
	require.NoError(t, err)
	assert.Equal(t, 3, info.Outcomes)
	assert.Equal(t, uint64(1), info.Epoch)
	assert.Equal(t, journal.Path(store), info.Path)
	assert.Positive(t, info.Bytes)
}
