package queue_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// nobody is a uid that is not ours, for files "owned by another user".
const nobody = 65534

// OpenPrivate opens only a regular file of this user that no one else
// can write, never follows a symlink (not even to create its target),
// never blocks on a FIFO, and changes nothing of a file it refuses.
func TestOpenPrivate(t *testing.T) {
	root := os.Geteuid() == 0
	cases := []struct {
		name     string
		setup    func(t *testing.T, path string)
		rootOnly bool
		problem  string
	}{
		{"symlink to a file", func(t *testing.T, path string) {
			target := filepath.Join(filepath.Dir(path), "target")
			require.NoError(t, os.WriteFile(target, []byte("precious"), 0o600))
			require.NoError(t, os.Symlink(target, path))
		}, false, "is a symlink"},
		{"dangling symlink", func(t *testing.T, path string) {
			require.NoError(t, os.Symlink(filepath.Join(filepath.Dir(path), "created"), path))
		}, false, "is a symlink"},
		{"FIFO", func(t *testing.T, path string) { require.NoError(t, syscall.Mkfifo(path, 0o600)) }, false, "is not a regular file but a FIFO"},
		{"folder", func(t *testing.T, path string) { require.NoError(t, os.Mkdir(path, 0o700)) }, false, "is not a regular file but a folder"},
		{"group-writable", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte("precious"), 0o600))
			require.NoError(t, os.Chmod(path, 0o620))
		}, false, "is group-writable"},
		{"world-writable", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte("precious"), 0o600))
			require.NoError(t, os.Chmod(path, 0o602))
		}, false, "is world-writable"},
		{"another user's", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte("precious"), 0o600))
			require.NoError(t, os.Chown(path, nobody, nobody))
		}, true, "is owned by uid 65534"},
	}
	for _, c := range cases {
		for _, flag := range []int{os.O_RDONLY, os.O_RDWR | os.O_CREATE, os.O_WRONLY | os.O_CREATE | os.O_TRUNC} {
			t.Run(c.name, func(t *testing.T) {
				if c.rootOnly && !root {
					t.Skip("chown to another user needs root")
				}
				dir := t.TempDir()
				path := filepath.Join(dir, "file")
				c.setup(t, path)
				before := snapshot(t, dir)
				done := make(chan error, 1)
				go func() {
					f, err := queue.OpenPrivate(path, flag, 0o600)
					if f != nil {
						f.Close()
					}
					done <- err
				}()
				var err error
				select {
				case err = <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("OpenPrivate blocked")
				}
				var ie *queue.InsecureError
				require.ErrorAs(t, err, &ie)
				assert.ErrorIs(t, err, queue.ErrInsecure)
				assert.Equal(t, path, ie.Path)
				assert.Contains(t, err.Error(), c.problem)
				assert.Equal(t, before, snapshot(t, dir), "a refused file is left as it was, and nothing is created")
			})
		}
	}

	t.Run("own file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "file")
		require.NoError(t, queue.WritePrivate(path, []byte("one two")))
		require.NoError(t, queue.WritePrivate(path, []byte("three")))
		b, err := queue.ReadPrivate(path, 5)
		require.NoError(t, err)
		assert.Equal(t, "three", string(b))
		_, err = queue.ReadPrivate(path, 4)
		assert.ErrorContains(t, err, "larger than 4 bytes")
		fi, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, fs.FileMode(0o600), fi.Mode().Perm())
		_, err = queue.ReadPrivate(filepath.Join(filepath.Dir(path), "missing"), 5)
		assert.ErrorIs(t, err, fs.ErrNotExist)
	})
}

// Layout.Check refuses .scribe, or any file in it scribe trusts, that
// another user could change, naming the file by its role.
func TestLayoutCheck(t *testing.T) {
	store := t.TempDir()
	l := queue.Layout{Root: store}
	require.NoError(t, l.Check(), "no .scribe: nothing to trust")
	require.NoError(t, l.Make())
	require.NoError(t, l.Check())

	require.NoError(t, os.Chmod(l.Meta(), 0o777))
	err := l.Check()
	assert.ErrorIs(t, err, queue.ErrInsecure)
	assert.ErrorContains(t, err, "refusing "+l.Meta()+": it is world-writable (mode drwxrwxrwx)")
	assert.ErrorIs(t, l.Make(), queue.ErrInsecure)
	require.NoError(t, os.Chmod(l.Meta(), 0o700))

	for _, c := range []struct{ path, role string }{
		{l.Journal(), "journal"}, {l.Lock(), "store lock"}, {l.AutostartGate(), "autostart gate"},
		{l.Config(), "config file"}, {l.DaemonLog(), "daemon log"}, {l.Discovery(), "discovery file"},
	} {
		require.NoError(t, os.Symlink(filepath.Join(store, "elsewhere"), c.path))
		err := l.Check()
		assert.ErrorIs(t, err, queue.ErrInsecure)
		assert.ErrorContains(t, err, "refusing "+c.role+" "+c.path+": it is a symlink")
		require.NoError(t, os.Remove(c.path))
	}
	require.NoError(t, l.Check())
}

// snapshot records every entry under dir: its mode, and its content or
// symlink target.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			require.NoError(t, err)
			v += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			v += " " + string(b)
		}
		out[p] = v
		return nil
	}))
	return out
}
