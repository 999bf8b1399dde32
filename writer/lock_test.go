package writer_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"scribe/queue"
	"scribe/writer"
)

// lockPath returns a lock file path in a fresh folder.
func lockPath(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(tb.TempDir(), "lock")
}

// holdFlock takes the lock on path through a separate descriptor, as
// another process (flock(1), an older tool) would, released at cleanup.
func holdFlock(tb testing.TB, path string) {
	tb.Helper()
	fl := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR))
	ok, err := fl.TryLock()
	require.NoError(tb, err)
	require.True(tb, ok, "lock %s is already held", path)
	tb.Cleanup(func() { _ = fl.Unlock() })
}

// writeIdentity puts a holder identity into a lock file.
func writeIdentity(tb testing.TB, path string, h queue.Holder) {
	tb.Helper()
	b, err := json.Marshal(h)
	require.NoError(tb, err)
	require.NoError(tb, os.WriteFile(path, b, 0o600))
}

func inode(tb testing.TB, path string) uint64 {
	tb.Helper()
	fi, err := os.Stat(path)
	require.NoError(tb, err)
	st, ok := fi.Sys().(*syscall.Stat_t)
	require.True(tb, ok)
	return st.Ino
}

func TestTryLockWritesHolder(t *testing.T) {
	path := lockPath(t)
	h := writer.NewHolder(writer.ModeDaemon, "scribe serve")
	h.Epoch = 7
	l, err := writer.TryLock(path, h)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Unlock() })
	assert.Equal(t, path, l.Path())

	got, err := writer.ReadHolder(path)
	require.NoError(t, err)
	assert.Equal(t, os.Getpid(), got.PID)
	assert.Equal(t, writer.ModeDaemon, got.Mode)
	assert.Equal(t, "scribe serve", got.Command)
	assert.Equal(t, uint64(7), got.Epoch)
	assert.True(t, h.Since.Equal(got.Since))
	host, _ := os.Hostname()
	assert.Equal(t, host, got.Host)

	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	// A shorter identity replaces a longer one entirely.
	require.NoError(t, l.SetHolder(queue.Holder{PID: 1, Mode: writer.ModeDirect}))
	got, err = writer.ReadHolder(path)
	require.NoError(t, err)
	assert.Equal(t, &queue.Holder{PID: 1, Mode: writer.ModeDirect}, got)
}

