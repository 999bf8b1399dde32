package journal

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
)

// Outcomes older than the retention are pruned in bounded steps, dead
// letters with them; a look-up of a pruned ID says the journal was pruned
// instead of plainly "unknown"; recent outcomes stay.
func TestJournalPrune(t *testing.T) {
	j, err := Open(filepath.Join(t.TempDir(), "journal.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = j.Close() })

	now := time.Now().UTC()
	old, recent := now.Add(-8*24*time.Hour), now.Add(-time.Hour)
	var outs []*queue.Outcome
	for i := range pruneLimit + 5 {
		outs = append(outs, &queue.Outcome{ID: fmt.Sprintf("old-%d", i), Status: queue.StatusApplied, At: old.Add(time.Duration(i))})
	}
	for i := range 3 {
		outs = append(outs, &queue.Outcome{ID: fmt.Sprintf("new-%d", i), Status: queue.StatusApplied, At: recent})
	}
	// Old, but the queue could still redeliver it (its sequence is past
	// the floor): it must stay, or a redelivery would apply it again.
	outs = append(outs, &queue.Outcome{ID: "old-queued", Status: queue.StatusApplied, At: old, Seq: 50})
	dead := []queue.DeadLetter{{Seq: 1, At: old}, {Seq: 2, At: recent}}
	require.NoError(t, j.Commit(outs, dead, 50))

	cutoff := now.Add(-DefaultRetention)
	n, err := j.Prune(cutoff, 49, DefaultRetention)
	require.NoError(t, err)
	assert.Equal(t, pruneLimit, n, "one prune is bounded")
	n, err = j.Prune(cutoff, 49, DefaultRetention)
	require.NoError(t, err)
	assert.Equal(t, 5, n, "the next one carries on")
	n, err = j.Prune(cutoff, 49, DefaultRetention)
	require.NoError(t, err)
	assert.Zero(t, n)
	l, err := j.Lookup("old-queued")
	require.NoError(t, err)
	assert.True(t, l.Found, "an outcome the queue could redeliver is kept")
	last, retention, err := j.PruneState()
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), last, time.Minute)
	assert.Equal(t, DefaultRetention, retention)

	l, err = j.Lookup("old-0")
	require.NoError(t, err)
	assert.False(t, l.Found)
	assert.WithinDuration(t, cutoff, l.PrunedBefore, time.Millisecond, "a pruned ID is reported as possibly pruned")
	for i := range 3 {
		l, err := j.Lookup(fmt.Sprintf("new-%d", i))
		require.NoError(t, err)
		assert.True(t, l.Found, "recent outcomes stay")
	}
	letters, total, err := j.DeadLetters(10)
	require.NoError(t, err)
	assert.Equal(t, 1, total)
	assert.Equal(t, uint64(2), letters[0].Seq)

	// Bounded: what is left is what is recent, in the index too.
	require.NoError(t, j.db.View(func(tx *bolt.Tx) error {
		assert.Equal(t, 4, tx.Bucket(bucketOutcomes).Stats().KeyN)
		assert.Equal(t, 4, tx.Bucket(bucketByTime).Stats().KeyN)
		return nil
	}))
}

// A journal that has never lost an outcome to pruning does not say that
// unknown IDs may have been pruned.
func TestPruneWithNothingToPrune(t *testing.T) {
	j, err := Open(filepath.Join(t.TempDir(), "journal.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = j.Close() })
	require.NoError(t, j.Commit([]*queue.Outcome{{ID: "a", Status: queue.StatusApplied, At: time.Now()}}, nil, 0))
	n, err := j.Prune(time.Now().Add(-time.Hour), 0, time.Hour)
	require.NoError(t, err)
	assert.Zero(t, n)
	l, err := j.Lookup("unknown")
	require.NoError(t, err)
	assert.True(t, l.PrunedBefore.IsZero())
}

// An outcome that waits on the standing intent is not pruned, however
// old: a redo, Interrupted and Abandon read it.
func TestPruneKeepsPendingOutcomes(t *testing.T) {
	store := testStore(t)
	j := openTest(t, store)
	defer j.Close()
	old := time.Now().UTC().Add(-8 * 24 * time.Hour)
	_, err := j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("one\n"), New: true}}},
		[]*queue.Outcome{{V: queue.Version, ID: "a", Status: queue.StatusApplied, At: old}}, nil, 0)
	require.NoError(t, err)
	n, err := j.Prune(time.Now(), 1, time.Nanosecond)
	require.NoError(t, err)
	assert.Zero(t, n)
	in, err := j.Pending()
	require.NoError(t, err)
	require.NotNil(t, in)
	outs, err := j.PendingOutcomes(in)
	require.NoError(t, err)
	require.Len(t, outs, 1)
	assert.Equal(t, "a", outs[0].ID)
}
