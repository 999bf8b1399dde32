package writer_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

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
			// flock(1) writes no identity of its own.
			pid, _ := testkit.HoldFlock(t, path)
			return pid
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
