package writer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/lock"
)

// lockPath returns a lock file path in a fresh folder.
func lockPath(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(tb.TempDir(), "lock")
}

// holdFlock takes the lock on path through a separate open file
// description, as another process (flock(1), an older tool) would; the
// hold registry does not know it. It is released at cleanup.
func holdFlock(tb testing.TB, path string) {
	tb.Helper()
	fl := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR))
	ok, err := fl.TryLock()
	require.NoError(tb, err)
	require.True(tb, ok, "lock %s is already held", path)
	tb.Cleanup(func() { _ = fl.Unlock() })
}

// lockFree reports whether a separate open file description can take the
// flock on path right now (it lets go at once).
func lockFree(tb testing.TB, path string) bool {
	tb.Helper()
	fl := flock.New(path, flock.SetFlag(os.O_RDWR))
	ok, err := fl.TryLock()
	require.NoError(tb, err)
	if ok {
		require.NoError(tb, fl.Unlock())
	}
	return ok
}

// tryLock takes the store lock in this process, released at cleanup.
func tryLock(tb testing.TB, store string, o lock.Options) *lock.Hold {
	tb.Helper()
	h, err := lock.Acquire(context.Background(), store, o)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = h.Unlock() })
	return h
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

// assertReleased checks that a lock file holds no identity and that
// another open file description can lock it.
func assertReleased(tb testing.TB, path string) {
	tb.Helper()
	fi, err := os.Stat(path)
	require.NoError(tb, err)
	assert.Zero(tb, fi.Size(), "released: the identity is cleared")
	_, err = lock.ReadHolder(path)
	assert.Error(tb, err)
	assert.True(tb, lockFree(tb, path), "released: another descriptor can lock it")
}

func TestTryLockWritesHolder(t *testing.T) {
	tests := []struct {
		name     string
		existing string // the lock file's content before; "" for no file
		o        lock.Options
		wantMode queue.Mode
		wantPerm os.FileMode
	}{
		{"new lock file", "", lock.Options{Mode: queue.ModeDaemon, Command: "scribe serve"}, queue.ModeDaemon, 0o600},
		{"default mode", "", lock.Options{Command: "scribe lock"}, queue.ModeDirect, 0o600},
		// Another tool's lock file with a longer leftover: the identity
		// replaces all of it and the file's mode is left alone.
		{"another tool's file", strings.Repeat("leftover ", 500), lock.Options{Command: "x"}, queue.ModeDirect, 0o644},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			path := lockPath(t)
			if tt.existing != "" {
				require.NoError(t, os.WriteFile(path, []byte(tt.existing), 0o644))
			}
			tt.o.LockPath = path
			before := time.Now()
			l := tryLock(t, store, tt.o)
			assert.Equal(t, path, l.Path())

			got, err := lock.ReadHolder(path)
			require.NoError(t, err)
			host, _ := os.Hostname()
			assert.Equal(t, os.Getpid(), got.PID)
			assert.Equal(t, host, got.Host)
			assert.Equal(t, tt.wantMode, got.Mode)
			assert.Equal(t, tt.o.Command, got.Command)
			assert.Zero(t, got.Epoch, "no session, no epoch")
			assert.Len(t, got.Token, 26, "a random token names the hold")
			if runtime.GOOS == "linux" {
				assert.NotZero(t, got.Start, "the holder's start time, against pid reuse")
			}
			assert.WithinRange(t, got.Since, before.Add(-time.Second), time.Now().Add(time.Second))

			fi, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, tt.wantPerm, fi.Mode().Perm())
			assert.False(t, lockFree(t, path), "held")
		})
	}
}

func TestTryLockStorePath(t *testing.T) {
	store := newStore(t)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(store, link))
	tests := []struct {
		name  string
		store string
	}{
		{"real path", store},
		{"symlink", link},
		{"trailing slash", store + "/"},
		{"dot-dot", store + "/sub/.."},
	}
	require.NoError(t, os.Mkdir(filepath.Join(store, "sub"), 0o755))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := lock.Acquire(context.Background(), tt.store, lock.Options{})
			require.NoError(t, err)
			assert.Equal(t, lock.DefaultPath(store), l.Path())
			assert.NotNil(t, assertChildLocked(t, store, lock.Options{}), "the same lock as the real path's")
			require.NoError(t, l.Unlock())
		})
	}
	fi, err := os.Stat(filepath.Join(store, queue.MetaDir))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
}

func TestTryLockMissingStore(t *testing.T) {
	store := filepath.Join(t.TempDir(), "nope")
	l, err := lock.Acquire(context.Background(), store, lock.Options{})
	assert.Nil(t, l)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.NoDirExists(t, store, "a missing store is not created")
}

