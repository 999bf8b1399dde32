package journal

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
)

// testStore makes a store folder with its .scribe and returns its real
// path.
func testStore(t testing.TB) string {
	t.Helper()
	store, err := queue.ResolveStore(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, queue.Layout{Root: store}.Make())
	return store
}

func openTest(t testing.TB, store string) *Journal {
	t.Helper()
	j, err := Open(Path(store))
	require.NoError(t, err)
	return j
}

// readOnly opens the store's journal as another process would, without
// the store lock.
func readOnly(t testing.TB, store string) *Journal {
	t.Helper()
	ro, err := OpenReadOnly(Path(store), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ro.Close() })
	return ro
}

// die lets go of j as a process SIGKILLed at this instant would: what
// it knew is forgotten, nothing on disk is dropped (Close would drop a
// settled intent).
func die(t testing.TB, j *Journal) {
	t.Helper()
	j.settled.Store(nil)
	if j.mark != nil {
		require.NoError(t, j.mark.Close())
	}
	if j.attempts.f != nil {
		require.NoError(t, j.attempts.f.Close())
	}
	require.NoError(t, j.db.Close())
}

// Each job tried keeps its own count while others are tried and decided
// (a high job goes before the one that killed the writer): deciding one
// frees only its slot, and a full mark gives up the fewest attempts.
func TestAttemptsKeptPerJob(t *testing.T) {
	store := testStore(t)
	j := openTest(t, store)
	require.NoError(t, j.SetAttempts(7, 2))
	require.NoError(t, j.SetAttempts(9, 1))
	o := applied("h", time.Now())
	o.Seq = 9
	require.NoError(t, j.Commit([]*queue.Outcome{o}, nil, 9))
	die(t, j)

	j = openTest(t, store)
	t.Cleanup(func() { _ = j.Close() })
	for seq, want := range map[uint64]uint64{7: 2, 9: 0} {
		n, err := j.Attempts(seq)
		require.NoError(t, err)
		assert.Equal(t, want, n, "job %d", seq)
	}
	for seq := uint64(100); seq < 100+attemptSlots; seq++ {
		require.NoError(t, j.SetAttempts(seq, 1))
	}
	n, err := j.Attempts(7)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), n, "a full mark keeps the job tried most")
	n, err = j.Attempts(100)
	require.NoError(t, err)
	assert.Zero(t, n, "and gives up one tried least")
}

// A job's attempts outlive the process that tried it, cost no sync (no
// journal transaction), and are forgotten once a batch is decided: a
// later stream may give another job its sequence.
func TestAttemptsOutliveTheProcess(t *testing.T) {
	store := testStore(t)
	j := openTest(t, store)
	require.NoError(t, j.SetAttempts(7, 1))
	before := j.db.Stats()
	require.NoError(t, j.SetAttempts(7, 2))
	after := j.db.Stats()
	assert.Equal(t, before.TxStats.GetWrite(), after.TxStats.GetWrite(), "no journal transaction")
	die(t, j)

	j = openTest(t, store)
	n, err := j.Attempts(7)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), n, "the attempts of a killed process")
	n, err = j.Attempts(8)
	require.NoError(t, err)
	assert.Zero(t, n, "another job's")

	require.NoError(t, j.SetAttempts(7, 3))
	require.NoError(t, j.Commit([]*queue.Outcome{applied("a", time.Now())}, nil, 7))
	n, err = j.Attempts(7)
	require.NoError(t, err)
	assert.Zero(t, n, "forgotten once decided")
	require.NoError(t, j.Close())

	// A torn mark reads as none.
	b := attemptBytes(9, 2)
	b[len(b)-1] ^= 1
	require.NoError(t, os.WriteFile(queue.Layout{Root: store}.Attempt(), b, 0o600))
	j = openTest(t, store)
	t.Cleanup(func() { _ = j.Close() })
	n, err = j.Attempts(9)
	require.NoError(t, err)
	assert.Zero(t, n)
}

