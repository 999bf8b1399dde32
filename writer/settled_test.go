package writer

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
)

// dieAfterApply lets go of s as a process SIGKILLed right after Apply
// returned would: the journal and the mark as they are, nothing dropped.
func dieAfterApply(t testing.TB, s *Session) {
	t.Helper()
	s.st.journal.settled.Store(nil) // forgotten with the process
	require.NoError(t, s.Close())
}

// readOnly opens the store's journal as another process would, without
// the store lock.
func readOnly(t testing.TB, store string) *Journal {
	t.Helper()
	ro, err := OpenJournalReadOnly(JournalPath(store), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ro.Close() })
	return ro
}

// Once Apply returns, every other process sees the batch's outcomes and
// no interrupted batch, though the intent still stands (the writer died
// before the next batch or Close could drop it): the settled mark names
// it. The next holder does not redo it, and drops it.
func TestSettledMarkShowsOutcomesToOtherProcesses(t *testing.T) {
	store := tempStore(t, map[string]string{"log": "base\n"})
	s, err := OpenSession(store, SessionOptions{Mode: queue.ModeDaemon})
	require.NoError(t, err)
	_, err = s.Apply([]Entry{appendJob(t, store, "a", "log", "one\n"), appendJob(t, store, "b", "new", "two\n")})
	require.NoError(t, err)
	dieAfterApply(t, s)

	fi, err := os.Lstat(queue.Layout{Root: store}.Settled())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode(), "owner-only, like the rest of .scribe")

	ro := readOnly(t, store)
	err = ro.db.View(func(tx *bolt.Tx) error {
		assert.NotNil(t, tx.Bucket(bucketIntent).Get(keyIntent), "the intent still stands")
		return nil
	})
	require.NoError(t, err)
	for _, id := range []string{"a", "b"} {
		l, err := ro.Lookup(id)
		require.NoError(t, err)
		assert.True(t, l.Found, "%s: the outcome its caller may have heard", id)
	}
	listed, err := ro.Recent(OutcomeFilter{})
	require.NoError(t, err)
	assert.Len(t, listed, 2)
	intr, err := ro.Interrupted()
	require.NoError(t, err)
	assert.Nil(t, intr, "nothing is unfinished")
	info, err := ro.Info()
	require.NoError(t, err)
	assert.Equal(t, 2, info.Outcomes)
	assert.Equal(t, uint64(2), info.Applied)
	require.NoError(t, ro.Close())

	// Another program changes a file of the batch: a redo would put the
	// batch's bytes back; the next holder must not redo what is done.
	require.NoError(t, os.WriteFile(filepath.Join(store, "new"), []byte("edited\n"), 0o644))
	s2, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	assert.Equal(t, map[string]string{"log": "base\none\n", "new": "edited\n"}, storeFiles(t, store))
	ro = readOnly(t, store)
	err = ro.db.View(func(tx *bolt.Tx) error {
		assert.Nil(t, tx.Bucket(bucketIntent).Get(keyIntent), "the next holder dropped it")
		assert.Zero(t, tx.Bucket(bucketPending).Stats().KeyN)
		return nil
	})
	require.NoError(t, err)
}

// The mark settles the intent it names, no other: a batch recorded after
// it (its writer killed before writing the files) stays provisional and
// interrupted, the batch before it stays visible; a mark that another
// user could have written, or a symlink, is not read at all.
func TestSettledMarkNamesOneIntent(t *testing.T) {
	store := tempStore(t, map[string]string{"log": "base\n"})
	s, err := OpenSession(store, SessionOptions{Mode: queue.ModeDaemon})
	require.NoError(t, err)
	_, err = s.Apply([]Entry{appendJob(t, store, "first", "log", "one\n")})
	require.NoError(t, err)
	// The next batch, committed with its intent; the process dies
	// before its files are written (SCRIBE_CRASH_AT=intent).
	_, err = s.st.journal.record(&intent{Epoch: s.Epoch(), Changes: []fileChange{{Path: "log", Kind: changeAppend, Data: []byte("two\n"), Base: 9}}},
		[]*queue.Outcome{{V: queue.Version, ID: "second", Status: queue.StatusApplied, Epoch: s.Epoch(), Mode: queue.ModeDaemon, At: time.Now().UTC()}}, nil, 0)
	require.NoError(t, err)
	dieAfterApply(t, s)

	check := func(name string) {
		t.Helper()
		ro := readOnly(t, store)
		first, err := ro.Outcome("first")
		require.NoError(t, err)
		assert.NotNil(t, first, "%s: the batch before is settled", name)
		second, err := ro.Outcome("second")
		require.NoError(t, err)
		assert.Nil(t, second, "%s: not on disk: not applied", name)
		intr, err := ro.Interrupted()
		require.NoError(t, err)
		assert.Equal(t, &Interrupted{Jobs: 1, Files: 1}, intr, name)
		info, err := ro.Info()
		require.NoError(t, err)
		assert.Equal(t, 1, info.Outcomes, "%s: provisional outcomes are not counted", name)
		assert.Equal(t, uint64(1), info.Applied, name)
		require.NoError(t, ro.Close())
	}
	check("a mark of the batch before")

	// The mark forged to name the standing intent, in a file others may
	// write, or behind a symlink: the journal is refused with it, as
	// anything in .scribe another user could change.
	var token []byte
	ro := readOnly(t, store)
	require.NoError(t, ro.db.View(func(tx *bolt.Tx) error {
		token = append(token, tx.Bucket(bucketIntent).Get(keyIntentToken)...)
		return nil
	}))
	require.NoError(t, ro.Close())
	forged := markBytes(intentToken(token))
	mark := queue.Layout{Root: store}.Settled()
	require.NoError(t, os.WriteFile(mark, forged, 0o600))
	require.NoError(t, os.Chmod(mark, 0o622))
	refused := func(name string) {
		t.Helper()
		_, err := OpenJournalReadOnly(JournalPath(store), time.Second)
		assert.ErrorIs(t, err, queue.ErrInsecure, "%s: the journal is not read beside it", name)
	}
	refused("a group-writable mark")
	require.NoError(t, os.Remove(mark))
	elsewhere := filepath.Join(t.TempDir(), "mark")
	require.NoError(t, os.WriteFile(elsewhere, forged, 0o600))
	require.NoError(t, os.Symlink(elsewhere, mark))
	refused("a symlinked mark")
	require.NoError(t, os.Remove(mark))

	// The next holder redoes the batch; then it stands.
	s2, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	assert.Equal(t, map[string]string{"log": "base\none\ntwo\n"}, storeFiles(t, store))
	ro = readOnly(t, store)
	second, err := ro.Outcome("second")
	require.NoError(t, err)
	assert.NotNil(t, second)
}

