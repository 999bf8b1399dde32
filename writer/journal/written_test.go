package journal

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
)

// inBoot makes the journals opened from now on read their boot from a
// file holding id, as after a restart of the machine.
func inBoot(t testing.TB, id string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "boot_id")
	require.NoError(t, os.WriteFile(p, []byte(id+"\n"), 0o600))
	saved := bootPath
	bootPath = p
	t.Cleanup(func() { bootPath = saved })
}

// A written mark (files written, not synced) settles its intent for the
// look-ups of every process of the same boot, as a synced mark does; a
// holder that opens the journal after the writer died redoes it, which
// syncs the files. After a restart of the machine the page cache, and so
// the files, may be gone: the mark is ignored and the intent, with every
// outcome it carries, is interrupted.
func TestWrittenMarkHoldsInItsBootOnly(t *testing.T) {
	inBoot(t, "boot-1")
	store := testStore(t)
	j := openTest(t, store)
	now := time.Now().UTC()
	first, err := j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("one\n"), New: true}}},
		[]*queue.Outcome{applied("first", now)}, nil, 0)
	require.NoError(t, err)
	j.SettleWritten(first)
	// The next batch carries the first's change, not yet synced, and its
	// outcome.
	second, err := j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("one\ntwo\n"), New: true}}, Carried: []string{"first"}},
		[]*queue.Outcome{applied("second", now)}, nil, 0)
	require.NoError(t, err)
	j.SettleWritten(second)
	die(t, j)

	ro := readOnly(t, store)
	for _, id := range []string{"first", "second"} {
		o, err := ro.Outcome(id)
		require.NoError(t, err)
		assert.NotNil(t, o, "%s: the same boot has the files", id)
	}
	require.NoError(t, ro.Close())

	j = openTest(t, store)
	in, err := j.Pending()
	require.NoError(t, err)
	require.NotNil(t, in, "the next holder redoes it")
	assert.Equal(t, []byte("one\ntwo\n"), in.Changes[0].Data)
	require.NoError(t, j.Close())
	stands, npending := intentOnDisk(t, store)
	assert.True(t, stands, "not redone: kept")
	assert.Equal(t, 2, npending, "with the outcome it carries")

	// Its own writer closing without syncing keeps it too.
	j = openTest(t, store)
	require.NoError(t, j.Commit(nil, nil, 0))
	third, err := j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("one\ntwo\n"), New: true}}, Carried: []string{"first", "second"}}, nil, nil, 0)
	require.NoError(t, err)
	j.SettleWritten(third)
	require.NoError(t, j.Close())
	stands, npending = intentOnDisk(t, store)
	assert.True(t, stands, "Close keeps an intent whose files are not synced")
	assert.Equal(t, 2, npending)

	inBoot(t, "boot-2")
	ro = readOnly(t, store)
	for _, id := range []string{"first", "second"} {
		o, err := ro.Outcome(id)
		require.NoError(t, err)
		assert.Nil(t, o, "%s: after a restart the files may be lost", id)
	}
	intr, err := ro.Interrupted()
	require.NoError(t, err)
	assert.Equal(t, &queue.Interrupted{Jobs: 2, Files: 1}, intr)
	require.NoError(t, ro.Close())

	// Once synced, the mark holds whatever happens.
	j = openTest(t, store)
	in, err = j.Pending()
	require.NoError(t, err)
	require.NotNil(t, in)
	require.NoError(t, j.Settle(third))
	die(t, j)
	inBoot(t, "boot-3")
	o, err := readOnly(t, store).Outcome("first")
	require.NoError(t, err)
	assert.NotNil(t, o)
}

// Where the system does not tell its boot, no written mark is written
// or trusted: the intent stays interrupted for other processes until it
// is synced.
func TestWrittenMarkNeedsTheBoot(t *testing.T) {
	inBoot(t, "")
	store := testStore(t)
	j := openTest(t, store)
	token, err := recordAppend(j, "a")
	require.NoError(t, err)
	j.SettleWritten(token)
	o, err := j.Outcome("a")
	require.NoError(t, err)
	assert.NotNil(t, o, "this process knows the files are written")
	die(t, j)
	o, err = readOnly(t, store).Outcome("a")
	require.NoError(t, err)
	assert.Nil(t, o)
}

