package writer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/journal"
)

// jobOf is an entry of a job of ops on store.
func jobOf(t testing.TB, store, id string, ops ...queue.Op) Entry {
	t.Helper()
	return Entry{Job: &queue.Job{V: queue.Version, ID: id, Store: queue.StoreID(resolve(t, store)), Ops: ops}}
}

// applyAll applies each entry as a batch of its own and checks that it
// was applied.
func applyAll(t testing.TB, s *Session, entries ...Entry) {
	t.Helper()
	for _, e := range entries {
		res, err := s.Apply([]Entry{e})
		require.NoError(t, err)
		require.Equal(t, queue.StatusApplied, res[0].Outcome.Status, res[0].Outcome.Detail)
	}
}

func opAppend(p, data string) queue.Op {
	return queue.Op{Kind: queue.OpAppend, Path: p, Data: []byte(data)}
}
func opPut(p, data string) queue.Op { return queue.Op{Kind: queue.OpPut, Path: p, Data: []byte(data)} }

// appendAsShell appends s to the file at p as a shell's >> would.
func appendAsShell(t testing.TB, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(s)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// unsynced is the standing intent's changes while its files are written
// and not synced, nil otherwise.
func unsynced(s *Session) []journal.Change {
	return s.st.carry.changes
}

// dieUnsynced lets go of s as a process SIGKILLed right after Apply
// returned would, its files written and not synced.
func dieUnsynced(t testing.TB, s *Session) {
	t.Helper()
	s.st.carry = carry{} // what a killed process knew is gone
	dieAfterApply(t, s)
}

// markSynced reports whether the settled mark says its intent's files
// were synced.
func markSynced(t testing.TB, store string) bool {
	t.Helper()
	b, err := os.ReadFile(queue.Layout{Root: store}.Settled())
	require.NoError(t, err)
	return bytes.HasPrefix(b, []byte("scribe settled v1 "))
}

// A carry of many batches, whose changes the journal took in once each,
// is redone whole after a SIGKILL or a power loss: every line once and in
// order, and the last of the staged writes that replaced each other.
func TestSyncDelayLongCarryIsRedone(t *testing.T) {
	for _, loss := range []string{"SIGKILL", "power loss"} {
		t.Run(loss, func(t *testing.T) {
			store := tempStore(t, map[string]string{"log": "base\n"})
			s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon, SyncDelay: time.Hour})
			require.NoError(t, err)
			want, blob := "base\n", ""
			const jobs = 150
			for i := range jobs {
				line := fmt.Sprintf("%d\n", i)
				ops := []queue.Op{opAppend("log", line)}
				if i%50 == 0 {
					blob = strings.Repeat(fmt.Sprint(i/50), 64<<10) // staged
					ops = append(ops, opPut("blob", blob))
				}
				applyAll(t, s, jobOf(t, store, fmt.Sprint(i), ops...))
				want += line
			}
			require.Len(t, unsynced(s), jobs+1, "one carry: the appends and the last staged write")
			dieUnsynced(t, s)
			if loss == "power loss" {
				// The page cache is gone: the appends, and the last rename.
				require.NoError(t, os.Remove(queue.Layout{Root: store}.Settled()))
				require.NoError(t, os.WriteFile(filepath.Join(store, "log"), []byte("base\n"), 0o644))
				require.NoError(t, os.Rename(filepath.Join(store, "blob"), filepath.Join(store, ".blob.scribe-tmp")))
				ro := readOnly(t, store)
				n, err := ro.Interrupted()
				require.NoError(t, err)
				assert.Equal(t, &queue.Interrupted{Jobs: jobs, Files: 2}, n, "log and blob, each once")
				require.NoError(t, ro.Close())
			}

			s2, err := Open(context.Background(), store, Options{})
			require.NoError(t, err)
			require.NoError(t, s2.Close())
			assert.Equal(t, map[string]string{"log": want, "blob": blob}, storeFiles(t, store))
			ro := readOnly(t, store)
			for i := range jobs {
				l, err := ro.Lookup(fmt.Sprint(i))
				require.NoError(t, err)
				assert.True(t, l.Found, i)
			}
		})
	}
}

