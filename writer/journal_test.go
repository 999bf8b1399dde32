package writer

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
)

func appendJob(t testing.TB, store, id, path, data string) Entry {
	t.Helper()
	job := &queue.Job{V: queue.Version, ID: id, Store: queue.StoreID(resolve(t, store)), Ops: []queue.Op{{Kind: queue.OpAppend, Path: path, Data: []byte(data)}}}
	return Entry{Job: job}
}

func resolve(t testing.TB, store string) string {
	t.Helper()
	real, err := queue.ResolveStore(store)
	require.NoError(t, err)
	return real
}

// A batch costs one journal transaction: its outcomes are recorded with
// its intent. The intent stays, settled, until the next batch or Close
// drops it; meanwhile nothing reads it as interrupted, and the outcomes
// are visible.
func TestBatchRecordsOutcomesWithItsIntent(t *testing.T) {
	store := tempStore(t, nil)
	s, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	res, err := s.Apply([]Entry{appendJob(t, store, "a", "log", "one\n"), appendJob(t, store, "b", "log", "two\n")})
	require.NoError(t, err)
	require.True(t, res[0].Outcome.Applied())
	j := s.Journal()
	err = j.db.View(func(tx *bolt.Tx) error {
		assert.NotNil(t, tx.Bucket(bucketIntent).Get(keyIntent), "the settled intent stands until the next batch")
		assert.Equal(t, 2, tx.Bucket(bucketPending).Stats().KeyN)
		header := tx.Bucket(bucketIntent).Get(keyIntent)
		assert.NotContains(t, string(header), `"data"`, "data is kept raw beside the intent, not in its JSON")
		assert.Equal(t, []byte("one\ntwo\n"), tx.Bucket(bucketIntent).Get(dataKey(0)))
		return nil
	})
	require.NoError(t, err)
	pending, err := j.pendingIntent()
	require.NoError(t, err)
	assert.Nil(t, pending, "carried out by this process: nothing to redo")
	in, err := j.Interrupted()
	require.NoError(t, err)
	assert.Nil(t, in)
	o, err := j.Outcome("a")
	require.NoError(t, err)
	require.NotNil(t, o)
	assert.True(t, o.Applied())

	// The next batch drops the settled intent in its own transaction.
	_, err = s.Apply([]Entry{appendJob(t, store, "c", "other", "x")})
	require.NoError(t, err)
	err = j.db.View(func(tx *bolt.Tx) error {
		assert.Equal(t, 1, tx.Bucket(bucketPending).Stats().KeyN, "only c's outcome is pending")
		assert.Nil(t, tx.Bucket(bucketPending).Get([]byte("a")))
		assert.Nil(t, tx.Bucket(bucketIntent).Get(dataKey(1)))
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	// Close dropped the last one: the next holder finds nothing to redo.
	ro, err := OpenJournalReadOnly(JournalPath(store), time.Second)
	require.NoError(t, err)
	defer ro.Close()
	err = ro.db.View(func(tx *bolt.Tx) error {
		assert.Nil(t, tx.Bucket(bucketIntent).Get(keyIntent))
		assert.Equal(t, 0, tx.Bucket(bucketPending).Stats().KeyN)
		return nil
	})
	require.NoError(t, err)
	for _, id := range []string{"a", "b", "c"} {
		o, err := ro.Outcome(id)
		require.NoError(t, err)
		require.NotNil(t, o, id)
	}
	assert.Equal(t, map[string]string{"log": "one\ntwo\n", "other": "x"}, storeFiles(t, store))
}

// Between the journal write and the files (a crash there), the outcomes
// are provisional: no look-up or listing shows them until a holder has
// redone the intent, and an interrupted batch is reported.
func TestProvisionalOutcomesStayHiddenUntilRedone(t *testing.T) {
	store := tempStore(t, map[string]string{"log": "base\n"})
	s, err := OpenSession(store, SessionOptions{Mode: queue.ModeDaemon})
	require.NoError(t, err)
	at := time.Now().UTC()
	in := &intent{Epoch: s.Epoch(), LastSeq: 4,
		Changes:  []fileChange{{Path: "log", Kind: changeAppend, Data: []byte("new\n"), Base: 5}},
		Outcomes: []*queue.Outcome{{V: queue.Version, ID: "p", Status: queue.StatusApplied, Epoch: s.Epoch(), Seq: 4, Mode: queue.ModeDaemon, At: at}},
	}
	require.NoError(t, s.st.journal.writeIntent(in))
	require.NoError(t, s.Close()) // the "crash": no file written

	ro, err := OpenJournalReadOnly(JournalPath(store), time.Second)
	require.NoError(t, err)
	o, err := ro.Outcome("p")
	require.NoError(t, err)
	assert.Nil(t, o, "not on disk yet: a reader must not hear applied")
	listed, err := ro.Recent(OutcomeFilter{})
	require.NoError(t, err)
	assert.Empty(t, listed)
	intr, err := ro.Interrupted()
	require.NoError(t, err)
	require.NotNil(t, intr)
	assert.Equal(t, 1, intr.Jobs)
	assert.Equal(t, 1, intr.Files)
	require.NoError(t, ro.Close())

	s2, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	defer s2.Close()
	assert.Equal(t, map[string]string{"log": "base\nnew\n"}, storeFiles(t, store))
	o, err = s2.Journal().Outcome("p")
	require.NoError(t, err)
	require.NotNil(t, o)
	assert.True(t, o.Applied())
	assert.True(t, at.Equal(o.At))
	intr, err = s2.Journal().Interrupted()
	require.NoError(t, err)
	assert.Nil(t, intr)
}

// A journal left by an earlier version, whose intent carries its outcomes
// and base64 data, is redone and its outcomes recorded.
func TestRedoIntentOfEarlierVersion(t *testing.T) {
	store := tempStore(t, nil)
	s, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	old := []byte(`{"epoch":1,"changes":[{"path":"f","kind":"write","data":"aGVsbG8=","new":true}],` +
		`"outcomes":[{"v":1,"id":"o","status":"applied","epoch":1,"mode":"daemon","at":"2026-11-30T10:00:00Z"}],"last_seq":9}`)
	require.NoError(t, s.st.journal.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIntent).Put(keyIntent, old)
	}))
	require.NoError(t, s.Close())

	s2, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	defer s2.Close()
	assert.Equal(t, map[string]string{"f": "hello"}, storeFiles(t, store))
	o, err := s2.Journal().Outcome("o")
	require.NoError(t, err)
	require.NotNil(t, o)
	assert.True(t, o.Applied())
	_, lastSeq, err := s2.Journal().Meta()
	require.NoError(t, err)
	assert.Equal(t, uint64(9), lastSeq)
	pending, err := s2.st.journal.pendingIntent()
	require.NoError(t, err)
	assert.Nil(t, pending)
}