func applied(id string, at time.Time) *queue.Outcome {
	return &queue.Outcome{V: queue.Version, ID: id, Status: queue.StatusApplied, Epoch: 1, Mode: queue.ModeDaemon, At: at}
}

// A batch costs one journal transaction: its outcomes are recorded with
// its intent. The intent stays, settled, until the next batch or Close
// drops it; meanwhile nothing reads it as interrupted, and the outcomes
// are visible.
func TestBatchRecordsOutcomesWithItsIntent(t *testing.T) {
	store := testStore(t)
	j := openTest(t, store)
	now := time.Now().UTC()
	token, err := j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("one\ntwo\n"), New: true}}},
		[]*queue.Outcome{applied("a", now), applied("b", now)}, nil, 0)
	require.NoError(t, err)
	o, err := j.Outcome("a")
	require.NoError(t, err)
	assert.Nil(t, o, "provisional until settled")
	require.NoError(t, j.Settle(token))
	err = j.db.View(func(tx *bolt.Tx) error {
		assert.NotNil(t, tx.Bucket(bucketIntent).Get(keyIntent), "the settled intent stands until the next batch")
		assert.Equal(t, 2, tx.Bucket(bucketPending).Stats().KeyN)
		header := tx.Bucket(bucketIntent).Get(keyIntent)
		assert.NotContains(t, string(header), `"data"`, "data is kept raw beside the intent, not in its JSON")
		records := changeRecords(tx)
		require.Len(t, records, 1)
		assert.True(t, bytes.HasSuffix(records[0], []byte("}\none\ntwo\n")), "%q: the change's JSON, then its data raw", records[0])
		return nil
	})
	require.NoError(t, err)
	pending, err := j.Pending()
	require.NoError(t, err)
	assert.Nil(t, pending, "carried out by this process: nothing to redo")
	in, err := j.Interrupted()
	require.NoError(t, err)
	assert.Nil(t, in)
	o, err = j.Outcome("a")
	require.NoError(t, err)
	require.NotNil(t, o)
	assert.True(t, o.Applied())

	// The next batch drops the settled intent in its own transaction.
	token, err = j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "other", Kind: ChangeWrite, Data: []byte("x"), New: true}}},
		[]*queue.Outcome{applied("c", now)}, nil, 0)
	require.NoError(t, err)
	require.NoError(t, j.Settle(token))
	err = j.db.View(func(tx *bolt.Tx) error {
		assert.Equal(t, 1, tx.Bucket(bucketPending).Stats().KeyN, "only c's outcome is pending")
		assert.Nil(t, tx.Bucket(bucketPending).Get([]byte("a")))
		records := changeRecords(tx)
		require.Len(t, records, 1, "only the new batch's change")
		assert.True(t, bytes.HasSuffix(records[0], []byte("}\nx")), "%q", records[0])
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, j.Close())

	// Close dropped the last one: the next holder finds nothing to redo.
	ro := readOnly(t, store)
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
}

// Binary data travels raw: an intent of 768 KiB of non-UTF-8 bytes is
// stored as such, not a third more.
func TestIntentKeepsDataRaw(t *testing.T) {
	j := openTest(t, testStore(t))
	defer j.Close()
	data := bytes.Repeat([]byte{0xff, 0x00, 0x80}, 1<<18)
	_, err := j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "blob", Kind: ChangeWrite, Data: data, New: true}}},
		[]*queue.Outcome{applied("bin", time.Now().UTC())}, nil, 0)
	require.NoError(t, err)
	err = j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIntent)
		records := changeRecords(tx)
		require.Len(t, records, 1)
		assert.True(t, bytes.HasSuffix(records[0], data))
		assert.Less(t, len(records[0]), len(data)+1024)
		assert.Less(t, len(b.Get(keyIntent)), 1024)
		return nil
	})
	require.NoError(t, err)
	in, err := j.Pending()
	require.NoError(t, err)
	require.NotNil(t, in)
	assert.Equal(t, data, in.Changes[0].Data, "Pending hands the data back")
}

