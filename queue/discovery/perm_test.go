package discovery_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// nobody is a uid that is not ours, for files "owned by another user".
const nobody = 65534

// Take refuses a store whose .scribe folder, or a file in it the daemon
// trusts, another user could change, names the path and the reason, and
// writes nothing: not even the evidence is removed.
func TestStartRefusesInsecureMeta(t *testing.T) {
	root := os.Geteuid() == 0
	cases := []struct {
		name     string
		setup    func(t *testing.T, meta string) // meta exists (0700, with a daemon.lock) unless setup changes that
		rootOnly bool
		path     string // offending path, relative to .scribe ("" is .scribe itself)
		problem  string
	}{
		{"world-writable folder", func(t *testing.T, meta string) { chmod(t, meta, 0o777) }, false, "", "is world-writable"},
		{"world-writable sticky folder", func(t *testing.T, meta string) { chmod(t, meta, 0o1777) }, false, "", "is world-writable"},
		{"group-writable folder", func(t *testing.T, meta string) { chmod(t, meta, 0o770) }, false, "", "is group-writable"},
		{"folder owned by another user", func(t *testing.T, meta string) {
			require.NoError(t, os.Chown(meta, nobody, nobody))
		}, true, "", "is owned by uid 65534"},
		{"folder is a symlink", func(t *testing.T, meta string) {
			elsewhere := filepath.Join(filepath.Dir(filepath.Dir(meta)), "elsewhere")
			require.NoError(t, os.Rename(meta, elsewhere))
			require.NoError(t, os.Symlink(elsewhere, meta))
		}, false, "", "is a symlink"},
		{"folder is a file", func(t *testing.T, meta string) {
			require.NoError(t, os.RemoveAll(meta))
			writeFile(t, meta, "x", 0o600)
		}, false, "", "is not a folder"},
		{"group-writable discovery file", func(t *testing.T, meta string) {
			writeFile(t, filepath.Join(meta, "daemon.json"), `{"url":"nats://evil:4222"}`, 0o660)
		}, false, "daemon.json", "is group-writable"},
		{"world-writable discovery file", func(t *testing.T, meta string) {
			writeFile(t, filepath.Join(meta, "daemon.json"), `{"url":"nats://evil:4222"}`, 0o606)
		}, false, "daemon.json", "is world-writable"},
		{"discovery file owned by another user", func(t *testing.T, meta string) {
			p := filepath.Join(meta, "daemon.json")
			writeFile(t, p, `{}`, 0o600)
			require.NoError(t, os.Chown(p, nobody, nobody))
		}, true, "daemon.json", "is owned by uid 65534"},
		{"discovery file is a symlink", func(t *testing.T, meta string) {
			target := filepath.Join(filepath.Dir(filepath.Dir(meta)), "planted.json")
			writeFile(t, target, `{}`, 0o600)
			require.NoError(t, os.Symlink(target, filepath.Join(meta, "daemon.json")))
		}, false, "daemon.json", "is a symlink"},
		{"discovery temp file is a symlink", func(t *testing.T, meta string) {
			target := filepath.Join(filepath.Dir(filepath.Dir(meta)), "victim.txt")
			writeFile(t, target, "precious", 0o600)
			require.NoError(t, os.Symlink(target, filepath.Join(meta, "daemon.json.tmp")))
		}, false, "daemon.json.tmp", "is a symlink"},
		{"group-writable daemon lock", func(t *testing.T, meta string) {
			chmod(t, filepath.Join(meta, "daemon.lock"), 0o660)
		}, false, "daemon.lock", "is group-writable"},
		{"world-writable queue folder", func(t *testing.T, meta string) {
			js := filepath.Join(meta, "jetstream")
			require.NoError(t, os.Mkdir(js, 0o700))
			chmod(t, js, 0o777)
		}, false, "jetstream", "is world-writable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.rootOnly && !root {
				t.Skip("chown to another user needs root")
			}
			store := newStore(t)
			meta := filepath.Join(store, queue.MetaDir)
			require.NoError(t, os.Mkdir(meta, 0o700))
			writeFile(t, filepath.Join(meta, "daemon.lock"), "", 0o600)
			c.setup(t, meta)
			parent := filepath.Dir(store)
			before := snapshot(t, parent)

			lk, err := discovery.Take(t.Context(), store, nil)
			if lk != nil {
				_ = lk.Close()
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, discovery.ErrInsecure)
			var ie *discovery.InsecureError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, filepath.Join(meta, c.path), ie.Path)
			assert.Contains(t, err.Error(), filepath.Join(meta, c.path))
			assert.Contains(t, err.Error(), c.problem)
			assert.Equal(t, before, snapshot(t, parent), "Take must write nothing when it refuses")
		})
	}
}

// newStore makes an empty store folder and returns its real path.
func newStore(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	require.NoError(t, os.Mkdir(dir, 0o755))
	real, err := queue.ResolveStore(dir)
	require.NoError(t, err)
	return real
}

// snapshot records every entry under dir: its mode, and its content or
// symlink target, so that a test can assert nothing changed.
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
		rel, _ := filepath.Rel(dir, p)
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			v += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		out[rel] = v
		return nil
	}))
	return out
}

func chmod(t testing.TB, path string, mode fs.FileMode) {
	t.Helper()
	require.NoError(t, os.Chmod(path, mode)) // Chmod, unlike Mkdir, ignores the umask
}

func writeFile(t testing.TB, path, content string, mode fs.FileMode) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), mode))
	chmod(t, path, mode)
}