// With a sync delay, a batch is answered before its files are synced:
// the journal's one intent holds every change not yet synced (an append
// after an append follows it), with their outcomes. A SIGKILL loses
// nothing: other processes see the outcomes. A power loss may lose the
// files: the intent is interrupted and its outcomes hidden. Either way
// the next holder redoes it from the journal, and every job's bytes are
// there once.
func TestSyncDelayJournalHoldsWhatIsNotSynced(t *testing.T) {
	for _, loss := range []string{"SIGKILL", "power loss"} {
		t.Run(loss, func(t *testing.T) {
			store := tempStore(t, map[string]string{"log": "base\n"})
			s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon, SyncDelay: time.Hour})
			require.NoError(t, err)
			applyAll(t, s,
				jobOf(t, store, "a", opAppend("log", "one\n")),
				jobOf(t, store, "b", opAppend("log", "two\n")),
				jobOf(t, store, "c", opPut("docs/new", "x")))
			assert.False(t, s.SyncBy().IsZero(), "due later")
			dieUnsynced(t, s)
			_, pending := intentStands(t, store)
			assert.Equal(t, 3, pending, "every outcome not yet synced waits on the intent")
			j, err := journal.Open(journal.Path(store))
			require.NoError(t, err)
			in, err := j.Pending()
			require.NoError(t, err)
			require.NotNil(t, in, "a holder redoes it")
			assert.Equal(t, []journal.Change{ // in the order they were recorded
				{Path: "log", Kind: journal.ChangeAppend, Data: []byte("one\n"), Base: 5, Mode: 0o644},
				{Path: "log", Kind: journal.ChangeAppend, Data: []byte("two\n"), Base: 9, Mode: 0o644},
				{Path: "docs/new", Kind: journal.ChangeWrite, Data: []byte("x"), New: true},
			}, in.Changes)
			require.NoError(t, j.Close())

			if loss == "power loss" {
				// The page cache is gone: the files as they were, and the
				// mark may be gone too or of the boot before, untrusted.
				require.NoError(t, os.Remove(queue.Layout{Root: store}.Settled()))
				require.NoError(t, os.WriteFile(filepath.Join(store, "log"), []byte("base\n"), 0o644))
				require.NoError(t, os.RemoveAll(filepath.Join(store, "docs")))
			}
			ro := readOnly(t, store)
			for _, id := range []string{"a", "b", "c"} {
				l, err := ro.Lookup(id)
				require.NoError(t, err)
				assert.Equal(t, loss == "SIGKILL", l.Found, "%s: shown only while its files are sure to be there", id)
			}
			require.NoError(t, ro.Close())

			s2, err := Open(context.Background(), store, Options{})
			require.NoError(t, err)
			require.NoError(t, s2.Close())
			assert.Equal(t, map[string]string{"log": "base\none\ntwo\n", "docs/new": "x"}, storeFiles(t, store))
			ro = readOnly(t, store)
			for _, id := range []string{"a", "b", "c"} {
				l, err := ro.Lookup(id)
				require.NoError(t, err)
				assert.True(t, l.Found, id)
			}
			stands, _ := intentStands(t, store)
			assert.False(t, stands)
		})
	}
}

