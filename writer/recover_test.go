package writer

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// tempStore returns the canonical path of a fresh store holding files.
func tempStore(tb testing.TB, files map[string]string) string {
	tb.Helper()
	dir, err := queue.ResolveStore(tb.TempDir())
	require.NoError(tb, err)
	putFiles(tb, dir, files)
	return dir
}

// putFiles writes files (path → content) under dir.
func putFiles(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		require.NoError(tb, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(tb, os.WriteFile(full, []byte(content), 0o644))
	}
}

// storeFiles returns every regular file of a store outside .scribe/.
func storeFiles(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir() && rel == queue.MetaDir:
			return filepath.SkipDir
		case !d.Type().IsRegular():
			return nil
		}
		b, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	})
	require.NoError(tb, err)
	return out
}

func openTestTree(tb testing.TB, dir string) *tree {
	tb.Helper()
	t, err := openTree(dir)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = t.Close() })
	return t
}

// Before the interrupted batch: what the store holds.
var recoverBefore = map[string]string{
	"log":      "base",
	"w.txt":    "old content",
	"gone.txt": "bye",
	"keep":     "untouched",
}

// The batch's changes and the files they must leave, applied exactly once.
var (
	recoverChanges = []journal.Change{
		{Path: "gone.txt", Kind: journal.ChangeRemove},
		{Path: "log", Kind: journal.ChangeAppend, Base: 4, Data: []byte("+more"), Mode: 0o644},
		{Path: "new/deep/n.txt", Kind: journal.ChangeAppend, Base: 0, Data: []byte("created"), Mode: 0o644, New: true},
		{Path: "sub/dir/w2.txt", Kind: journal.ChangeWrite, Data: []byte("nested"), Mode: 0o600},
		{Path: "w.txt", Kind: journal.ChangeWrite, Data: []byte("new"), Mode: 0o644},
	}
	recoverAfter = map[string]string{
		"log":            "base+more",
		"new/deep/n.txt": "created",
		"sub/dir/w2.txt": "nested",
		"w.txt":          "new",
		"keep":           "untouched",
	}
)

func TestRecoverInterruptedBatch(t *testing.T) {
	tests := []struct {
		name string
		// crash leaves the store as the interrupted batch did.
		crash map[string]string
		// gone lists files the interrupted batch had already removed.
		gone []string
		// log is what the appended file must hold after the redo, if not
		// recoverAfter's: a redo never cuts bytes it did not write.
		log string
	}{
		{name: "nothing done yet"},
		{name: "half an append", crash: map[string]string{"log": "base+m"}},
		{name: "an append cut short by a power loss", crash: map[string]string{"log": "base+m\x00\x00"}},
		{name: "size without the bytes", crash: map[string]string{"log": "base\x00\x00\x00\x00\x00"}},
		{name: "another program appended after the base", crash: map[string]string{"log": "baseOTHER\n"}, log: "baseOTHER\n+more"},
		{name: "another program appended after ours", crash: map[string]string{"log": "base+moreOTHER\n"}, log: "base+moreOTHER\n"},
		{name: "another program appended before ours", crash: map[string]string{"log": "baseOTHER\n+more"}, log: "baseOTHER\n+more"},
		{name: "another program's bytes longer than ours", crash: map[string]string{"log": "base+mOTHER-LONGER"}, log: "base+mOTHER-LONGER+more"},
		{name: "torn temp file", crash: map[string]string{".w.txt.scribe-tmp": "ne", "sub/dir/.w2.txt.scribe-tmp": "nes"}},
		{name: "some files done", crash: map[string]string{"w.txt": "new", "log": "base+more", "new/deep/n.txt": "cre"}, gone: []string{"gone.txt"}},
		{name: "all done, outcomes not recorded", crash: map[string]string{
			"log": "base+more", "new/deep/n.txt": "created", "sub/dir/w2.txt": "nested", "w.txt": "new",
		}, gone: []string{"gone.txt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := tempStore(t, recoverBefore)
			s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon})
			require.NoError(t, err)
			at := time.Now().UTC().Truncate(time.Second) // recent: older outcomes are pruned
			in := &journal.Intent{
				Epoch:   s.Epoch(),
				Changes: recoverChanges,
				Outcomes: []*queue.Outcome{
					{V: queue.Version, ID: "j1", Status: queue.StatusApplied, Epoch: s.Epoch(), Seq: 5, Mode: queue.ModeDaemon, At: at},
					{V: queue.Version, ID: "j2", Status: queue.StatusRejected, Reason: queue.ReasonPreconditionFailed, Detail: "no", Epoch: s.Epoch(), Seq: 6, Mode: queue.ModeDaemon, At: at},
					{V: queue.Version, Status: queue.StatusRejected, Reason: queue.ReasonBadInput, Epoch: s.Epoch(), Seq: 7, Mode: queue.ModeDaemon, At: at},
				},
				LastSeq: 7,
			}
			require.NoError(t, writeIntent(s.st.journal, in))
			putFiles(t, store, tt.crash)
			for _, p := range tt.gone {
				require.NoError(t, os.Remove(filepath.Join(store, p)))
			}
			crashEpoch := s.Epoch()
			require.NoError(t, s.Close()) // the "crash": outcomes never committed

			s2, err := Open(context.Background(), store, Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s2.Close() })
			assert.Equal(t, crashEpoch+1, s2.Epoch())
			want := maps.Clone(recoverAfter)
			if tt.log != "" {
				want["log"] = tt.log
			}
			assert.Equal(t, want, storeFiles(t, store))

			fi, err := os.Stat(filepath.Join(store, "sub/dir/w2.txt"))
			require.NoError(t, err)
			assert.Equal(t, fs.FileMode(0o600), fi.Mode().Perm())

			pending, err := s2.st.journal.Pending()
			require.NoError(t, err)
			assert.Nil(t, pending, "the intent is dropped once redone")
			for _, want := range in.Outcomes[:2] {
				got, err := s2.Journal().Outcome(want.ID)
				require.NoError(t, err)
				require.NotNil(t, got, want.ID)
				assert.Equal(t, want.Status, got.Status)
				assert.Equal(t, want.Reason, got.Reason)
				assert.Equal(t, crashEpoch, got.Epoch)
				assert.True(t, at.Equal(got.At))
			}
			_, lastSeq, err := s2.Journal().Meta()
			require.NoError(t, err)
			assert.Equal(t, uint64(7), lastSeq)

			// The redone batch's jobs are now duplicates.
			res, err := s2.Apply([]Entry{{Job: &queue.Job{V: queue.Version, ID: "j1", Store: s2.StoreID(),
				Ops: []queue.Op{{Kind: queue.OpAppend, Path: "log", Data: []byte("+more")}}}}})
			require.NoError(t, err)
			assert.True(t, res[0].Duplicate)
			require.NoError(t, s2.Close())

			// And reopening again redoes nothing.
			s3, err := Open(context.Background(), store, Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s3.Close() })
			assert.Equal(t, want, storeFiles(t, store))
		})
	}
}