// Without a mark to write (it could not be opened), settling drops the
// intent in a transaction instead: the outcomes stand for every process
// all the same.
func TestSettleWithoutMark(t *testing.T) {
	store := testStore(t)
	j := openTest(t, store)
	require.NoError(t, j.mark.Close())
	j.mark = nil
	token, err := j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("one\n"), New: true}}},
		[]*queue.Outcome{applied("a", time.Now().UTC())}, nil, 0)
	require.NoError(t, err)
	require.NoError(t, j.Settle(token))
	require.NoError(t, j.db.View(func(tx *bolt.Tx) error {
		assert.Nil(t, tx.Bucket(bucketIntent).Get(keyIntent), "dropped at once")
		return nil
	}))
	die(t, j)
	o, err := readOnly(t, store).Outcome("a")
	require.NoError(t, err)
	assert.NotNil(t, o)
}

// The mark settles the intent it names, no other, for every process
// that opens the journal after the writer died; a mark that another user
// could have written, or a symlink, is not read at all.
func TestSettledMarkNamesOneIntent(t *testing.T) {
	store := testStore(t)
	j := openTest(t, store)
	now := time.Now().UTC()
	first, err := j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("one\n"), Base: 5}}},
		[]*queue.Outcome{applied("first", now)}, nil, 0)
	require.NoError(t, err)
	require.NoError(t, j.Settle(first))
	second, err := j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("two\n"), Base: 9}}},
		[]*queue.Outcome{applied("second", now)}, nil, 0)
	require.NoError(t, err)
	die(t, j) // before the files of the second were written

	ro := readOnly(t, store)
	o, err := ro.Outcome("first")
	require.NoError(t, err)
	assert.NotNil(t, o, "the batch before is settled")
	o, err = ro.Outcome("second")
	require.NoError(t, err)
	assert.Nil(t, o, "not on disk: not applied")
	intr, err := ro.Interrupted()
	require.NoError(t, err)
	assert.Equal(t, &queue.Interrupted{Jobs: 1, Files: 1}, intr)
	require.NoError(t, ro.Close())

	mark := queue.Layout{Root: store}.Settled()
	forged := markBytes(second, "")
	require.NoError(t, os.WriteFile(mark, forged, 0o600))
	require.NoError(t, os.Chmod(mark, 0o622))
	_, err = OpenReadOnly(Path(store), time.Second)
	assert.ErrorIs(t, err, queue.ErrInsecure, "a group-writable mark: the journal is not read beside it")
	require.NoError(t, os.Remove(mark))
	elsewhere := filepath.Join(t.TempDir(), "mark")
	require.NoError(t, os.WriteFile(elsewhere, forged, 0o600))
	require.NoError(t, os.Symlink(elsewhere, mark))
	_, err = OpenReadOnly(Path(store), time.Second)
	assert.ErrorIs(t, err, queue.ErrInsecure, "a symlinked mark: the journal is not read beside it")
	require.NoError(t, os.Remove(mark))

	require.NoError(t, os.WriteFile(mark, forged, 0o600))
	o, err = readOnly(t, store).Outcome("second")
	require.NoError(t, err)
	assert.NotNil(t, o, "a mark of the writer's own, naming the intent, settles it")
}

