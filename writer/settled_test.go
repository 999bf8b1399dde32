package writer

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/journal"
)

// dieAfterApply lets go of s as a process SIGKILLed right after Apply
// returned would: the journal and the mark as they are, nothing dropped.
func dieAfterApply(t testing.TB, s *Session) {
	t.Helper()
	files := []fileSnapshot{snapshot(journal.Path(s.store)), snapshot(queue.Layout{Root: s.store}.Settled())}
	require.NoError(t, dieWith(s, files))
}

// readOnly opens the store's journal as another process would, without
// the store lock.
func readOnly(t testing.TB, store string) *journal.Journal {
	t.Helper()
	ro, err := journal.OpenReadOnly(journal.Path(store), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ro.Close() })
	return ro
}

// intentStands reports whether the store's journal keeps an intent, even
// one carried out, and how many outcomes wait on it: what is on disk,
// read with bbolt itself.
func intentStands(t testing.TB, store string) (bool, int) {
	t.Helper()
	db, err := bolt.Open(journal.Path(store), 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	var stands bool
	var pending int
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		stands = tx.Bucket([]byte("intent")).Get([]byte("batch")) != nil
		pending = tx.Bucket([]byte("pending")).Stats().KeyN
		return nil
	}))
	return stands, pending
}

// Once Apply returns, every other process sees the batch's outcomes and
// no interrupted batch, though the intent still stands (the writer died
// before the next batch or Close could drop it): the settled mark names
// it. The next holder does not redo it, and drops it.
func TestSettledMarkShowsOutcomesToOtherProcesses(t *testing.T) {
	store := tempStore(t, map[string]string{"log": "base\n"})
	s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon})
	require.NoError(t, err)
	_, err = s.Apply([]Entry{appendJob(t, store, "a", "log", "one\n"), appendJob(t, store, "b", "new", "two\n")})
	require.NoError(t, err)
	dieAfterApply(t, s)

	fi, err := os.Lstat(queue.Layout{Root: store}.Settled())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode(), "owner-only, like the rest of .scribe")

	stands, _ := intentStands(t, store)
	assert.True(t, stands, "the intent still stands")
	ro := readOnly(t, store)
	for _, id := range []string{"a", "b"} {
		l, err := ro.Lookup(id)
		require.NoError(t, err)
		assert.True(t, l.Found, "%s: the outcome its caller may have heard", id)
	}
	listed, err := ro.Recent(journal.OutcomeFilter{})
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
	s2, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	assert.Equal(t, map[string]string{"log": "base\none\n", "new": "edited\n"}, storeFiles(t, store))
	stands, pending := intentStands(t, store)
	assert.False(t, stands, "the next holder dropped it")
	assert.Zero(t, pending)
}