func TestTryLockBusy(t *testing.T) {
	host, _ := os.Hostname()
	// Beyond any pid_max, so never a live process.
	const deadPID = 1<<22 + 1
	tests := []struct {
		name       string
		hold       func(tb testing.TB, path string)
		wantHolder *queue.Holder // nil: an unknown holder; PID 0 matches ours
		wantEpoch  uint64
	}{
		{
			name: "TryLock",
			hold: func(tb testing.TB, path string) {
				l, err := writer.TryLock(path, writer.NewHolder(writer.ModeDaemon, "daemon"))
				require.NoError(tb, err)
				tb.Cleanup(func() { _ = l.Unlock() })
			},
			wantHolder: &queue.Holder{Mode: writer.ModeDaemon, Command: "daemon"},
		},
		{
			name: "session",
			hold: func(tb testing.TB, path string) {
				openSession(tb, newStore(tb), writer.SessionOptions{LockPath: path, Command: "direct write"})
			},
			wantHolder: &queue.Holder{Mode: writer.ModeDirect, Command: "direct write"},
			wantEpoch:  1,
		},
		{
			name: "identity then flock",
			hold: func(tb testing.TB, path string) {
				writeIdentity(tb, path, queue.Holder{PID: os.Getpid(), Host: host, Mode: writer.ModeDirect, Command: "other fd"})
				holdFlock(tb, path)
			},
			wantHolder: &queue.Holder{Mode: writer.ModeDirect, Command: "other fd"},
		},
		{
			name: "plain flock",
			hold: func(tb testing.TB, path string) { holdFlock(tb, path) },
		},
		{
			name: "flock with garbage",
			hold: func(tb testing.TB, path string) {
				require.NoError(tb, os.WriteFile(path, []byte("12345\n"), 0o600))
				holdFlock(tb, path)
			},
		},
		{
			name: "flock with a dead holder's identity",
			hold: func(tb testing.TB, path string) {
				writeIdentity(tb, path, queue.Holder{PID: deadPID, Host: host, Mode: writer.ModeDaemon})
				holdFlock(tb, path)
			},
		},
		{
			name: "flock with another host's identity",
			hold: func(tb testing.TB, path string) {
				writeIdentity(tb, path, queue.Holder{PID: deadPID, Host: host + "-elsewhere", Mode: writer.ModeDaemon})
				holdFlock(tb, path)
			},
			wantHolder: &queue.Holder{PID: deadPID, Mode: writer.ModeDaemon},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := lockPath(t)
			tt.hold(t, path)
			before, err := os.ReadFile(path)
			require.NoError(t, err)

			l, lockErr := writer.TryLock(path, writer.NewHolder(writer.ModeDirect, "contender"))
			require.Error(t, lockErr)
			assert.Nil(t, l)
			assert.ErrorIs(t, lockErr, writer.ErrLocked)
			var le *writer.LockedError
			require.ErrorAs(t, lockErr, &le)
			assert.Equal(t, path, le.Path)
			assert.Contains(t, lockErr.Error(), path)

			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(before), string(after), "a refused contender leaves the identity alone")

			if tt.wantHolder == nil {
				assert.Nil(t, le.Holder)
				assert.Contains(t, lockErr.Error(), "unknown process")
				return
			}
			require.NotNil(t, le.Holder)
			wantPID := tt.wantHolder.PID
			if wantPID == 0 {
				wantPID = os.Getpid()
			}
			assert.Equal(t, wantPID, le.Holder.PID)
			assert.Equal(t, tt.wantHolder.Mode, le.Holder.Mode)
			assert.Equal(t, tt.wantEpoch, le.Holder.Epoch)
			if tt.wantHolder.Command != "" {
				assert.Equal(t, tt.wantHolder.Command, le.Holder.Command)
				assert.Contains(t, lockErr.Error(), tt.wantHolder.Command)
			}
		})
	}
}

func TestTryLockNotLockFile(t *testing.T) {
	tests := []struct {
		name string
		make func(tb testing.TB, path string)
	}{
		{"folder", func(tb testing.TB, path string) { require.NoError(tb, os.Mkdir(path, 0o700)) }},
		{"FIFO", func(tb testing.TB, path string) { require.NoError(tb, syscall.Mkfifo(path, 0o600)) }},
		{"symlink to a file", func(tb testing.TB, path string) {
			target := filepath.Join(filepath.Dir(path), "target")
			require.NoError(tb, os.WriteFile(target, nil, 0o600))
			require.NoError(tb, os.Symlink(target, path))
		}},
		{"dangling symlink", func(tb testing.TB, path string) {
			require.NoError(tb, os.Symlink(filepath.Join(filepath.Dir(path), "nowhere"), path))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := lockPath(t)
			tt.make(t, path)
			before, err := os.Lstat(path)
			require.NoError(t, err)

			l, err := writer.TryLock(path, writer.NewHolder(writer.ModeDirect, "test"))
			assert.Nil(t, l)
			assert.ErrorIs(t, err, writer.ErrNotLockFile)
			assert.NotErrorIs(t, err, writer.ErrLocked)

			after, err := os.Lstat(path)
			require.NoError(t, err)
			assert.Equal(t, before.Mode(), after.Mode(), "left as it was")
			_, err = os.Lstat(filepath.Join(filepath.Dir(path), "nowhere"))
			assert.ErrorIs(t, err, os.ErrNotExist, "a dangling link's target is not created")

			// OpenSession refuses it the same way.
			_, err = writer.OpenSession(newStore(t), writer.SessionOptions{LockPath: path})
			assert.ErrorIs(t, err, writer.ErrNotLockFile)
		})
	}
}