// A sync that failed takes the written mark back: the intent is redone.
func TestUnsettle(t *testing.T) {
	inBoot(t, "boot-1")
	store := testStore(t)
	j := openTest(t, store)
	token, err := recordAppend(j, "a")
	require.NoError(t, err)
	j.SettleWritten(token)
	j.Unsettle()
	in, err := j.Pending()
	require.NoError(t, err)
	assert.NotNil(t, in, "to redo in this process")
	die(t, j)
	o, err := readOnly(t, store).Outcome("a")
	require.NoError(t, err)
	assert.Nil(t, o, "and in every other")
}

// Both kinds of mark are one length, and an earlier version, which reads
// only synced marks, never takes a written one for settled.
func TestMarkForms(t *testing.T) {
	var tok Token
	tok[0] = 7
	synced, written := markBytes(tok, ""), markBytes(tok, "b00d")
	assert.Len(t, synced, markLen)
	assert.Len(t, written, markLen)
	got, isSynced, ok := parseMark(synced, "")
	assert.True(t, ok && isSynced && got == tok)
	_, _, ok = parseMark(written, "")
	assert.False(t, ok, "no boot: not trusted")
	_, _, ok = parseMark(written, "other")
	assert.False(t, ok, "another boot: not trusted")
	got, isSynced, ok = parseMark(written, "b00d")
	assert.True(t, ok && !isSynced && got == tok)
	assert.NotContains(t, string(written), markPrefix, "an earlier version's prefix")
}

// intentOnDisk reports whether the store's journal keeps an intent and
// how many outcomes wait on it, read with bbolt itself.
func intentOnDisk(t testing.TB, store string) (bool, int) {
	t.Helper()
	db, err := bolt.Open(Path(store), 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	var stands bool
	var pending int
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		stands = tx.Bucket(bucketIntent).Get(keyIntent) != nil
		pending = tx.Bucket(bucketPending).Stats().KeyN
		return nil
	}))
	return stands, pending
}

// recordAppend records an intent that appends a line to a new file, with
// the applied outcome of job id pending with it.
func recordAppend(j *Journal, id string) (Token, error) {
	return j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("one\n"), New: true}}},
		[]*queue.Outcome{applied(id, time.Now().UTC())}, nil, 0)
}

// While the files of the standing intent are written and not synced, it
// is the only copy of their changes: a batch without an intent of its
// own (Commit, or a Record of no changes) records its outcomes and keeps
// it; a Record that would replace it without carrying it is refused.
func TestUnsyncedIntentIsNeverDropped(t *testing.T) {
	inBoot(t, "b00d")
	store := testStore(t)
	standing := func(t *testing.T, j *Journal) (stands bool, pending int) {
		t.Helper()
		require.NoError(t, j.db.View(func(tx *bolt.Tx) error {
			stands = tx.Bucket(bucketIntent).Get(keyIntent) != nil
			pending = tx.Bucket(bucketPending).Stats().KeyN
			return nil
		}))
		return stands, pending
	}
	j := openTest(t, store)
	defer j.Close()
	token, err := recordAppend(j, "a")
	require.NoError(t, err)
	j.SettleWritten(token)

	require.NoError(t, j.Commit([]*queue.Outcome{applied("b", time.Now().UTC())}, nil, 0))
	stands, pending := standing(t, j)
	assert.True(t, stands, "Commit keeps it")
	assert.Equal(t, 1, pending)
	o, err := j.Outcome("b")
	require.NoError(t, err)
	assert.NotNil(t, o, "and records its outcome")

	_, err = j.Record(nil, []*queue.Outcome{applied("c", time.Now().UTC())}, nil, 0)
	assert.ErrorContains(t, err, "not synced")
	_, err = recordAppend(j, "d")
	assert.ErrorContains(t, err, "not synced")
	stands, pending = standing(t, j)
	assert.True(t, stands)
	assert.Equal(t, 1, pending, "nothing of the refused batches recorded")

	carried, err := j.Record(&Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("one\ntwo\n"), New: true}}, Carried: []string{"a"}},
		[]*queue.Outcome{applied("e", time.Now().UTC())}, nil, 0)
	require.NoError(t, err, "an intent that carries it replaces it")
	_, pending = standing(t, j)
	assert.Equal(t, 2, pending)
	require.NoError(t, j.Settle(carried))
	require.NoError(t, j.Commit(nil, nil, 0))
	stands, pending = standing(t, j)
	assert.False(t, stands, "synced: the next commit drops it")
	assert.Zero(t, pending)
}

