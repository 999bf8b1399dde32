package embednats_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/embednats"
	"github.com/scribehq/scribe/queue"
)

// RefuseSubmitters cuts off every submitter connected with the store's
// credentials and refuses them from then on; the daemon's own connection
// stays, JetStream keeps working for it, and a submitter with the new
// credentials (what the discovery says now) queues jobs as before. On a
// server of one store, and of several, each store in an account of its
// own, whose JetStream a reload must not turn off.
func TestRefuseSubmitters(t *testing.T) {
	one := func(t *testing.T) (*embednats.Server, []string) {
		store := newStore(t)
		return start(t, store, embednats.Config{}), []string{store}
	}
	several := func(t *testing.T) (*embednats.Server, []string) {
		a, b := newStore(t), newStore(t)
		return startShared(t, filepath.Join(t.TempDir(), "queue"), a, b).srv, []string{a, b}
	}
	for name, serve := range map[string]func(*testing.T) (*embednats.Server, []string){"one store": one, "several stores": several} {
		t.Run(name, func(t *testing.T) {
			srv, stores := serve(t)
			type sub struct {
				d      queue.Discovery
				nc     *nats.Conn
				closed chan struct{}
			}
			var subs []sub
			for _, store := range stores {
				id := queue.StoreID(store)
				queueJobs(t, srv.StoreConn(id), id, "before")
				d, ok := srv.StoreDiscovery(id)
				require.True(t, ok)
				closed := make(chan struct{})
				nc, err := connect(t, d, nats.UserInfo(d.User, d.Password), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
				require.NoError(t, err)
				t.Cleanup(nc.Close)
				subs = append(subs, sub{d, nc, closed})
			}

			require.NoError(t, srv.RefuseSubmitters())
			for i, s := range subs {
				id := s.d.StoreID
				select {
				case <-s.closed:
				case <-time.After(10 * time.Second):
					t.Fatalf("store %d: the connected submitter was not cut off", i)
				}
				_, err := connect(t, s.d, nats.UserInfo(s.d.User, s.d.Password))
				assert.ErrorIs(t, err, nats.ErrAuthorization, "store %d: the old credentials are refused", i)

				now, ok := srv.StoreDiscovery(id)
				require.True(t, ok)
				assert.Equal(t, s.d.User, now.User)
				assert.NotEqual(t, s.d.Password, now.Password, "new credentials to announce")
				nc, err := connect(t, now, nats.UserInfo(now.User, now.Password))
				require.NoError(t, err, "store %d: the new credentials are taken", i)
				t.Cleanup(nc.Close)
				js, err := jetstream.New(nc)
				require.NoError(t, err)
				_, err = queue.Publish(t.Context(), js, id, queue.JobsSubject(id), "after", []byte("job after"))
				require.NoError(t, err, "store %d: a job is queued with the new credentials", i)

				assert.True(t, srv.StoreConn(id).IsConnected(), "store %d: the daemon's own connection stays", i)
				assert.Equal(t, []string{"before", "after"}, queuedIDs(t, srv.StoreConn(id), queue.StreamName(id)),
					"store %d: the queue, through the daemon's connection", i)
			}
			// Twice: the second reload starts from the first one's options.
			require.NoError(t, srv.RefuseSubmitters())
			for _, s := range subs {
				d, _ := srv.StoreDiscovery(s.d.StoreID)
				nc, err := connect(t, d, nats.UserInfo(d.User, d.Password))
				require.NoError(t, err)
				nc.Close()
			}
		})
	}
}