func TestTryLockBusy(t *testing.T) {
	host, _ := os.Hostname()
	// Beyond any pid_max, so never a live process.
	const deadPID = 1<<22 + 1
	tests := []struct {
		name string
		// hold has someone else hold path, the lock file of store, and
		// returns the holder a contender must be told of (nil: unknown).
		hold func(tb testing.TB, store, path string) *queue.Holder
	}{
		{
			name: "TryLock in another process",
			hold: func(tb testing.TB, store, path string) *queue.Holder {
				c := holdInChild(tb, store, lock.Options{LockPath: path, Mode: queue.ModeDaemon, Command: "daemon"})
				return &queue.Holder{PID: c.Report.PID, Host: host, Mode: queue.ModeDaemon, Command: "daemon"}
			},
		},
		{
			name: "session in another process",
			hold: func(tb testing.TB, store, path string) *queue.Holder {
				c := holdInChild(tb, store, lock.Options{LockPath: path, Command: "direct write"}, withSession())
				return &queue.Holder{PID: c.Report.PID, Host: host, Mode: queue.ModeDirect, Command: "direct write", Epoch: 1}
			},
		},
		{
			name: "identity then flock",
			hold: func(tb testing.TB, _, path string) *queue.Holder {
				h := queue.Holder{PID: os.Getpid(), Host: host, Mode: queue.ModeDirect, Command: "other fd"}
				writeIdentity(tb, path, h)
				holdFlock(tb, path)
				return &h
			},
		},
		{
			name: "plain flock",
			hold: func(tb testing.TB, _, path string) *queue.Holder {
				holdFlock(tb, path)
				return nil
			},
		},
		{
			name: "flock with garbage",
			hold: func(tb testing.TB, _, path string) *queue.Holder {
				require.NoError(tb, os.WriteFile(path, []byte("12345\n"), 0o600))
				holdFlock(tb, path)
				return nil
			},
		},
		{
			name: "flock with a dead holder's identity",
			hold: func(tb testing.TB, _, path string) *queue.Holder {
				writeIdentity(tb, path, queue.Holder{PID: deadPID, Host: host, Mode: queue.ModeDaemon})
				holdFlock(tb, path)
				return nil
			},
		},
		{
			name: "flock with another host's identity",
			hold: func(tb testing.TB, _, path string) *queue.Holder {
				h := queue.Holder{PID: deadPID, Host: host + "-elsewhere", Mode: queue.ModeDaemon}
				writeIdentity(tb, path, h)
				holdFlock(tb, path)
				return &h
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			path := lockPath(t)
			want := tt.hold(t, store, path)
			before, err := os.ReadFile(path)
			require.NoError(t, err)

			l, lockErr := lock.Acquire(context.Background(), store, lock.Options{LockPath: path, Command: "contender"})
			require.Error(t, lockErr)
			assert.Nil(t, l)
			assert.ErrorIs(t, lockErr, lock.ErrLocked)
			var le *lock.LockedError
			require.ErrorAs(t, lockErr, &le)
			assert.Equal(t, path, le.Path)
			assert.Contains(t, lockErr.Error(), path)

			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(before), string(after), "a refused contender leaves the identity alone")

			if want == nil {
				assert.Nil(t, le.Holder)
				assert.Contains(t, lockErr.Error(), "unknown process")
				return
			}
			require.NotNil(t, le.Holder)
			got := *le.Holder
			got.Since, got.Token, got.Start = time.Time{}, "", 0 // this hold's own
			assert.Equal(t, *want, got)
			assert.Contains(t, lockErr.Error(), "pid "+strconv.Itoa(want.PID))
			if want.Command != "" {
				assert.Contains(t, lockErr.Error(), want.Command)
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
			store := newStore(t)
			path := lockPath(t)
			tt.make(t, path)
			before, err := os.Lstat(path)
			require.NoError(t, err)

			l, err := lock.Acquire(context.Background(), store, lock.Options{LockPath: path})
			assert.Nil(t, l)
			assert.ErrorIs(t, err, lock.ErrNotLockFile)
			assert.NotErrorIs(t, err, lock.ErrLocked)

			after, err := os.Lstat(path)
			require.NoError(t, err)
			assert.Equal(t, before.Mode(), after.Mode(), "left as it was")
			_, err = os.Lstat(filepath.Join(filepath.Dir(path), "nowhere"))
			assert.ErrorIs(t, err, os.ErrNotExist, "a dangling link's target is not created")

			// Open refuses it the same way.
			_, err = writer.Open(context.Background(), store, writer.Options{LockPath: path})
			assert.ErrorIs(t, err, lock.ErrNotLockFile)
		})
	}
}

