package embednats_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/embednats"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// shared is a server of several stores, as serve runs it.
type shared struct {
	srv    *embednats.Server
	qd     *discovery.QueueDir
	locks  []*discovery.Lock
	stores []string
}

// startShared serves stores (canonical paths) from the shared queue
// folder dir; close stops it (also at cleanup).
func startShared(t testing.TB, dir string, stores ...string) *shared {
	t.Helper()
	s := &shared{stores: stores}
	for _, store := range stores {
		lk, err := discovery.Take(t.Context(), store, nil)
		require.NoError(t, err)
		s.locks = append(s.locks, lk)
	}
	var err error
	s.qd, err = discovery.TakeQueueDir(t.Context(), dir, stores, nil)
	require.NoError(t, err)
	s.srv, err = embednats.StartShared(t.Context(), s.qd, s.locks, embednats.Config{})
	require.NoError(t, err)
	t.Cleanup(s.close)
	return s
}

func (s *shared) close() {
	_ = s.srv.Close()
	_ = s.qd.Close()
	for _, lk := range s.locks {
		_ = lk.Close()
	}
}

// queueJobs creates the store's stream on conn and queues jobs with
// the given IDs.
func queueJobs(t testing.TB, conn *nats.Conn, storeID string, ids ...string) {
	t.Helper()
	js, err := jetstream.New(conn)
	require.NoError(t, err)
	_, err = queue.CreateStream(t.Context(), js, storeID, queue.Limits{MaxBytes: 1 << 20})
	require.NoError(t, err)
	for _, id := range ids {
		_, err := queue.Publish(t.Context(), js, storeID, queue.JobsSubject(storeID), id, []byte("job "+id))
		require.NoError(t, err)
	}
}

// queuedIDs lists the job IDs in the stream of storeID (name: another
// ID's stream) on conn, in order.
func queuedIDs(t testing.TB, conn *nats.Conn, stream string) []string {
	t.Helper()
	js, err := jetstream.New(conn)
	require.NoError(t, err)
	s, err := js.Stream(t.Context(), stream)
	require.NoError(t, err)
	var ids []string
	st := s.CachedInfo().State
	for seq := st.FirstSeq; st.Msgs > 0 && seq <= st.LastSeq; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		require.NoError(t, err)
		ids = append(ids, m.Header.Get(nats.MsgIdHdr))
	}
	return ids
}