func TestLockFileIsKept(t *testing.T) {
	tests := []struct {
		name   string
		cycle  func(tb testing.TB, store, path string)
		remake bool // the lock file exists before the first cycle
	}{
		{"TryLock", func(tb testing.TB, store, path string) {
			l, err := writer.TryLock(path, writer.NewHolder(writer.ModeDirect, "test"))
			require.NoError(tb, err)
			require.NoError(tb, l.Unlock())
		}, false},
		{"session", func(tb testing.TB, store, path string) {
			s, err := writer.OpenSession(store, writer.SessionOptions{LockPath: path})
			require.NoError(tb, err)
			require.NoError(tb, s.Close())
		}, false},
		{"existing lock file of another tool", func(tb testing.TB, store, path string) {
			l, err := writer.TryLock(path, writer.NewHolder(writer.ModeDirect, "test"))
			require.NoError(tb, err)
			require.NoError(tb, l.Unlock())
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			path := filepath.Join(t.TempDir(), "tool.lock")
			if tt.remake {
				require.NoError(t, os.WriteFile(path, nil, 0o644))
			}
			tt.cycle(t, store, path)
			ino := inode(t, path)
			for range 3 {
				tt.cycle(t, store, path)
				assert.Equal(t, ino, inode(t, path), "the lock file is never replaced")
				fi, err := os.Stat(path)
				require.NoError(t, err)
				assert.Zero(t, fi.Size(), "released: the identity is cleared")
				_, err = writer.ReadHolder(path)
				assert.Error(t, err)
			}
			// Released for real: another descriptor can take it.
			fl := flock.New(path)
			ok, err := fl.TryLock()
			require.NoError(t, err)
			assert.True(t, ok)
			require.NoError(t, fl.Unlock())
		})
	}
}

func TestDefaultLockPath(t *testing.T) {
	store := newStore(t)
	s := openSession(t, store, writer.SessionOptions{})
	want := filepath.Join(store, ".scribe", "lock")
	assert.Equal(t, want, writer.DefaultLockPath(store))
	h, err := writer.ReadHolder(want)
	require.NoError(t, err)
	assert.Equal(t, os.Getpid(), h.PID)
	assert.Equal(t, s.Epoch(), h.Epoch)
	fi, err := os.Stat(filepath.Join(store, ".scribe"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())

	_, err = writer.OpenSession(store, writer.SessionOptions{})
	assert.ErrorIs(t, err, writer.ErrLocked)
}

func TestOpenSessionWait(t *testing.T) {
	store := newStore(t)
	holder, err := writer.OpenSession(store, writer.SessionOptions{Mode: writer.ModeDaemon})
	require.NoError(t, err)
	released := make(chan struct{})
	const holdFor = 100 * time.Millisecond
	time.AfterFunc(holdFor, func() {
		defer close(released)
		assert.NoError(t, holder.Close())
	})
	t.Cleanup(func() { <-released })

	start := time.Now()
	s, err := writer.OpenSessionWait(context.Background(), store, 10*time.Second, writer.SessionOptions{})
	require.NoError(t, err, "acquired once the holder let go")
	t.Cleanup(func() { _ = s.Close() })
	assert.GreaterOrEqual(t, time.Since(start), holdFor)
	assert.Equal(t, uint64(2), s.Epoch())
}

func TestOpenSessionWaitGivesUp(t *testing.T) {
	tests := []struct {
		name    string
		wait    time.Duration
		timeout time.Duration // of the context; 0 for none
		atLeast time.Duration
	}{
		{"no wait", 0, 0, 0},
		{"wait runs out", 150 * time.Millisecond, 0, 150 * time.Millisecond},
		{"context ends first", time.Minute, 100 * time.Millisecond, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			openSession(t, store, writer.SessionOptions{Mode: writer.ModeDaemon, Command: "busy"})
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				t.Cleanup(cancel)
			}
			start := time.Now()
			s, err := writer.OpenSessionWait(ctx, store, tt.wait, writer.SessionOptions{})
			elapsed := time.Since(start)
			assert.Nil(t, s)
			assert.ErrorIs(t, err, writer.ErrLocked)
			var le *writer.LockedError
			require.ErrorAs(t, err, &le)
			require.NotNil(t, le.Holder)
			assert.Equal(t, writer.ModeDaemon, le.Holder.Mode)
			assert.GreaterOrEqual(t, elapsed, tt.atLeast)
			assert.Less(t, elapsed, tt.atLeast+5*time.Second)
		})
	}
}