// The carried files are synced, and the next intent states only its own
// batch: on Sync; when the oldest carried batch is SyncDelay old; when
// the carry would pass its bound; when a change cannot be folded into
// it; on Close, which leaves no intent for the next holder.
func TestSyncDelaySyncs(t *testing.T) {
	open := func(t *testing.T, delay time.Duration) (string, *Session) {
		store := tempStore(t, map[string]string{"log": "base\n"})
		s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon, SyncDelay: delay})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return store, s
	}
	onlyLast := func(t *testing.T, s *Session, data string) {
		t.Helper()
		changes := unsynced(s)
		require.Len(t, changes, 1)
		assert.Equal(t, data, string(changes[0].Data), "the intent states the last batch alone")
	}
	t.Run("Sync", func(t *testing.T) {
		store, s := open(t, time.Hour)
		applyAll(t, s, jobOf(t, store, "a", opAppend("log", "one\n")))
		require.NoError(t, s.Sync())
		assert.True(t, s.SyncBy().IsZero())
		assert.Nil(t, unsynced(s))
		assert.True(t, markSynced(t, store))
		applyAll(t, s, jobOf(t, store, "b", opAppend("log", "two\n")))
		onlyLast(t, s, "two\n")
	})
	t.Run("age", func(t *testing.T) {
		store, s := open(t, time.Nanosecond)
		applyAll(t, s, jobOf(t, store, "a", opAppend("log", "one\n")), jobOf(t, store, "b", opAppend("log", "two\n")))
		onlyLast(t, s, "two\n")
	})
	t.Run("bound", func(t *testing.T) {
		store, s := open(t, time.Hour)
		for i := range maxCarryEntries + 1 {
			applyAll(t, s, jobOf(t, store, fmt.Sprint(i), opAppend("log", fmt.Sprintf("%d\n", i))))
		}
		onlyLast(t, s, fmt.Sprintf("%d\n", maxCarryEntries))
	})
	t.Run("bytes", func(t *testing.T) {
		store, s := open(t, time.Hour)
		chunk := strings.Repeat("x", 60000) // appended, not staged: the intent holds it
		n := maxCarryBytes/len(chunk) + 1
		for i := range n {
			applyAll(t, s, jobOf(t, store, fmt.Sprint(i), opAppend("log", fmt.Sprintf("%d%s\n", i%10, chunk))))
		}
		onlyLast(t, s, fmt.Sprintf("%d%s\n", (n-1)%10, chunk))
	})
	t.Run("foreign bytes", func(t *testing.T) {
		store, s := open(t, time.Hour)
		applyAll(t, s, jobOf(t, store, "a", opAppend("log", "one\n")))
		f, err := os.OpenFile(filepath.Join(store, "log"), os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString("shell\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
		applyAll(t, s, jobOf(t, store, "b", opAppend("log", "two\n")))
		onlyLast(t, s, "two\n")
		assert.Equal(t, "base\none\nshell\ntwo\n", storeFiles(t, store)["log"])
	})
	t.Run("Close", func(t *testing.T) {
		store := tempStore(t, nil)
		s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon, SyncDelay: time.Hour})
		require.NoError(t, err)
		applyAll(t, s, jobOf(t, store, "a", opAppend("log", "one\n")))
		require.NoError(t, s.Close())
		assert.True(t, markSynced(t, store))
		stands, _ := intentStands(t, store)
		assert.False(t, stands, "synced and dropped")
	})
	t.Run("no sync delay", func(t *testing.T) {
		store, s := open(t, 0)
		applyAll(t, s, jobOf(t, store, "a", opAppend("log", "one\n")))
		assert.Nil(t, unsynced(s))
		assert.True(t, s.SyncBy().IsZero())
		assert.True(t, markSynced(t, store))
	})
}

// fold joins what one intent can state for both batches, and refuses
// the rest.
func TestFold(t *testing.T) {
	appendAt := func(p string, base int64, data string) journal.Change {
		return journal.Change{Path: p, Kind: journal.ChangeAppend, Base: base, Data: []byte(data)}
	}
	write := func(p, data string, isNew bool) journal.Change {
		return journal.Change{Path: p, Kind: journal.ChangeWrite, Data: []byte(data), New: isNew}
	}
	remove := func(p string) journal.Change { return journal.Change{Path: p, Kind: journal.ChangeRemove} }
	mkdir := func(p string) journal.Change { return journal.Change{Path: p, Kind: journal.ChangeMkdir} }
	staged := func(p string, isNew bool) journal.Change {
		return journal.Change{Path: p, Kind: journal.ChangeStaged, Size: 70000, Sum: 7, New: isNew}
	}
	cases := []struct {
		name          string
		carried, next []journal.Change
		want          []journal.Change // nil: refused
	}{
		{"other files", []journal.Change{appendAt("a", 0, "1")}, []journal.Change{write("b", "x", true)},
			[]journal.Change{appendAt("a", 0, "1"), write("b", "x", true)}},
		{"append after append", []journal.Change{appendAt("a", 3, "12")}, []journal.Change{appendAt("a", 5, "34")},
			[]journal.Change{appendAt("a", 3, "12"), appendAt("a", 5, "34")}},
		{"bytes between appends", []journal.Change{appendAt("a", 3, "12")}, []journal.Change{appendAt("a", 9, "34")}, nil},
		{"append after write", []journal.Change{write("a", "x", false)}, []journal.Change{appendAt("a", 1, "y")}, nil},
		// A write's or a removal's redo looks for the file the batch
		// found: after a carried change, scribe's own.
		{"write after append", []journal.Change{appendAt("a", 0, "1")}, []journal.Change{write("a", "x", false)}, nil},
		{"write after write", []journal.Change{write("a", "1", true)}, []journal.Change{write("a", "x", false)}, nil},
		{"remove after write", []journal.Change{write("a", "1", false)}, []journal.Change{remove("a")}, nil},
		{"write after remove", []journal.Change{remove("a")}, []journal.Change{write("a", "x", true)}, nil},
		{"staged after appends", []journal.Change{appendAt("a", 0, "1"), appendAt("a", 1, "2")}, []journal.Change{staged("a", false)},
			[]journal.Change{staged("a", false)}},
		{"staged after remove", []journal.Change{remove("a")}, []journal.Change{staged("a", true)}, []journal.Change{staged("a", true)}},
		{"file becomes a folder", []journal.Change{remove("a")}, []journal.Change{write("a/b", "x", true)}, nil},
		{"folder above a carried file", []journal.Change{write("a/b", "x", true)}, []journal.Change{write("a", "x", true)}, nil},
		{"folder made", []journal.Change{write("a", "x", false)}, []journal.Change{mkdir("d")}, nil},
		{"folder carried", []journal.Change{mkdir("d")}, []journal.Change{write("d", "x", true)}, nil},
		{"a path inside another of the batch", []journal.Change{appendAt("x", 0, "1")}, []journal.Change{remove("a"), write("a/b", "x", true)}, nil},
		{"staged among others", []journal.Change{appendAt("a", 0, "1"), appendAt("b", 0, "1"), appendAt("a", 1, "2")},
			[]journal.Change{staged("a", false), appendAt("b", 1, "2")},
			[]journal.Change{appendAt("b", 0, "1"), staged("a", false), appendAt("b", 1, "2")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c carry
			c.take(tc.carried, nil, journal.Token{}, nil)
			f, ok := c.fold(tc.next)
			require.Equal(t, tc.want != nil, ok)
			if ok {
				assert.Equal(t, tc.want, c.joined(f))
			}
		})
	}
}