// A file scribe keeps in .scribe, other than the store lock, is no lock
// file: holding it would write an identity over the journal (every
// recorded outcome lost) or take the daemon's own lock. Refused by any
// spelling of its folder, and nothing is changed; a file of its own in
// .scribe is a lock file like any other.
func TestTryLockRefusesScribesOwnFiles(t *testing.T) {
	store := newStore(t)
	s, err := writer.Open(context.Background(), store, writer.Options{})
	require.NoError(t, err)
	epoch := s.Epoch()
	require.NoError(t, s.Close())
	real, err := queue.ResolveStore(store)
	require.NoError(t, err)
	meta := queue.Layout{Root: real}.Meta()
	require.NoError(t, os.MkdirAll(filepath.Join(meta, "jetstream", "s"), 0o700))
	link := filepath.Join(t.TempDir(), "meta")
	require.NoError(t, os.Symlink(meta, link))
	// The journal under other names: a hard link beside the store, one in
	// it, as a tool's lock file would be named.
	hardLinks := []string{filepath.Join(t.TempDir(), "tool.lock"), filepath.Join(store, "tool.lock")}
	for _, h := range hardLinks {
		require.NoError(t, os.Link(filepath.Join(meta, "journal.db"), h))
	}
	before := treeOf(t, meta)

	for _, path := range []string{
		filepath.Join(meta, "journal.db"),
		filepath.Join(link, "journal.db"),
		hardLinks[0], hardLinks[1],
		filepath.Join(meta, "daemon.lock"),
		filepath.Join(meta, "settled"),
		filepath.Join(meta, "config.toml"),
		filepath.Join(meta, "attempt"),
		filepath.Join(meta, "jetstream", "s", "1.blk"),
	} {
		l, err := lock.Acquire(context.Background(), store, lock.Options{LockPath: path})
		assert.Nil(t, l, path)
		assert.ErrorIs(t, err, lock.ErrNotLockFile, path)
		assert.ErrorContains(t, err, "scribe's ", path)
		_, err = writer.Open(context.Background(), store, writer.Options{LockPath: path})
		assert.ErrorIs(t, err, lock.ErrNotLockFile, path)
	}
	assert.Equal(t, before, treeOf(t, meta), "nothing in .scribe changed")

	for _, path := range []string{filepath.Join(meta, "lock"), filepath.Join(meta, "tool.lock")} {
		l, err := lock.Acquire(context.Background(), store, lock.Options{LockPath: path})
		require.NoError(t, err, path)
		require.NoError(t, l.Unlock())
	}
	s, err = writer.Open(context.Background(), store, writer.Options{})
	require.NoError(t, err)
	assert.Greater(t, s.Epoch(), epoch, "the journal's epoch goes on")
	require.NoError(t, s.Close())
}

func TestLockFileIsKept(t *testing.T) {
	tests := []struct {
		name   string
		cycle  func(tb testing.TB, store, path string)
		remake bool // the lock file exists before the first cycle
	}{
		{"TryLock", func(tb testing.TB, store, path string) {
			l, err := lock.Acquire(context.Background(), store, lock.Options{LockPath: path})
			require.NoError(tb, err)
			require.NoError(tb, l.Unlock())
		}, false},
		{"session", func(tb testing.TB, store, path string) {
			s, err := writer.Open(context.Background(), store, writer.Options{LockPath: path})
			require.NoError(tb, err)
			require.NoError(tb, s.Close())
		}, false},
		{"existing lock file of another tool", func(tb testing.TB, store, path string) {
			l, err := lock.Acquire(context.Background(), store, lock.Options{LockPath: path})
			require.NoError(tb, err)
			require.NoError(tb, l.Unlock())
		}, true},
		{"nested", func(tb testing.TB, store, path string) {
			a, err := lock.Acquire(context.Background(), store, lock.Options{LockPath: path, Command: "outer"})
			require.NoError(tb, err)
			s, err := writer.Open(context.Background(), store, writer.Options{LockPath: path})
			require.NoError(tb, err)
			b, err := lock.Acquire(context.Background(), store, lock.Options{LockPath: path})
			require.NoError(tb, err)
			// Released outermost first: the identity stays to the last.
			for _, release := range []func() error{a.Unlock, s.Close} {
				require.NoError(tb, release())
				h, err := lock.ReadHolder(path)
				require.NoError(tb, err, "a nested hold remains: the identity stays")
				assert.Equal(tb, os.Getpid(), h.PID)
				assert.Equal(tb, "outer", h.Command)
				assert.False(tb, lockFree(tb, path))
			}
			require.NoError(tb, b.Unlock())
		}, false},
		{"inherited by a child", func(tb testing.TB, store, path string) {
			a, err := lock.Acquire(context.Background(), store, lock.Options{LockPath: path})
			require.NoError(tb, err)
			identity, err := os.ReadFile(path)
			require.NoError(tb, err)
			// Epoch 0: the parent had no session, so the child's raises one.
			r := tryInChild(tb, store, lock.Options{LockPath: path},
				withFiles(a.File()), withEnv(a.ChildEnv(3)...), withSession(), withEnv(envCycles+"=1"))
			assert.True(tb, r.OK, r.Err)
			assert.Equal(tb, uintptr(3), r.FD, "adopted")
			after, err := os.ReadFile(path)
			require.NoError(tb, err)
			assert.Equal(tb, string(identity), string(after), "the child never writes the parent's identity")
			require.NoError(tb, a.Unlock())
		}, false},
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
				assertReleased(t, path)
			}
		})
	}
}