// firstWritten opens the store's journal and records a first batch, of
// job "first" appending to log, its files written and not synced.
func firstWritten(t *testing.T, store string) (*Journal, *Intent) {
	t.Helper()
	j := openTest(t, store)
	first := &Intent{Epoch: 1, Changes: []Change{{Path: "log", Kind: ChangeAppend, Data: []byte("one\n"), New: true}}}
	token, err := j.Record(first, []*queue.Outcome{applied("first", time.Now().UTC())}, nil, 0)
	require.NoError(t, err)
	j.SettleWritten(token)
	return j, first
}

// A batch that carries the standing intent's changes, their files
// written and not synced, writes only its own changes: the carried ones
// keep their records, in order, and those a later change of their file
// replaced are dropped. A holder after a crash redoes them all.
func TestCarriedChangesAreWrittenOnce(t *testing.T) {
	inBoot(t, "boot-1")
	store := testStore(t)
	j, first := firstWritten(t, store)
	now := time.Now().UTC()
	// Mark the first change's record: rewritten, the mark would be gone.
	marked := first.Changes[0]
	marked.Base = 77
	require.NoError(t, j.db.Update(func(tx *bolt.Tx) error {
		v, err := encodeChange(marked)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketIntent).Put(changeKey(first.Changes[0].key), v)
	}))

	second := &Intent{Epoch: 1, Carried: []string{"first"}, Changes: []Change{
		first.Changes[0],
		{Path: "log", Kind: ChangeAppend, Data: []byte("two\n"), Base: 4},
		{Path: "blob", Kind: ChangeWrite, Data: []byte{}, New: true},
	}}
	token, err := j.Record(second, []*queue.Outcome{applied("second", now)}, nil, 0)
	require.NoError(t, err)
	j.SettleWritten(token)
	// The third replaces blob's change with a staged write of it.
	third := &Intent{Epoch: 1, Carried: []string{"first", "second"}, LastSeq: 9, Changes: []Change{
		second.Changes[0], second.Changes[1],
		{Path: "blob", Kind: ChangeStaged, Size: 3, Sum: 7, New: true},
	}}
	token, err = j.Record(third, []*queue.Outcome{applied("third", now)}, nil, 9)
	require.NoError(t, err)
	j.SettleWritten(token)
	require.NoError(t, j.db.View(func(tx *bolt.Tx) error {
		assert.Len(t, changeRecords(tx), 3, "blob's first change dropped")
		return nil
	}))
	die(t, j)

	j = openTest(t, store)
	defer j.Close()
	in, err := j.Pending()
	require.NoError(t, err)
	require.NotNil(t, in, "the next holder redoes it")
	assert.Equal(t, uint64(9), in.LastSeq)
	assert.Equal(t, []Change{
		{Path: "log", Kind: ChangeAppend, Data: []byte("one\n"), Base: 77, New: true},
		{Path: "log", Kind: ChangeAppend, Data: []byte("two\n"), Base: 4},
		{Path: "blob", Kind: ChangeStaged, Size: 3, Sum: 7, New: true},
	}, in.Changes, "the carried records as first written, in order")
	outs, err := j.PendingOutcomes(in)
	require.NoError(t, err)
	var ids []string
	for _, o := range outs {
		ids = append(ids, o.ID)
	}
	assert.ElementsMatch(t, []string{"first", "second", "third"}, ids)

	// A batch that does not carry it drops every record.
	require.NoError(t, j.Commit(in.Outcomes, nil, in.LastSeq))
	require.NoError(t, j.db.View(func(tx *bolt.Tx) error {
		assert.Empty(t, changeRecords(tx))
		assert.Nil(t, tx.Bucket(bucketIntent).Get(keyIntent))
		return nil
	}))
}