// The journal keeps how many of its outcomes are applied and how many
// rejected through every change of its outcomes: a batch, a prune, an
// abandoned batch; a journal of an earlier version, which keeps no
// tally, is counted.
func TestJournalTally(t *testing.T) {
	store := testStore(t)
	j := openTest(t, store)
	now := time.Now().UTC()
	rejected := &queue.Outcome{V: queue.Version, ID: "bad", Status: queue.StatusRejected, Reason: queue.ReasonPathEscapes, At: now}
	token, err := j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("1\n2\n"), New: true}}},
		[]*queue.Outcome{applied("a", now), applied("b", now), rejected}, nil, 0)
	require.NoError(t, err)
	require.NoError(t, j.Settle(token))
	tallyIs := func(applied, rejected uint64, outcomes int, msg string) {
		t.Helper()
		info, err := j.Info()
		require.NoError(t, err)
		assert.Equal(t, [3]uint64{applied, rejected, uint64(outcomes)}, [3]uint64{info.Applied, info.Rejected, uint64(info.Outcomes)}, msg)
	}
	tallyIs(2, 1, 3, "a batch")
	require.NoError(t, j.Commit([]*queue.Outcome{applied("a", now)}, nil, 0))
	tallyIs(2, 1, 3, "a recorded outcome is never recorded again")

	// An earlier version's journal: counted from its outcomes, then kept.
	require.NoError(t, j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keyTally) }))
	tallyIs(2, 1, 3, "counted")

	old := time.Now().Add(-30 * 24 * time.Hour).UTC()
	require.NoError(t, j.Commit([]*queue.Outcome{
		{V: queue.Version, ID: "old-applied", Status: queue.StatusApplied, At: old},
		{V: queue.Version, ID: "old-rejected", Status: queue.StatusRejected, Reason: queue.ReasonBadInput, At: old},
	}, nil, 0))
	tallyIs(3, 2, 5, "recorded by a redo")
	n, err := j.Prune(time.Now().Add(-DefaultRetention), 0, DefaultRetention)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	tallyIs(2, 1, 3, "pruned")

	// An interrupted batch, abandoned: its applied outcome becomes a
	// rejection.
	require.NoError(t, writeIntent(j, &Intent{Epoch: 2, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("3\n"), Base: 4}},
		Outcomes: []*queue.Outcome{{V: queue.Version, ID: "c", Status: queue.StatusApplied, At: time.Now().UTC()}}}))
	tallyIs(2, 1, 3, "provisional: not counted")
	in, err := j.Pending()
	require.NoError(t, err)
	outs, err := j.PendingOutcomes(in)
	require.NoError(t, err)
	for _, o := range outs {
		o.Status, o.Reason = queue.StatusRejected, queue.ReasonAbandoned
	}
	require.NoError(t, j.Abandon(outs))
	require.NoError(t, j.Close())
	j = readOnly(t, store)
	tallyIs(2, 2, 4, "abandoned")
}

// writeIntent records a batch as Record does, with in.Outcomes as its
// outcomes, and settles nothing.
// changeRecords are the standing intent's change records, in order.
func changeRecords(tx *bolt.Tx) [][]byte {
	var records [][]byte
	c := tx.Bucket(bucketIntent).Cursor()
	for k, v := c.Seek(prefixChange); k != nil && bytes.HasPrefix(k, prefixChange); k, v = c.Next() {
		records = append(records, bytes.Clone(v))
	}
	return records
}

func writeIntent(j *Journal, in *Intent) error {
	_, err := j.Record(in, in.Outcomes, nil, in.LastSeq)
	return err
}

// Outcomes come in about the order of their keys (version 7 UUIDs, and
// time for the index), so the journal's pages are left nearly full when
// they split: half the pages, and half the file, of bbolt's default.
func TestOutcomePagesFillUp(t *testing.T) {
	store := testStore(t)
	j := openTest(t, store)
	defer j.Close()
	for range 100 {
		var outs []*queue.Outcome
		for range 20 {
			outs = append(outs, applied(queue.NewID(), time.Now().UTC()))
		}
		require.NoError(t, j.Commit(outs, nil, 0))
	}
	require.NoError(t, j.db.View(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketOutcomes, bucketByTime} {
			s := tx.Bucket(name).Stats()
			fill := float64(s.LeafInuse) / float64(s.LeafAlloc)
			assert.Greater(t, fill, 0.8, "%s: %d leaves, %.2f full", name, s.LeafPageN, fill)
		}
		return nil
	}))
}