func TestDefaultLockPath(t *testing.T) {
	store := newStore(t)
	s := openSession(t, store, writer.Options{})
	want := filepath.Join(store, ".scribe", "lock")
	assert.Equal(t, want, lock.DefaultPath(store))
	h, err := lock.ReadHolder(want)
	require.NoError(t, err)
	assert.Equal(t, os.Getpid(), h.PID)
	assert.Equal(t, s.Epoch(), h.Epoch)
	fi, err := os.Stat(filepath.Join(store, ".scribe"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())

	other := assertChildLocked(t, store, lock.Options{})
	require.NotNil(t, other)
	assert.Equal(t, os.Getpid(), other.PID)
	assert.Equal(t, s.Epoch(), other.Epoch)
}

// lockResult is what a lock.Acquire or Open with a wait running in a goroutine got.
type lockResult[T any] struct {
	v   T
	err error
}

// await returns the result on ch, failing the test if none comes in time.
func await[T any](tb testing.TB, ch <-chan T) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(helperTimeout):
		require.FailNow(tb, "no result in time")
		panic("unreachable")
	}
}

// assertWaiting checks that nothing has arrived on ch yet.
func assertWaiting[T any](tb testing.TB, ch <-chan T) {
	tb.Helper()
	select {
	case <-ch:
		assert.Fail(tb, "returned while the store was held")
	default:
	}
}

func TestLockWaits(t *testing.T) {
	tests := []struct {
		name     string
		lockPath func(tb testing.TB, store string) string // "" for the default
	}{
		{"default lock file", func(testing.TB, string) string { return "" }},
		{"another tool's lock file", func(tb testing.TB, _ string) string { return lockPath(tb) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			lp := tt.lockPath(t, store)
			holder := holdInChild(t, store, lock.Options{LockPath: lp, Mode: queue.ModeDaemon, Command: "busy"})
			assert.False(t, lock.Demanded(store), "nobody waits yet")

			got := make(chan lockResult[*lock.Hold], 1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			t.Cleanup(cancel)
			go func() {
				h, err := lock.Acquire(ctx, store, lock.Options{LockPath: lp, Command: "waiter", Wait: time.Hour})
				got <- lockResult[*lock.Hold]{h, err}
			}()
			require.Eventually(t, func() bool { return lock.Demanded(store) }, helperTimeout, time.Millisecond,
				"a waiter leaves a demand mark")
			assertWaiting(t, got)

			holder.Stop(t)
			r := await(t, got)
			require.NoError(t, r.err, "acquired once the holder let go")
			t.Cleanup(func() { _ = r.v.Unlock() })
			assert.False(t, lock.Demanded(store), "the mark goes with the wait")
			other := assertChildLocked(t, store, lock.Options{LockPath: lp})
			require.NotNil(t, other)
			assert.Equal(t, os.Getpid(), other.PID)
			assert.Equal(t, "waiter", other.Command)
		})
	}
}

func TestLockGivesUp(t *testing.T) {
	tests := []struct {
		name    string
		ctx     func(tb testing.TB) context.Context
		atLeast time.Duration
	}{
		{"context ends", func(tb testing.TB) context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			tb.Cleanup(cancel)
			return ctx
		}, 150 * time.Millisecond},
		{"context already ended", func(testing.TB) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			holder := holdInChild(t, store, lock.Options{Mode: queue.ModeDaemon, Command: "busy"})
			ctx := tt.ctx(t)
			start := time.Now()
			l, err := lock.Acquire(ctx, store, lock.Options{Wait: time.Hour})
			elapsed := time.Since(start)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, lock.ErrLocked)
			var le *lock.LockedError
			require.ErrorAs(t, err, &le)
			require.NotNil(t, le.Holder)
			assert.Equal(t, holder.Report.PID, le.Holder.PID)
			assert.Equal(t, "busy", le.Holder.Command)
			assert.GreaterOrEqual(t, elapsed, tt.atLeast, "it waits until the context ends")
			assert.False(t, lock.Demanded(store), "no mark is left behind")
			h, err := lock.ReadHolder(lock.DefaultPath(store))
			require.NoError(t, err)
			assert.Equal(t, holder.Report.PID, h.PID, "the holder's identity is untouched")
		})
	}
}