// A redo must never overwrite an outcome the journal already has.
func TestCommitKeepsRecordedOutcome(t *testing.T) {
	store := tempStore(t, nil)
	s, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	first := &queue.Outcome{V: queue.Version, ID: "j", Status: queue.StatusApplied, Epoch: 1}
	require.NoError(t, s.st.journal.Commit([]*queue.Outcome{first}, nil, 3))
	later := &queue.Outcome{V: queue.Version, ID: "j", Status: queue.StatusRejected, Reason: queue.ReasonInternal, Epoch: 2}
	require.NoError(t, s.st.journal.Commit([]*queue.Outcome{later}, nil, 2))

	got, err := s.Journal().Outcome("j")
	require.NoError(t, err)
	require.NotNil(t, got)
	assert.Equal(t, queue.StatusApplied, got.Status)
	assert.Equal(t, uint64(1), got.Epoch)
	_, lastSeq, err := s.Journal().Meta()
	require.NoError(t, err)
	assert.Equal(t, uint64(3), lastSeq, "the last sequence never goes back")
}

// Carried out once, then redone any number of times, the changes leave the
// same files.
func TestMaterializeIdempotent(t *testing.T) {
	tests := []struct {
		name  string
		times int
	}{
		{"once", 1},
		{"twice", 2},
		{"three times", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := tempStore(t, recoverBefore)
			tr := openTestTree(t, store)
			for i := range tt.times {
				require.NoError(t, materialize(tr, recoverChanges, i > 0, true))
				assert.Equal(t, recoverAfter, storeFiles(t, store))
			}
		})
	}
}

func TestMaterializeErrors(t *testing.T) {
	tests := []struct {
		name   string
		change journal.Change
	}{
		{"unknown kind", journal.Change{Path: "a", Kind: "chmod"}},
		{"write under a file", journal.Change{Path: "f/x", Kind: journal.ChangeWrite, Data: []byte("x"), Mode: 0o644}},
		{"append under a file", journal.Change{Path: "f/x", Kind: journal.ChangeAppend, Data: []byte("x"), Mode: 0o644}},
		{"write over a folder", journal.Change{Path: "d", Kind: journal.ChangeWrite, Data: []byte("x"), Mode: 0o644}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := tempStore(t, map[string]string{"f": "file", "d/x": "in d"})
			err := materialize(openTestTree(t, store), []journal.Change{tt.change}, false, true)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.change.Path)
			got := storeFiles(t, store)
			delete(got, "."+tt.change.Path+tmpSuffix) // a staged write may stay, to be reused by a redo
			assert.Equal(t, map[string]string{"f": "file", "d/x": "in d"}, got)
		})
	}
}