// BenchmarkApplyAppend applies batches of 1, 16 and 64 jobs, each
// appending a line to one file, with the files synced before each answer
// and after it, and reports the jobs per second, the CPU and the bytes
// written per job (the bytes where /proc/self/io tells them).
func BenchmarkApplyAppend(b *testing.B) {
	for _, delay := range []time.Duration{0, time.Second} {
		for _, batch := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("sync-delay=%v/batch=%d", delay, batch), func(b *testing.B) {
				store := tempStore(b, nil)
				s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon, SyncDelay: delay})
				require.NoError(b, err)
				defer s.Close()
				line := append(bytes.Repeat([]byte("x"), 99), '\n')
				entries := make([]Entry, batch)
				written, cpu := writtenBytes(), cpuTime()
				b.ResetTimer()
				for i := range b.N {
					for k := range entries {
						entries[k] = jobOf(b, store, fmt.Sprint(i*batch+k), queue.Op{Kind: queue.OpAppend, Path: "log", Data: line})
					}
					if _, err := s.Apply(entries); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				jobs := float64(b.N * batch)
				b.ReportMetric(jobs/b.Elapsed().Seconds(), "jobs/s")
				b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/jobs, "cpu-µs/job")
				if w := writtenBytes(); w >= 0 {
					b.ReportMetric(float64(w-written)/jobs, "written-B/job")
				}
			})
		}
	}
}

// writtenBytes is what this process has had written to storage
// (/proc/self/io's write_bytes), or -1 where that is not told.
func writtenBytes() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "write_bytes: "); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A SIGKILL between an answered append and the writing of the next one,
// whose intent carries both, then another program's append: the next
// holder's redo keeps each job's bytes once and the other program's line.
// (One change for both appends would be found nowhere whole, and written
// again whole, the first job's bytes a second time.)
func TestSyncDelayRedoAfterAnotherAppend(t *testing.T) {
	store := tempStore(t, map[string]string{"log": "base\n"})
	s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon, SyncDelay: time.Hour})
	require.NoError(t, err)
	applyAll(t, s, jobOf(t, store, "a", opAppend("log", "one\n")))
	applyAll(t, s, jobOf(t, store, "b", opAppend("log", "two\n")))
	dieUnsynced(t, s)
	// As if the holder died with b's intent recorded, before b's write,
	// and a shell appended then.
	require.NoError(t, os.WriteFile(filepath.Join(store, "log"), []byte("base\none\nshell\n"), 0o644))
	s2, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	assert.Equal(t, "base\none\nshell\ntwo\n", storeFiles(t, store)["log"])
}

