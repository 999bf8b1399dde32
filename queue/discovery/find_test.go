package discovery_test

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// Find: a daemon serves the store only while it holds the daemon lock and
// its discovery file names this store.
func TestFind(t *testing.T) {
	cases := []struct {
		name     string
		setup    func(t *testing.T, store string) // store exists, without .scribe
		want     bool                             // a discovery is returned
		starting bool                             // ErrStarting
	}{
		{"no .scribe folder", func(*testing.T, string) {}, false, false},
		{"no lock file", func(t *testing.T, store string) {
			require.NoError(t, os.Mkdir(queue.Layout{Root: store}.Meta(), 0o700))
		}, false, false},
		{"lock free, stale discovery", func(t *testing.T, store string) {
			require.NoError(t, take(t, store).Close())
			writeDiscovery(t, store, newDiscovery(store, 42)) // a killed daemon's
		}, false, false},
		{"held without discovery (starting)", func(t *testing.T, store string) {
			take(t, store)
		}, false, true},
		{"held with discovery", func(t *testing.T, store string) {
			require.NoError(t, take(t, store).Announce(newDiscovery(store, 42)))
		}, true, false},
		{"held, discovery of another store", func(t *testing.T, store string) {
			take(t, store)
			writeDiscovery(t, store, newDiscovery("/elsewhere", 42))
		}, false, true},
		{"held, unreadable discovery", func(t *testing.T, store string) {
			take(t, store)
			writeFile(t, queue.Layout{Root: store}.Discovery(), "{not json", 0o600)
		}, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := newStore(t)
			c.setup(t, store)
			d, err := discovery.Find(store)
			if c.starting {
				assert.ErrorIs(t, err, discovery.ErrStarting)
				assert.Contains(t, err.Error(), queue.Layout{Root: store}.DaemonLock())
			} else {
				assert.NoError(t, err)
			}
			if c.want {
				require.NotNil(t, d)
				assert.Equal(t, 42, d.PID)
				assert.Equal(t, queue.StoreID(store), d.StoreID)
			} else {
				assert.Nil(t, d)
			}
			_, err = os.Stat(queue.Layout{Root: store}.DaemonLock())
			if c.name == "no .scribe folder" || c.name == "no lock file" {
				assert.ErrorIs(t, err, os.ErrNotExist, "Find creates nothing")
			}
		})
	}
}

// A second daemon fails at once, naming the first; once the first lets
// go, it takes the store, and turns the discovery file a killed daemon
// left into the stranded marker.
func TestTakeSecondDaemon(t *testing.T) {
	store := newStore(t)
	first := take(t, store)
	require.NoError(t, first.Announce(newDiscovery(store, 42)))

	_, err := discovery.Take(t.Context(), store, nil)
	require.ErrorIs(t, err, discovery.ErrRunning)
	var re *discovery.RunningError
	require.ErrorAs(t, err, &re)
	require.NotNil(t, re.Other)
	assert.Equal(t, 42, re.Other.PID)
	assert.Contains(t, err.Error(), "pid 42")

	require.NoError(t, first.Close())
	assert.NoFileExists(t, queue.Layout{Root: store}.Discovery(), "Close withdraws the announcement")
	writeDiscovery(t, store, newDiscovery(store, 42)) // as if killed
	second := take(t, store)
	l := queue.Layout{Root: store}
	assert.NoFileExists(t, l.Discovery(), "the stale discovery file is gone")
	s, err := queue.ReadStranded(store)
	require.NoError(t, err)
	require.NotNil(t, s)
	assert.Equal(t, "daemon pid 42 was killed", s.Why)
	assert.WithinDuration(t, time.Now(), s.At, time.Minute)
	require.NoError(t, second.Close())
	require.NoError(t, second.Close(), "a second Close does nothing")
	assert.FileExists(t, l.DaemonLock(), "the lock file is never removed")
}

// A probe (Find, or anyone taking the lock for an instant) never makes a
// starting daemon fail.
func TestTakeOutlastsProbes(t *testing.T) {
	store := newStore(t)
	path := queue.Layout{Root: store}.DaemonLock()
	take(t, store).Close()
	probe := flock.New(path, flock.SetFlag(os.O_RDONLY))
	ok, err := probe.TryLock()
	require.NoError(t, err)
	require.True(t, ok)
	time.AfterFunc(50*time.Millisecond, func() { _ = probe.Unlock() })
	lk, err := discovery.Take(t.Context(), store, nil)
	require.NoError(t, err, "a lock held for 50 ms is a probe, not a daemon")
	require.NoError(t, lk.Close())
}

func take(t testing.TB, store string) *discovery.Lock {
	t.Helper()
	lk, err := discovery.Take(t.Context(), store, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

func newDiscovery(store string, pid int) *queue.Discovery {
	return &queue.Discovery{URL: "tls://127.0.0.1:1", PID: pid, Store: store, StoreID: queue.StoreID(store), Started: time.Now().UTC()}
}

func writeDiscovery(t testing.TB, store string, d *queue.Discovery) {
	t.Helper()
	b, err := json.Marshal(d)
	require.NoError(t, err)
	writeFile(t, queue.Layout{Root: store}.Discovery(), string(b), 0o600)
}

// A daemon whose store was moved away (or removed) while it ran leaves
// alone what its path holds now: another store, served by another daemon,
// whose discovery file it neither withdraws nor overwrites.
func TestLockLeavesTheStoreNowAtItsPath(t *testing.T) {
	store := newStore(t)
	old := take(t, store)
	require.NoError(t, old.Announce(newDiscovery(store, 1)))
	require.NoError(t, os.Rename(store, store+".moved"))
	require.NoError(t, os.Mkdir(store, 0o755))
	now := take(t, store)
	require.NoError(t, now.Announce(newDiscovery(store, 2)))

	err := old.Announce(newDiscovery(store, 1))
	require.ErrorContains(t, err, "no longer the store this daemon locked")
	old.Withdraw()
	require.NoError(t, old.Close())
	d, err := queue.ReadDiscovery(store)
	require.NoError(t, err, "the other daemon's discovery file stays")
	assert.Equal(t, 2, d.PID)

	now.Withdraw()
	assert.NoFileExists(t, queue.Layout{Root: store}.Discovery(), "a daemon withdraws its own")
}
