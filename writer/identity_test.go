package writer_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/lock"
)

// A tool that shares its lock file with scribe (the memory tool's mine
// lock) writes "\x00<pid> <argv>" into it; scribe reads that as the
// holder: its pid and command, this host, no mode, and the file's time.
func TestForeignIdentityDecoded(t *testing.T) {
	host, _ := os.Hostname()
	tests := []struct {
		name    string
		content string
		pid     int    // 0: no identity
		command string // with pid
	}{
		{"pid and argv", "\x0012345 /usr/bin/python3 -m mempalace mine --wing=notes", 12345, "/usr/bin/python3 -m mempalace mine --wing=notes"},
		{"trailing newline", "\x0042 mempalace mine\n", 42, "mempalace mine"},
		{"argv separated by NULs", "\x0042 python3\x00-m\x00mempalace\x00mine\x00", 42, "python3 -m mempalace mine"},
		{"pid alone", "\x0042", 42, ""},
		{"pid and a space", "\x0042 ", 42, ""},
		{"argv not UTF-8", "\x0042 mine \xff\xfe", 42, "mine \uFFFD"},
		{"largest pid", "\x002147483647 x", 2147483647, "x"},

		{"empty", "", 0, ""},
		{"NUL alone", "\x00", 0, ""},
		{"no NUL", "12345 mempalace mine", 0, ""},
		{"no pid", "\x00 mempalace mine", 0, ""},
		{"letters for a pid", "\x00abc mine", 0, ""},
		{"signed pid", "\x00+42 mine", 0, ""},
		{"negative pid", "\x00-42 mine", 0, ""},
		{"pid zero", "\x000 mine", 0, ""},
		{"pid out of range", "\x002147483648 mine", 0, ""},
		{"pid then tab", "\x0042\tmine", 0, ""},
		{"two NULs first", "\x00\x0042 mine", 0, ""},
		{"JSON after a NUL", "\x00{\"pid\":42}", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := lockPath(t)
			require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o600))
			mtime := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			require.NoError(t, os.Chtimes(path, mtime, mtime))

			h, err := lock.ReadHolder(path)
			if tt.pid == 0 {
				assert.Error(t, err)
				assert.Nil(t, h)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, queue.Holder{PID: tt.pid, Host: host, Command: tt.command, Since: mtime}, *h)
		})
	}
}

// scribe's own identity is read as before, whatever its time: the file's
// time stands in only for an identity that has none.
func TestForeignIdentityLeavesScribesAlone(t *testing.T) {
	path := lockPath(t)
	since := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	want := queue.Holder{PID: 7, Host: "box", Mode: queue.ModeDaemon, Command: "scribe serve", Since: since, Epoch: 3, Token: "T", Start: 99}
	writeIdentity(t, path, want)
	h, err := lock.ReadHolder(path)
	require.NoError(t, err)
	assert.Equal(t, want, *h)
}

// A contender refused by a tool that holds the lock with its own identity
// is told who: that pid and command. Once that process is gone and
// someone else holds the lock, the stale identity is not believed.
func TestForeignIdentityNamesBusyHolder(t *testing.T) {
	const deadPID = 1<<22 + 1 // beyond any pid_max
	host, _ := os.Hostname()
	t.Run("live holder", func(t *testing.T) {
		store, path := newStore(t), lockPath(t)
		require.NoError(t, os.WriteFile(path, []byte("\x00"+strconv.Itoa(os.Getpid())+" python3 -m mempalace mine"), 0o600))
		holdFlock(t, path) // another open file description: a process of its own, to flock
		before := time.Now()

		_, err := lock.Acquire(context.Background(), store, lock.Options{LockPath: path, Command: "contender"})
		require.ErrorIs(t, err, lock.ErrLocked)
		var le *lock.LockedError
		require.ErrorAs(t, err, &le)
		require.NotNil(t, le.Holder, "the holder is named: %v", err)
		assert.Equal(t, os.Getpid(), le.Holder.PID)
		assert.Equal(t, "python3 -m mempalace mine", le.Holder.Command)
		assert.Equal(t, host, le.Holder.Host)
		assert.Empty(t, le.Holder.Mode, "another tool has no scribe mode")
		assert.WithinRange(t, le.Holder.Since, before.Add(-time.Minute), time.Now().Add(time.Second))
		assert.Contains(t, err.Error(), "held by pid "+strconv.Itoa(os.Getpid()))
		assert.Contains(t, err.Error(), "python3 -m mempalace mine")
		assert.NotContains(t, err.Error(), "unknown process")

		b, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, "\x00"+strconv.Itoa(os.Getpid())+" python3 -m mempalace mine", string(b), "a refused contender leaves the identity alone")
	})
	t.Run("dead holder's identity", func(t *testing.T) {
		store, path := newStore(t), lockPath(t)
		require.NoError(t, os.WriteFile(path, []byte("\x00"+strconv.Itoa(deadPID)+" python3 -m mempalace mine"), 0o600))
		holdFlock(t, path)

		_, err := lock.Acquire(context.Background(), store, lock.Options{LockPath: path, Command: "contender"})
		require.ErrorIs(t, err, lock.ErrLocked)
		var le *lock.LockedError
		require.ErrorAs(t, err, &le)
		assert.Nil(t, le.Holder, "a dead process's identity is not the holder")
		assert.Contains(t, err.Error(), "unknown process")
	})
	t.Run("free lock", func(t *testing.T) {
		// The tool let go without clearing its identity: scribe takes the
		// lock and writes its own over it.
		store, path := newStore(t), lockPath(t)
		require.NoError(t, os.WriteFile(path, []byte("\x00"+strconv.Itoa(os.Getpid())+" python3 -m mempalace mine"), 0o600))
		l := tryLock(t, store, lock.Options{LockPath: path, Command: "scribe lock"})
		h, err := lock.ReadHolder(l.Path())
		require.NoError(t, err)
		assert.Equal(t, queue.ModeDirect, h.Mode)
		assert.Equal(t, "scribe lock", h.Command)
	})
}

// TestDescribeHolder: another tool's identity has no mode, and its message
// shows none rather than an empty "(: …)".
func TestDescribeHolder(t *testing.T) {
	assert.Equal(t, `pid 7 on box ("mine --wing=notes")`, lock.DescribeHolder(&queue.Holder{PID: 7, Host: "box", Command: "mine --wing=notes"}))
	assert.Equal(t, `pid 7 on box (direct: "scribe submit append a")`, lock.DescribeHolder(&queue.Holder{PID: 7, Host: "box", Mode: queue.ModeDirect, Command: "scribe submit append a"}))
}
