package tests

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gofrs/flock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Clients probe the daemon lock by taking it for an instant. A daemon
// starting during a storm of probes must still start: a probe is not a
// running daemon.
func TestProbesNeverFailAStartingDaemon(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	require.NoError(t, os.Mkdir(filepath.Join(store, ".scribe"), 0o700))
	lockPath := filepath.Join(store, ".scribe", "daemon.lock")
	require.NoError(t, os.WriteFile(lockPath, nil, 0o600))

	var stop atomic.Bool
	var probes atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				fl := flock.New(lockPath, flock.SetFlag(os.O_RDONLY))
				if ok, err := fl.TryLock(); err == nil && ok {
					probes.Add(1)
					_ = fl.Unlock()
				}
			}
		})
	}
	for range 5 {
		d := startDaemon(t, store)
		r := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "append", "f.txt", "x\n")
		assert.Equal(t, 0, r.code, r.stderr)
		d.stop(t)
	}
	stop.Store(true)
	wg.Wait()
	assert.Positive(t, probes.Load(), "the probes took the lock between daemons")
	assert.Equal(t, "x\nx\nx\nx\nx\n", readFile(t, filepath.Join(store, "f.txt")))
}