// Opening a journal that has its buckets commits nothing (a commit costs
// two fdatasyncs, each time a holder takes the store); a new journal, or
// one that lacks a bucket, gets them.
func TestOpenWritesOnlyWhatIsMissing(t *testing.T) {
	store := testStore(t)
	txid := func(j *Journal) (id int) {
		require.NoError(t, j.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil }))
		return id
	}
	j := openTest(t, store)
	made := txid(j)
	require.NoError(t, j.Close())

	j = openTest(t, store)
	assert.Equal(t, made, txid(j), "opening a complete journal committed a transaction")
	require.NoError(t, j.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketDead) }))
	require.NoError(t, j.Close())

	j = openTest(t, store)
	defer j.Close()
	require.NoError(t, j.db.View(func(tx *bolt.Tx) error {
		assert.NotNil(t, tx.Bucket(bucketDead), "a missing bucket was not made again")
		return nil
	}))
}

// A journal cut short is refused, by Open and OpenReadOnly alike, with
// ErrDamaged naming the sizes: bbolt trusts its meta page, and reading a
// page past the end of the file is a SIGBUS that ended every command.
// Nothing is written to it.
func TestJournalCutShortIsDamaged(t *testing.T) {
	store := testStore(t)
	j := openTest(t, store)
	for range 50 {
		var outs []*queue.Outcome
		for range 20 {
			outs = append(outs, applied(queue.NewID(), time.Now().UTC()))
		}
		require.NoError(t, j.Commit(outs, nil, 0))
	}
	require.NoError(t, j.Close())
	path := Path(store)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Greater(t, fi.Size(), int64(64<<10), "a journal of many pages")
	for _, size := range []int64{fi.Size() / 2, 3 * 4096} {
		t.Run(strconv.FormatInt(size, 10), func(t *testing.T) {
			require.NoError(t, os.Truncate(path, size))
			before, err := os.ReadFile(path)
			require.NoError(t, err)
			_, err = Open(path)
			require.ErrorIs(t, err, ErrDamaged)
			assert.Contains(t, err.Error(), "cut short")
			_, err = OpenReadOnly(path, time.Second)
			require.ErrorIs(t, err, ErrDamaged)
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, before, after, "a damaged journal is left as it is")
		})
	}
}

// A journal emptied after batches were recorded in it (its settled mark
// says so) is damaged, not a new journal: one made anew would forget
// every ID it recorded, and a job submitted again under one would apply
// again. An empty journal with no mark beside it, which a holder killed
// while it made the journal leaves, is made as a new one.
func TestEmptiedJournalIsDamaged(t *testing.T) {
	store := testStore(t)
	path := Path(store)
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	j, err := Open(path)
	require.NoError(t, err, "an empty journal and no mark: a new journal")
	token, err := j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("one\n")}}},
		[]*queue.Outcome{applied("first", time.Now().UTC())}, nil, 0)
	require.NoError(t, err)
	require.NoError(t, j.Settle(token))
	require.NoError(t, j.Close())

	require.NoError(t, os.Truncate(path, 0))
	_, err = Open(path)
	require.ErrorIs(t, err, ErrDamaged)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Zero(t, fi.Size(), "the emptied journal is left as it is")
	_, err = OpenReadOnly(path, time.Second)
	require.ErrorIs(t, err, ErrDamaged, "a reader is told too")

	// Removed rather than emptied, it is as forgotten: refused, and not
	// made anew.
	require.NoError(t, os.Remove(path))
	_, err = Open(path)
	require.ErrorIs(t, err, ErrDamaged)
	assert.ErrorContains(t, err, "is missing")
	_, err = OpenReadOnly(path, time.Second)
	require.ErrorIs(t, err, ErrDamaged)
	assert.NoFileExists(t, path)

	// Moved aside with its mark, as recovery.md tells: a new journal.
	require.NoError(t, os.Remove(markPath(path)))
	j, err = Open(path)
	require.NoError(t, err)
	require.NoError(t, j.Close())
}