// An intent written by an earlier version, its changes in its header and
// their data under data/<i>, is still redone, and dropped whole. An
// earlier version, which decodes the header into Intent, refuses this
// version's instead of reading it as an intent of no changes.
func TestIntentOfAnEarlierVersion(t *testing.T) {
	store := testStore(t)
	j := openTest(t, store)
	defer j.Close()
	old := []Change{
		{Path: "log", Kind: ChangeAppend, Base: 4},
		{Path: "gone", Kind: ChangeRemove},
	}
	header, err := json.Marshal(&Intent{Epoch: 3, Changes: old, LastSeq: 5})
	require.NoError(t, err)
	require.NoError(t, j.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIntent)
		require.NoError(t, b.Put(keyIntent, header))
		return b.Put(dataKey(0), []byte("x\n"))
	}))
	in, err := j.Pending()
	require.NoError(t, err)
	require.NotNil(t, in)
	old[0].Data = []byte("x\n")
	assert.Equal(t, &Intent{Epoch: 3, Changes: old, LastSeq: 5}, in)
	require.NoError(t, j.Commit(nil, nil, 5))
	require.NoError(t, j.db.View(func(tx *bolt.Tx) error {
		assert.Nil(t, tx.Bucket(bucketIntent).Get(dataKey(0)))
		assert.Nil(t, tx.Bucket(bucketIntent).Get(keyIntent))
		return nil
	}))

	_, err = recordAppend(j, "new")
	require.NoError(t, err)
	require.NoError(t, j.db.View(func(tx *bolt.Tx) error {
		err := json.Unmarshal(tx.Bucket(bucketIntent).Get(keyIntent), new(Intent))
		assert.ErrorContains(t, err, "cannot unmarshal object")
		return nil
	}))
}

// A look-up while a batch that carries the one before is being written
// (recorded, its files not yet written) still shows the outcomes it
// showed: those of the batch before, whose files were, in this process
// and in any other of the same boot. The new batch's stay hidden until
// it settles; after a restart of the machine, all of them, until a redo.
func TestCarriedOutcomesStayShown(t *testing.T) {
	inBoot(t, "boot-1")
	store := testStore(t)
	j, first := firstWritten(t, store)
	now := time.Now().UTC()
	second := &Intent{Epoch: 1, Carried: []string{"first"}, Changes: []Change{first.Changes[0], {Path: "log", Kind: ChangeAppend, Data: []byte("two\n"), Base: 4}}}
	_, err := j.Record(second, []*queue.Outcome{applied("second", now)}, nil, 0)
	require.NoError(t, err)

	shown := func(j *Journal) []string {
		t.Helper()
		var ids []string
		for _, id := range []string{"first", "second"} {
			o, err := j.Outcome(id)
			require.NoError(t, err)
			if o != nil {
				ids = append(ids, id)
			}
		}
		info, err := j.Info()
		require.NoError(t, err)
		assert.Equal(t, len(ids), info.Outcomes, "counted as shown")
		return ids
	}
	assert.Equal(t, []string{"first"}, shown(j), "this process, between the record and the files")
	// Killed there: the mark names the first.
	die(t, j)
	ro := readOnly(t, store)
	assert.Equal(t, []string{"first"}, shown(ro), "another process of the boot")
	require.NoError(t, ro.Close())
	inBoot(t, "boot-2")
	ro = readOnly(t, store)
	assert.Empty(t, shown(ro), "after a restart, until a holder redoes them")
	require.NoError(t, ro.Close())

	j = openTest(t, store)
	defer j.Close()
	in, err := j.Pending()
	require.NoError(t, err)
	require.NotNil(t, in)
	require.NoError(t, j.Commit(in.Outcomes, nil, in.LastSeq)) // redone
	assert.Equal(t, []string{"first", "second"}, shown(j))
}

// A change's record reads back as the change, whatever its path (one a
// job may name) and data hold (newlines, JSON, nothing), and a record
// that is not one is an error, never a panic.
func FuzzChangeRecord(f *testing.F) {
	f.Add("log", ChangeAppend, []byte("one\n"), int64(4), false, []byte(`{"path":"x"}`))
	f.Add("a\nb", ChangeWrite, []byte{}, int64(0), true, []byte("{}\n"))
	f.Add("blob", ChangeStaged, []byte(nil), int64(0), true, []byte("\n\n"))
	f.Fuzz(func(t *testing.T, p, kind string, data []byte, base int64, isNew bool, junk []byte) {
		_, _ = decodeChange(junk)
		if queue.CheckPath(p) != nil || !utf8.ValidString(kind) {
			t.Skip()
		}
		c := Change{Path: p, Kind: kind, Data: data, Base: base, New: isNew}
		v, err := encodeChange(c)
		require.NoError(t, err)
		got, err := decodeChange(v)
		require.NoError(t, err)
		assert.Equal(t, c, got)
	})
}