// On a server of several stores each store has its own user in an
// account of its own: its submitters can queue jobs for it only, and see
// nothing of another store's traffic, not even the replies under
// _INBOX.>.
func TestSharedServerIsolatesStores(t *testing.T) {
	a, b := newStore(t), newStore(t)
	s := startShared(t, filepath.Join(t.TempDir(), "queue"), a, b)
	da, ok := s.srv.StoreDiscovery(queue.StoreID(a))
	require.True(t, ok)
	db, ok := s.srv.StoreDiscovery(queue.StoreID(b))
	require.True(t, ok)
	assert.Equal(t, da.URL, db.URL, "one server")
	assert.Equal(t, da.TLSCertSHA256, db.TLSCertSHA256)
	assert.NotEqual(t, da.User, db.User, "a user per store")
	assert.NotEqual(t, da.Password, db.Password)
	for _, d := range []queue.Discovery{da, db} {
		queueJobs(t, s.srv.StoreConn(d.StoreID), d.StoreID)
	}

	errs := make(chan error, 16)
	ca, err := connect(t, da, nats.UserInfo(da.User, da.Password), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	require.NoError(t, err)
	defer ca.Close()
	cb, err := connect(t, db, nats.UserInfo(db.User, db.Password))
	require.NoError(t, err)
	defer cb.Close()

	// A's replies, all of them.
	spy, err := ca.SubscribeSync("_INBOX.>")
	require.NoError(t, err)
	require.NoError(t, ca.Flush())

	jsa, err := jetstream.New(ca)
	require.NoError(t, err)
	_, err = queue.Publish(t.Context(), jsa, da.StoreID, queue.JobsSubject(da.StoreID), "mine", []byte("job"))
	require.NoError(t, err, "A queues for A")
	m, err := spy.NextMsg(time.Second)
	require.NoError(t, err, "A sees its own reply")
	assert.Contains(t, string(m.Data), queue.StreamName(da.StoreID))

	// B queues for B: A sees none of it.
	jsb, err := jetstream.New(cb)
	require.NoError(t, err)
	_, err = queue.Publish(t.Context(), jsb, db.StoreID, queue.JobsSubject(db.StoreID), "theirs", []byte("job"))
	require.NoError(t, err)
	_, err = spy.NextMsg(200 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout, "B's reply is not A's to see")

	// A cannot queue for B: refused, not stored.
	_, err = queue.Publish(t.Context(), jsa, db.StoreID, queue.JobsSubject(db.StoreID), "intruder", []byte("job"))
	require.Error(t, err)
	select {
	case err := <-errs:
		assert.ErrorIs(t, err, nats.ErrPermissionViolation)
	case <-time.After(5 * time.Second):
		t.Fatal("no permissions violation")
	}
	assert.Equal(t, []string{"theirs"}, queuedIDs(t, s.srv.StoreConn(db.StoreID), queue.StreamName(db.StoreID)))
}

// A daemon of several stores takes over the jobs a daemon of one store
// left in the store's own folder, in order; a daemon of the store alone
// takes them back from the shared folder.
func TestTakeOverBothWays(t *testing.T) {
	a, b := newStore(t), newStore(t)
	id := queue.StoreID(a)
	dir := filepath.Join(t.TempDir(), "queue")

	lk, err := discovery.Take(t.Context(), a, nil)
	require.NoError(t, err)
	single, err := embednats.Start(t.Context(), lk, embednats.Config{})
	require.NoError(t, err)
	queueJobs(t, single.Conn(), id, "j1", "j2", "j3")
	require.NoError(t, single.Close())
	require.NoError(t, lk.Close())

	s := startShared(t, dir, a, b)
	own := embednats.QueueSource{Dir: queue.Layout{Root: a}.Queue(), StoreID: id}
	has, err := own.HasQueue()
	require.NoError(t, err)
	require.True(t, has)
	// The caller's record moves between the copy and the deletion; if it
	// cannot, the jobs stay where they were (and their copies here are
	// duplicates the journal recognises).
	refused := errors.New("cannot record")
	_, err = s.srv.TakeOver(t.Context(), embednats.TakeOverConfig{StoreID: id, From: own, Limits: queue.Limits{MaxBytes: 1 << 20}, Moved: func() error { return refused }})
	require.ErrorIs(t, err, refused)
	has, err = own.HasQueue()
	require.NoError(t, err)
	require.True(t, has, "kept where the record still points")
	conn := s.srv.StoreConn(id)
	js, err := jetstream.New(conn)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(t.Context(), queue.StreamName(id))) // forget the copies

	recorded := false
	n, err := s.srv.TakeOver(t.Context(), embednats.TakeOverConfig{StoreID: id, From: own, Limits: queue.Limits{MaxBytes: 1 << 20}, Moved: func() error {
		recorded = true
		has, err := own.HasQueue()
		require.NoError(t, err)
		assert.True(t, has, "the old queue is deleted after the record moves")
		assert.Equal(t, []string{"j1", "j2", "j3"}, queuedIDs(t, conn, queue.StreamName(id)), "every job is here before it does")
		return nil
	}})
	require.NoError(t, err)
	assert.True(t, recorded)
	assert.Equal(t, 3, n)
	has, err = own.HasQueue()
	require.NoError(t, err)
	assert.False(t, has, "the source's stream is gone once copied")
	queueJobs(t, conn, id, "j4")
	assert.Equal(t, []string{"j1", "j2", "j3", "j4"}, queuedIDs(t, conn, queue.StreamName(id)))
	n, err = s.srv.TakeOver(t.Context(), embednats.TakeOverConfig{StoreID: id, From: own, Limits: queue.Limits{}})
	require.NoError(t, err)
	assert.Zero(t, n, "nothing left to take")
	s.close()

	lk, err = discovery.Take(t.Context(), a, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Close() })
	single, err = embednats.Start(t.Context(), lk, embednats.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = single.Close() })
	from := embednats.QueueSource{Dir: filepath.Join(dir, "jetstream"), StoreID: id, Shared: true}
	n, err = single.TakeOver(t.Context(), embednats.TakeOverConfig{StoreID: id, From: from, Limits: queue.Limits{MaxBytes: 1 << 20}})
	require.NoError(t, err)
	assert.Equal(t, 4, n)
	assert.Equal(t, []string{"j1", "j2", "j3", "j4"}, queuedIDs(t, single.Conn(), queue.StreamName(id)))
}