// A batch whose redo fails leaves Open failing cleanly: an error,
// not a panic, the store lock released, the intent kept for a later try.
func TestRecoverFailureReleasesLock(t *testing.T) {
	store := tempStore(t, map[string]string{"f": "file"})
	s, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	bad := &journal.Intent{Epoch: s.Epoch(), Changes: []journal.Change{
		{Path: "ok", Kind: journal.ChangeWrite, Data: []byte("x"), Mode: 0o644},
		{Path: "f/x", Kind: journal.ChangeWrite, Data: []byte("x"), Mode: 0o644},
	}}
	require.NoError(t, writeIntent(s.st.journal, bad))
	require.NoError(t, s.Close())

	for range 2 {
		s, err = Open(context.Background(), store, Options{})
		require.Error(t, err)
		assert.Nil(t, s)
		assert.ErrorIs(t, err, ErrStuck)
		assert.Contains(t, err.Error(), "f/x")
		assert.NotErrorIs(t, err, lock.ErrLocked)
	}

	// Through another open file description: an in-process TryLock would
	// nest in a leaked hold instead of being refused.
	fl := flock.New(lock.DefaultPath(store))
	ok, err := fl.TryLock()
	require.NoError(t, err)
	require.True(t, ok, "the failed open released the store lock")
	assert.False(t, registered(store), "and left no hold in the registry")
	j, err := journal.Open(journal.Path(store))
	require.NoError(t, err, "and the journal")
	pending, err := j.Pending()
	require.NoError(t, err)
	assert.NotNil(t, pending)
	require.NoError(t, j.Close())
	require.NoError(t, fl.Unlock())
}

// registered reports whether this process still has a hold on the
// store's lock in its registry, while another open file description holds
// the flock: an Acquire in this process then nests in that hold instead
// of being refused.
func registered(store string) bool {
	h, err := lock.Acquire(context.Background(), store, lock.Options{})
	if err != nil {
		return false
	}
	_ = h.Unlock()
	return true
}

// Apply records its intent before touching a file: with the intent in
// the journal, Apply's own changes are exactly the intent's.
func TestApplyRecordsIntent(t *testing.T) {
	store := tempStore(t, map[string]string{"log": "ab", "old": "x"})
	s, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	ov := newOverlay(s.st.tree, s.maxFile)
	job := &queue.Job{V: queue.Version, ID: "j", Store: s.StoreID(), Ops: []queue.Op{
		{Kind: queue.OpAppend, Path: "log", Data: []byte("cd")},
		{Kind: queue.OpDelete, Path: "old"},
		{Kind: queue.OpPut, Path: "n/new", Data: []byte("fresh")},
		{Kind: queue.OpDelete, Path: "never-existed"},
	}}
	require.NoError(t, ov.applyJob(job))
	var old unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(store, "old"), &old))
	assert.Equal(t, []journal.Change{
		{Path: "log", Kind: journal.ChangeAppend, Data: []byte("cd"), Base: 2, Mode: 0o644},
		{Path: "n/new", Kind: journal.ChangeWrite, Data: []byte("fresh"), New: true}, // a new file: Mode 0, created 0666 less the umask
		{Path: "old", Kind: journal.ChangeRemove, Was: &journal.Stamp{Ino: old.Ino, Size: 1, Mtime: old.Mtim.Nano()}},
	}, ov.changes())
	assert.Equal(t, map[string]string{"log": "ab", "old": "x"}, storeFiles(t, store), "the overlay does not touch the disk")

	// Replaying the overlay's changes on the untouched store is what Apply does.
	require.NoError(t, materialize(s.st.tree, ov.changes(), false, true))
	assert.Equal(t, map[string]string{"log": "abcd", "n/new": "fresh"}, storeFiles(t, store))
}

// The writer's temp name must be one that no op can name.
func TestTempNameIsReserved(t *testing.T) {
	for _, p := range []string{"a", "dir/file.json"} {
		tmp := filepath.ToSlash(filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+tmpSuffix))
		err := queue.CheckPath(tmp)
		assert.Error(t, err, "op path %q is the temp file of %q", tmp, p)
	}
	assert.NoError(t, queue.CheckPath("a"+tmpSuffix+".txt"))
}

func TestOverlayPanicIsRejected(t *testing.T) {
	store := tempStore(t, nil)
	ov := newOverlay(openTestTree(t, store), 0)
	ov.files["boom"] = nil // a nil state makes applyOp dereference nil
	err := ov.applyJob(&queue.Job{Ops: []queue.Op{{Kind: queue.OpPut, Path: "boom"}}})
	var rej *queue.RejectError
	require.True(t, errors.As(err, &rej), "%v", err)
	assert.Equal(t, queue.ReasonInternal, rej.Reason)
	assert.Contains(t, rej.Detail, "panicked")
}
