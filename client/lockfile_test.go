package client_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/tests/testkit"
)

// announce makes this process look like the store's daemon to clients
// on the direct route: the daemon lock held, a discovery file naming
// lockFile. No server runs; the direct route never dials.
func announce(t *testing.T, store, lockFile string) {
	t.Helper()
	real, err := queue.ResolveStore(store)
	require.NoError(t, err)
	lk, err := discovery.Take(t.Context(), real, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Close() })
	require.NoError(t, lk.Announce(&queue.Discovery{
		URL: "tls://127.0.0.1:1", PID: os.Getpid(), Store: real, StoreID: queue.StoreID(real),
		Started: time.Now().UTC(), LockFile: lockFile,
	}))
}

// A direct write takes the lock file the store's daemon names, when it
// was given none, and refuses one that is not the daemon's: either way it
// never writes while the daemon holds its lock.
func TestDirectWriteTakesTheDaemonsLockFile(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	shared := filepath.Join(t.TempDir(), "index.lock")
	sharedReal, err := discovery.ResolveLockFile(store, shared)
	require.NoError(t, err)
	announce(t, store, sharedReal)
	testkit.HoldFlock(t, shared) // the daemon's hold, as far as the lock goes
	job := func() *queue.Job {
		return &queue.Job{Ops: []queue.Op{{Kind: queue.OpAppend, Path: "f.txt", Data: []byte("x\n")}}}
	}

	for _, tc := range []struct {
		name     string
		lockFile string
		want     error
	}{
		{"none given", "", client.ErrBusy},
		{"the daemon's", shared, client.ErrBusy},
		{"another", filepath.Join(t.TempDir(), "other.lock"), client.ErrOtherLockFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.Open(ctx, store, client.WithRoute(client.RouteDirect), client.WithLockFile(tc.lockFile))
			if err == nil {
				defer c.Close()
				_, err = c.Apply(ctx, job())
			}
			require.ErrorIs(t, err, tc.want)
			noCLIWords(t, err)
			if tc.want == client.ErrBusy {
				var busy *client.BusyError
				if assert.ErrorAs(t, err, &busy) {
					assert.Equal(t, sharedReal, busy.Lock)
				}
			} else {
				assert.Contains(t, err.Error(), sharedReal)
			}
			assert.NoFileExists(t, filepath.Join(store, "f.txt"))
		})
	}
}

// "./f.txt" is "f.txt": the client trims a leading "./" before the job
// is checked and sent; any other "." segment is still refused.
func TestLeadingDotSlash(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	c, err := client.Open(ctx, store, client.WithRoute(client.RouteDirect))
	require.NoError(t, err)
	defer c.Close()
	out, err := c.Apply(ctx, &queue.Job{Ops: []queue.Op{{Kind: queue.OpPut, Path: "./f.txt", Data: []byte("x")}}})
	require.NoError(t, err)
	require.True(t, out.Applied(), "%+v", out)
	b, err := os.ReadFile(filepath.Join(store, "f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "x", string(b))

	_, err = c.Apply(ctx, &queue.Job{Ops: []queue.Op{{Kind: queue.OpPut, Path: "a/./f.txt", Data: []byte("x")}}})
	require.ErrorIs(t, err, client.ErrRejected)
	assert.Contains(t, err.Error(), "use a path relative to the store")
}