// A store moved (renamed) keeps the jobs queued before under its former
// ID: a daemon of several stores refuses to take those over (only a
// daemon of the store alone drains a former path's queue); a daemon of
// the store alone takes them from a shared folder under that stream name,
// for its writer to drain.
func TestTakeOverMovedStore(t *testing.T) {
	a, b := newStore(t), newStore(t)
	const formerID = "0123456789abcdef"
	lk, err := discovery.Take(t.Context(), a, nil)
	require.NoError(t, err)
	single, err := embednats.Start(t.Context(), lk, embednats.Config{})
	require.NoError(t, err)
	queueJobs(t, single.Conn(), formerID, "old1", "old2")
	require.NoError(t, single.Close())
	require.NoError(t, lk.Close())

	dir := filepath.Join(t.TempDir(), "queue")
	s := startShared(t, dir, a, b)
	own := embednats.QueueSource{Dir: queue.Layout{Root: a}.Queue(), StoreID: queue.StoreID(a)}
	n, err := s.srv.TakeOver(t.Context(), embednats.TakeOverConfig{StoreID: queue.StoreID(a), From: own, Limits: queue.Limits{}})
	require.ErrorIs(t, err, embednats.ErrFormerQueue)
	assert.Zero(t, n)
	assert.Contains(t, err.Error(), "serve the store alone once")
	has, err := own.HasQueue()
	require.NoError(t, err)
	assert.True(t, has, "the jobs stay where they are")

	// Under its former ID in a shared folder, as a daemon of several
	// stores left them: here b's queue, taken over by a daemon of a, as
	// if a were b moved.
	queueJobs(t, s.srv.StoreConn(queue.StoreID(b)), queue.StoreID(b), "b1", "b2")
	s.close()
	lk, err = discovery.Take(t.Context(), a, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Close() })
	single, err = embednats.Start(t.Context(), lk, embednats.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = single.Close() })
	from := embednats.QueueSource{Dir: filepath.Join(dir, "jetstream"), StoreID: queue.StoreID(b), Shared: true}
	n, err = single.TakeOver(t.Context(), embednats.TakeOverConfig{StoreID: queue.StoreID(a), From: from, Limits: queue.Limits{}})
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, []string{"b1", "b2"}, queuedIDs(t, single.Conn(), queue.StreamName(queue.StoreID(b))),
		"under the former ID's stream name, which the writer drains (OwnServer)")
}

// The queues a shared folder keeps for stores the daemon does not serve
// stay, and are listed; empty ones are deleted.
func TestSharedKeepsUnservedQueues(t *testing.T) {
	a, b, c := newStore(t), newStore(t), newStore(t)
	dir := filepath.Join(t.TempDir(), "queue")
	s := startShared(t, dir, a, b, c)
	queueJobs(t, s.srv.StoreConn(queue.StoreID(b)), queue.StoreID(b), "b1", "b2")
	queueJobs(t, s.srv.StoreConn(queue.StoreID(c)), queue.StoreID(c))
	s.close()

	s = startShared(t, dir, a)
	assert.Equal(t, []embednats.Unserved{{StoreID: queue.StoreID(b), Jobs: 2}}, s.srv.Unserved())
	s.close()
	s = startShared(t, dir, a, b)
	assert.Empty(t, s.srv.Unserved())
	assert.Equal(t, []string{"b1", "b2"}, queuedIDs(t, s.srv.StoreConn(queue.StoreID(b)), queue.StreamName(queue.StoreID(b))), "b's jobs waited for it")
	_, err := os.Stat(filepath.Join(dir, "jetstream", "jetstream", embednats.AccountName(queue.StoreID(c)), "streams", queue.StreamName(queue.StoreID(c))))
	assert.ErrorIs(t, err, os.ErrNotExist, "c's empty queue was deleted")
}