// Without a mark to write (it could not be opened), settling drops the
// intent in a transaction instead: the outcomes stand for every process
// all the same.
func TestSettleWithoutMark(t *testing.T) {
	store := tempStore(t, nil)
	s, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	require.NoError(t, s.st.journal.mark.Close())
	s.st.journal.mark = nil
	_, err = s.Apply([]Entry{appendJob(t, store, "a", "log", "one\n")})
	require.NoError(t, err)
	require.NoError(t, s.st.journal.db.View(func(tx *bolt.Tx) error {
		assert.Nil(t, tx.Bucket(bucketIntent).Get(keyIntent), "dropped at once")
		return nil
	}))
	dieAfterApply(t, s)
	o, err := readOnly(t, store).Outcome("a")
	require.NoError(t, err)
	assert.NotNil(t, o)
}

// The journal keeps how many of its outcomes are applied and how many
// rejected through every change of its outcomes: a batch, a prune, an
// abandoned batch; a journal of an earlier version, which keeps no
// tally, is counted.
func TestJournalTally(t *testing.T) {
	store := tempStore(t, nil)
	s, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	bad := appendJob(t, store, "bad", "../x", "x")
	_, err = s.Apply([]Entry{appendJob(t, store, "a", "log", "1\n"), appendJob(t, store, "b", "log", "2\n"), bad})
	require.NoError(t, err)
	j := s.Journal()
	tallyIs := func(applied, rejected uint64, outcomes int, msg string) {
		t.Helper()
		info, err := j.Info()
		require.NoError(t, err)
		assert.Equal(t, [3]uint64{applied, rejected, uint64(outcomes)}, [3]uint64{info.Applied, info.Rejected, uint64(info.Outcomes)}, msg)
	}
	tallyIs(2, 1, 3, "a batch")
	_, err = s.Apply([]Entry{appendJob(t, store, "a", "log", "1\n")})
	require.NoError(t, err)
	tallyIs(2, 1, 3, "a duplicate counts once")

	// An earlier version's journal: counted from its outcomes, then kept.
	require.NoError(t, j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keyTally) }))
	tallyIs(2, 1, 3, "counted")

	old := time.Now().Add(-30 * 24 * time.Hour).UTC()
	require.NoError(t, j.commit([]*queue.Outcome{
		{V: queue.Version, ID: "old-applied", Status: queue.StatusApplied, At: old},
		{V: queue.Version, ID: "old-rejected", Status: queue.StatusRejected, Reason: queue.ReasonBadInput, At: old},
	}, nil, 0))
	tallyIs(3, 2, 5, "recorded by a redo")
	n, err := j.prune(time.Now().Add(-DefaultRetention), 0, DefaultRetention)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	tallyIs(2, 1, 3, "pruned")

	// An interrupted batch, abandoned: its applied outcome becomes a
	// rejection.
	require.NoError(t, j.writeIntent(&intent{Epoch: s.Epoch(), Changes: []fileChange{{Path: "log", Kind: changeAppend, Data: []byte("3\n"), Base: 4}},
		Outcomes: []*queue.Outcome{{V: queue.Version, ID: "c", Status: queue.StatusApplied, At: time.Now().UTC()}}}))
	tallyIs(2, 1, 3, "provisional: not counted")
	require.NoError(t, s.Close())
	_, err = Abandon(store, SessionOptions{})
	require.NoError(t, err)
	j = readOnly(t, store)
	tallyIs(2, 2, 4, "abandoned")
}