// An exec job decided without a run (rejected: no such command) between
// batches whose files are not synced yet records its outcome without
// dropping the intent that holds them: a power loss after it still finds
// the carried append in the journal, and the next holder redoes it.
func TestSyncDelayExecRejectionKeepsCarry(t *testing.T) {
	store := tempStore(t, map[string]string{"log": "base\n"})
	s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon, SyncDelay: time.Hour})
	require.NoError(t, err)
	applyAll(t, s, jobOf(t, store, "a", opAppend("log", "one\n")))
	res, plan, err := s.PlanExec(jobOf(t, store, "x", queue.Op{Kind: queue.OpExec, Name: "nope"}), nil)
	require.NoError(t, err)
	require.Nil(t, plan)
	require.Equal(t, queue.ReasonNotAllowed, res.Outcome.Reason, res.Outcome.Detail)
	require.NotEmpty(t, unsynced(s), "the append's file is not synced yet")
	dieUnsynced(t, s)
	stands, pending := intentStands(t, store)
	assert.True(t, stands, "the journal still holds what is not synced")
	assert.Equal(t, 1, pending, "the carried outcome waits on it")

	// A power loss: the unsynced append is gone, the mark untrusted.
	require.NoError(t, os.Remove(queue.Layout{Root: store}.Settled()))
	require.NoError(t, os.WriteFile(filepath.Join(store, "log"), []byte("base\n"), 0o644))
	s2, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	assert.Equal(t, "base\none\n", storeFiles(t, store)["log"], "the applied job's bytes are redone")
	ro := readOnly(t, store)
	for _, id := range []string{"a", "x"} {
		l, err := ro.Lookup(id)
		require.NoError(t, err)
		assert.True(t, l.Found, id)
	}
}

// A redo of an answered put or delete whose files were not synced yet
// (a SIGKILL) leaves what another program did to the file since: a
// shell's append after the put, a file made again after the delete, an
// editor's save (a new file renamed over it).
func TestSyncDelayRedoLeavesOtherPrograms(t *testing.T) {
	store := tempStore(t, map[string]string{"f": "old\n", "gone": "x", "edited": "e0\n"})
	s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon, SyncDelay: time.Hour})
	require.NoError(t, err)
	applyAll(t, s,
		jobOf(t, store, "a", opPut("f", "from scribe\n")),
		jobOf(t, store, "b", queue.Op{Kind: queue.OpDelete, Path: "gone"}),
		jobOf(t, store, "c", opPut("edited", "scribe\n")))
	dieUnsynced(t, s)
	appendAsShell(t, filepath.Join(store, "f"), "shell\n")
	require.NoError(t, os.WriteFile(filepath.Join(store, "gone"), []byte("again"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(store, ".edited.swp"), []byte("editor\n"), 0o644))
	require.NoError(t, os.Rename(filepath.Join(store, ".edited.swp"), filepath.Join(store, "edited")))

	s2, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	assert.Equal(t, map[string]string{"f": "from scribe\nshell\n", "gone": "again", "edited": "editor\n"}, storeFiles(t, store))
}

// A redo carries out a put or a delete that did not happen: the path
// shows the file the batch found, no file for a new one, or the put's
// own bytes cut short (a power loss after the rename, before the data).
func TestRedoWholeWhereItDidNotHappen(t *testing.T) {
	store := tempStore(t, map[string]string{"f": "old\n", "gone": "x", "torn": "t0", "zeros": "z0"})
	s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon})
	require.NoError(t, err)
	was := func(p string) *journal.Stamp {
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(filepath.Join(store, p), &st))
		return &journal.Stamp{Ino: st.Ino, Size: st.Size, Mtime: st.Mtim.Nano()}
	}
	in := &journal.Intent{Epoch: s.Epoch(), LastSeq: 1, Changes: []journal.Change{
		{Path: "f", Kind: journal.ChangeWrite, Data: []byte("new\n"), Mode: 0o644, Was: was("f")},
		{Path: "gone", Kind: journal.ChangeRemove, Was: was("gone")},
		{Path: "made", Kind: journal.ChangeWrite, Data: []byte("made\n"), New: true},
		{Path: "torn", Kind: journal.ChangeWrite, Data: []byte("whole\n"), Mode: 0o644, Was: was("torn")},
		{Path: "zeros", Kind: journal.ChangeWrite, Data: []byte("whole\n"), Mode: 0o644, Was: was("zeros")},
	}}
	require.NoError(t, writeIntent(s.st.journal, in))
	require.NoError(t, s.Close()) // the "crash", before any file changed
	// Renamed in, the data lost: new files, of scribe's bytes in part.
	for p, b := range map[string]string{"torn": "who", "zeros": "\x00\x00\x00\x00\x00\x00"} {
		require.NoError(t, os.WriteFile(filepath.Join(store, ".tmp"), []byte(b), 0o644))
		require.NoError(t, os.Rename(filepath.Join(store, ".tmp"), filepath.Join(store, p)))
	}

	s2, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	assert.Equal(t, map[string]string{"f": "new\n", "made": "made\n", "torn": "whole\n", "zeros": "whole\n"}, storeFiles(t, store))
}