func TestDemandedWithoutWaiter(t *testing.T) {
	store := newStore(t)
	assert.False(t, lock.Demanded(store), "no .scribe folder")
	tryLock(t, store, lock.Options{})
	assert.False(t, lock.Demanded(store), "held, but nobody waits")
}

func TestOpenWaits(t *testing.T) {
	store := newStore(t)
	holder := holdInChild(t, store, lock.Options{Mode: queue.ModeDaemon}, withSession())
	require.Equal(t, uint64(1), holder.Report.Epoch)

	got := make(chan lockResult[*writer.Session], 1)
	go func() {
		s, err := writer.Open(context.Background(), store, writer.Options{Wait: time.Minute})
		got <- lockResult[*writer.Session]{s, err}
	}()
	require.Eventually(t, func() bool { return lock.Demanded(store) }, helperTimeout, time.Millisecond,
		"a waiter leaves a demand mark")
	assertWaiting(t, got)

	holder.Stop(t)
	r := await(t, got)
	require.NoError(t, r.err, "acquired once the holder let go")
	t.Cleanup(func() { _ = r.v.Close() })
	assert.Equal(t, uint64(2), r.v.Epoch())
	assert.False(t, lock.Demanded(store))
	h, err := lock.ReadHolder(lock.DefaultPath(store))
	require.NoError(t, err)
	assert.Equal(t, os.Getpid(), h.PID)
	assert.Equal(t, uint64(2), h.Epoch)
}

func TestOpenWaitGivesUp(t *testing.T) {
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
			holder := holdInChild(t, store, lock.Options{Mode: queue.ModeDaemon, Command: "busy"}, withSession())
			// The clock starts before the context's: its deadline counts
			// from its creation, and elapsed must not miss that instant.
			start := time.Now()
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				t.Cleanup(cancel)
			}
			s, err := writer.Open(ctx, store, writer.Options{Wait: tt.wait})
			elapsed := time.Since(start)
			assert.Nil(t, s)
			assert.ErrorIs(t, err, lock.ErrLocked)
			var le *lock.LockedError
			require.ErrorAs(t, err, &le)
			require.NotNil(t, le.Holder)
			assert.Equal(t, holder.Report.PID, le.Holder.PID)
			assert.Equal(t, queue.ModeDaemon, le.Holder.Mode)
			assert.Equal(t, uint64(1), le.Holder.Epoch)
			assert.GreaterOrEqual(t, elapsed, tt.atLeast)
			assert.False(t, lock.Demanded(store))
		})
	}
}

// The busy error names the holder as status does: a live process whose
// identity is left in the file, but which no longer holds the lock, is
// not blamed for flock(1)'s hold.
func TestBusyErrorDoesNotBlameALeftIdentity(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel lists a lock's holders on Linux only")
	}
	store := newStore(t)
	path := lockPath(t)
	// This test process is alive and holds nothing: the identity a tool
	// leaves when it lets go without emptying the file.
	require.NoError(t, os.WriteFile(path, []byte("\x00"+strconv.Itoa(os.Getpid())+" python3 -m tool mine"), 0o600))
	holder := exec.Command("flock", path, "sh", "-c", "echo held; read _")
	stdin, err := holder.StdinPipe()
	require.NoError(t, err)
	out, err := holder.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, holder.Start())
	t.Cleanup(func() { stdin.Close(); _ = holder.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", line)

	_, err = lock.Acquire(context.Background(), store, lock.Options{LockPath: path})
	var le *lock.LockedError
	require.ErrorAs(t, err, &le)
	assert.Nil(t, le.Holder, "blamed %+v", le.Holder)
	assert.Contains(t, err.Error(), "held by an unknown process")
}
