package discovery_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// A shared queue folder has one user at a time: a second daemon is told
// which daemon holds it; once released, it is free again, and its list
// of stores survives.
func TestTakeQueueDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "scribe", "queue")
	first, err := discovery.TakeQueueDir(t.Context(), dir, []string{"/a", "/b"}, nil)
	require.NoError(t, err)
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "created owner-only")
	assert.Equal(t, dir, first.Dir())
	assert.Equal(t, filepath.Join(dir, "jetstream"), first.JetStream())
	require.NoError(t, first.Remember("id-a", "/a"))
	require.NoError(t, first.Remember("id-b", "/b"))
	require.NoError(t, first.Remember("id-b", ""))

	_, err = discovery.TakeQueueDir(t.Context(), dir, []string{"/c"}, nil)
	require.ErrorIs(t, err, discovery.ErrQueueDirBusy)
	var be *discovery.QueueDirBusyError
	require.ErrorAs(t, err, &be)
	require.NotNil(t, be.Holder)
	assert.Equal(t, os.Getpid(), be.Holder.PID)
	assert.Equal(t, []string{"/a", "/b"}, be.Holder.Stores)
	assert.Contains(t, err.Error(), dir)
	assert.Contains(t, err.Error(), "serving 2 stores")

	require.NoError(t, first.Close())
	require.NoError(t, first.Close(), "a second Close does nothing")
	second, err := discovery.TakeQueueDir(t.Context(), dir, nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = second.Close() })
	assert.Equal(t, map[string]string{"id-a": "/a"}, second.Stores())
}

// The folder holds every queued job of the stores: it must be the
// daemon user's alone, as a store's .scribe.
func TestTakeQueueDirRefusesInsecure(t *testing.T) {
	for name, setup := range map[string]func(t *testing.T, dir string){
		"world-writable folder": func(t *testing.T, dir string) { chmod(t, dir, 0o777) },
		"group-writable list":   func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "stores.json"), "{}", 0o620) },
		"symlinked data folder": func(t *testing.T, dir string) {
			require.NoError(t, os.Symlink(t.TempDir(), filepath.Join(dir, "jetstream")))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "queue")
			require.NoError(t, os.Mkdir(dir, 0o700))
			setup(t, dir)
			q, err := discovery.TakeQueueDir(t.Context(), dir, nil, nil)
			if q != nil {
				_ = q.Close()
			}
			require.ErrorIs(t, err, discovery.ErrInsecure)
		})
	}
	t.Run("readable folder is tightened", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "queue")
		require.NoError(t, os.Mkdir(dir, 0o700))
		chmod(t, dir, 0o755)
		q, err := discovery.TakeQueueDir(t.Context(), dir, nil, nil)
		require.NoError(t, err)
		require.NoError(t, q.Close())
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	})
}

// The queue-home note: absent means the store's own folder; a daemon
// writes it under its lock, and a damaged one is an error, never taken
// for "no jobs elsewhere".
func TestQueueHome(t *testing.T) {
	store := newStore(t)
	lk := take(t, store)
	h, err := discovery.ReadQueueHome(store)
	require.NoError(t, err)
	assert.Nil(t, h)

	require.NoError(t, lk.SetQueueHome("/var/q"))
	h, err = discovery.ReadQueueHome(store)
	require.NoError(t, err)
	require.NotNil(t, h)
	assert.Equal(t, "/var/q", h.Dir)
	assert.Equal(t, "/var/q/jetstream", h.JetStream())
	assert.Equal(t, queue.StoreID(store), h.StoreID)
	assert.Equal(t, os.Getpid(), h.PID)
	path := filepath.Join(store, ".scribe", "queue-home.json")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	require.NoError(t, lk.ClearQueueHome())
	require.NoError(t, lk.ClearQueueHome(), "clearing twice is fine")
	h, err = discovery.ReadQueueHome(store)
	require.NoError(t, err)
	assert.Nil(t, h)

	writeFile(t, path, `{"dir":"relative"}`, 0o600)
	_, err = discovery.ReadQueueHome(store)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)

	require.NoError(t, lk.Close())
	assert.Error(t, lk.SetQueueHome("/var/q"), "only under the daemon lock")
}

// Take checks the note as it checks the discovery file: the daemon takes
// jobs from where it says.
func TestTakeRefusesInsecureQueueHome(t *testing.T) {
	store := newStore(t)
	meta := filepath.Join(store, ".scribe")
	require.NoError(t, os.Mkdir(meta, 0o700))
	writeFile(t, filepath.Join(meta, "queue-home.json"), `{"dir":"/tmp/evil"}`, 0o666)
	_, err := discovery.Take(t.Context(), store, nil)
	require.ErrorIs(t, err, discovery.ErrInsecure)
	assert.Contains(t, err.Error(), "queue-home.json")
}

func TestDefaultQueueDir(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/xdg/state")
	d, err := discovery.DefaultQueueDir()
	require.NoError(t, err)
	assert.Equal(t, "/xdg/state/scribe/queue", d)
	t.Setenv("XDG_STATE_HOME", "relative") // ignored, as the XDG spec says
	t.Setenv("HOME", "/home/me")
	d, err = discovery.DefaultQueueDir()
	require.NoError(t, err)
	assert.Contains(t, []string{"/home/me/.local/state/scribe/queue", "/home/me/Library/Application Support/scribe/queue"}, d)
}