// Binary data travels raw: an intent of 1 MiB of non-UTF-8 bytes is
// stored as 1 MiB, not a third more.
func TestIntentKeepsDataRaw(t *testing.T) {
	store := tempStore(t, nil)
	s, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	defer s.Close()
	data := bytes.Repeat([]byte{0xff, 0x00, 0x80}, 1<<18)
	job := &queue.Job{V: queue.Version, ID: "bin", Store: s.StoreID(), Ops: []queue.Op{{Kind: queue.OpPut, Path: "blob", Data: data}}}
	_, err = s.Apply([]Entry{{Job: job}})
	require.NoError(t, err)
	err = s.Journal().db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIntent)
		assert.Equal(t, data, b.Get(dataKey(0)))
		assert.Less(t, len(b.Get(keyIntent)), 1024)
		return nil
	})
	require.NoError(t, err)
}

// The queue is purged up to the highest decided job, but never past one
// taken and still undecided: jobs that joined an exec run are decided
// ahead of jobs queued between them, which must survive a crash.
func TestPurgeFloorKeepsUndecidedJobs(t *testing.T) {
	own := func(seq uint64) item { return item{own: true, e: Entry{Seq: seq}} }
	former := item{own: false, e: Entry{Seq: 2}}
	tests := []struct {
		name      string
		committed uint64
		ahead     []item
		want      uint64
	}{
		{"nothing in hand", 7, nil, 7},
		{"undecided jobs after the decided", 7, []item{own(8), own(9)}, 7},
		{"a joiner decided past jobs still ahead", 9, []item{own(5), own(6)}, 4},
		{"the lowest undecided counts, in any order", 9, []item{own(8), own(3)}, 2},
		{"a former path's job has another stream's sequence", 9, []item{former}, 9},
		{"nothing decided yet", 0, []item{own(1)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, purgeFloor(tt.committed, tt.ahead))
		})
	}
}
