package writer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/journal"
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

// Between the journal write and the files (a crash there), the outcomes
// are provisional: no look-up or listing shows them until a holder has
// redone the intent, and an interrupted batch is reported.
func TestProvisionalOutcomesStayHiddenUntilRedone(t *testing.T) {
	store := tempStore(t, map[string]string{"log": "base\n"})
	s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon})
	require.NoError(t, err)
	at := time.Now().UTC()
	in := &journal.Intent{Epoch: s.Epoch(), LastSeq: 4,
		Changes:  []journal.Change{{Path: "log", Kind: journal.ChangeAppend, Data: []byte("new\n"), Base: 5}},
		Outcomes: []*queue.Outcome{{V: queue.Version, ID: "p", Status: queue.StatusApplied, Epoch: s.Epoch(), Seq: 4, Mode: queue.ModeDaemon, At: at}},
	}
	require.NoError(t, writeIntent(s.st.journal, in))
	require.NoError(t, s.Close()) // the "crash": no file written

	ro, err := journal.OpenReadOnly(journal.Path(store), time.Second)
	require.NoError(t, err)
	o, err := ro.Outcome("p")
	require.NoError(t, err)
	assert.Nil(t, o, "not on disk yet: a reader must not hear applied")
	listed, err := ro.Recent(journal.OutcomeFilter{})
	require.NoError(t, err)
	assert.Empty(t, listed)
	intr, err := ro.Interrupted()
	require.NoError(t, err)
	require.NotNil(t, intr)
	assert.Equal(t, 1, intr.Jobs)
	assert.Equal(t, 1, intr.Files)
	require.NoError(t, ro.Close())

	s2, err := Open(context.Background(), store, Options{})
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
	s, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	old := []byte(`{"epoch":1,"changes":[{"path":"f","kind":"write","data":"aGVsbG8=","new":true}],` +
		`"outcomes":[{"v":1,"id":"o","status":"applied","epoch":1,"mode":"daemon","at":"2026-11-30T10:00:00Z"}],"last_seq":9}`)
	require.NoError(t, s.Close())
	db, err := bolt.Open(journal.Path(store), 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("intent")).Put([]byte("batch"), old)
	}))
	require.NoError(t, db.Close())

	s2, err := Open(context.Background(), store, Options{})
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
	pending, err := s2.st.journal.Pending()
	require.NoError(t, err)
	assert.Nil(t, pending)
}
