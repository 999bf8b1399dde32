package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAFolderAtTheTemporaryNameRejectsThePut: a put (or merge, or an
// append after a delete) writes its file whole through a temporary name
// beside it. A folder standing there, which
// the writer cannot remove, rejects that job when it is decided; found only
// when the batch is carried out, it stopped the store for every write.
func TestAFolderAtTheTemporaryNameRejectsThePut(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	require.NoError(t, os.Mkdir(filepath.Join(store, ".a.txt.scribe-tmp"), 0o755))

	for _, args := range [][]string{{"put", "a.txt", "hello\n"}, {"merge", "a.txt", `{"k":1}`}} {
		r := scribe(t, "", append([]string{"submit", "--store", store}, args...)...)
		assert.Equal(t, 1, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "not_regular", args)
		assert.Contains(t, r.stderr, ".a.txt.scribe-tmp, the temporary name scribe writes a.txt through, is a folder", args)
	}
	r := scribe(t, "", "submit", "--store", store, "append", "a.txt", "line\n")
	require.Equal(t, 0, r.code, "an append writes in place: %s", r.stderr)
	r = scribe(t, "", "submit", "--store", store, "put", "b.txt", "b\n")
	require.Equal(t, 0, r.code, "the store still takes writes: %s", r.stderr)
	assert.Equal(t, "line\n", readFile(t, filepath.Join(store, "a.txt")))
	assert.Equal(t, "b\n", readFile(t, filepath.Join(store, "b.txt")))
	// A delete then an append in one job writes the file whole, through
	// that name: rejected. A delete alone only unlinks the file: applied.
	r = scribe(t, `{"ops":[{"op":"delete","path":"a.txt"},{"op":"append","path":"a.txt","data":"again\n"}]}`, "submit", "--store", store, "--job", "-")
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "is a folder")
	r = scribe(t, "", "submit", "--store", store, "delete", "a.txt")
	require.Equal(t, 0, r.code, "a delete goes through no temporary name: %s", r.stderr)
	assert.NoFileExists(t, filepath.Join(store, "a.txt"))
	fi, err := os.Stat(filepath.Join(store, ".a.txt.scribe-tmp"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir(), "the folder is left as it was")
}

// TestStickyFolderOfTheStore: in a folder with the sticky bit (as /tmp
// has), a writer may remove or replace only its own files, unless the
// folder is its. access(2) does not say so: a delete or put of another
// user's file there, or a put whose temporary name another user's file
// holds, passed the checks and then failed when carried out, stopping the
// store. Each is rejected not_permitted now, and the store goes on.
func TestStickyFolderOfTheStore(t *testing.T) {
	t.Parallel()
	cred := otherUser(t)
	store := newStore(t)
	reachable(t, store)
	require.NoError(t, os.Chown(store, int(cred.Uid), int(cred.Gid)))
	// A drop folder anyone may write to, root's, sticky; root leaves two
	// files in it, one a put's temporary name.
	drop := filepath.Join(store, "drop")
	require.NoError(t, os.Mkdir(drop, 0o755))
	require.NoError(t, os.Chmod(drop, 0o777|os.ModeSticky))
	for _, name := range []string{"f", ".g.txt.scribe-tmp"} {
		require.NoError(t, os.WriteFile(filepath.Join(drop, name), []byte("root's\n"), 0o666))
		require.NoError(t, os.Chmod(filepath.Join(drop, name), 0o666))
	}

	as := func(args ...string) result {
		t.Helper()
		cmd := exec.Command(scribeBin, append([]string{"submit", "--store", store}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/"}
		r, err := runCmd(cmd)
		require.NoError(t, err)
		return r
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"delete", "drop/f"}, "drop/f is another user's (uid 0) in drop, a folder with the sticky bit"},
		{[]string{"put", "drop/f", "mine\n"}, "drop/f is another user's (uid 0) in drop, a folder with the sticky bit"},
		{[]string{"put", "drop/g.txt", "mine\n"}, "drop/.g.txt.scribe-tmp, the temporary name scribe writes drop/g.txt through, is another user's (uid 0)"},
	} {
		r := as(c.args...)
		assert.Equal(t, 1, r.code, "%v: %s", c.args, r.stderr)
		assert.Contains(t, r.stderr, "not_permitted", c.args)
		assert.Contains(t, r.stderr, c.says, c.args)
	}
	r := as("append", "drop/f", "appended\n")
	require.Equal(t, 0, r.code, "an append writes the file in place: %s", r.stderr)
	r = as("put", "drop/h.txt", "h\n")
	require.Equal(t, 0, r.code, "a new file of its own in the folder: %s", r.stderr)
	r = as("put", "notes.txt", "n\n")
	require.Equal(t, 0, r.code, "the store still takes writes: %s", r.stderr)
	assert.Equal(t, "root's\nappended\n", readFile(t, filepath.Join(drop, "f")))
	assert.Equal(t, "root's\n", readFile(t, filepath.Join(drop, ".g.txt.scribe-tmp")))
	assert.Equal(t, "h\n", readFile(t, filepath.Join(drop, "h.txt")))
	assert.Equal(t, "n\n", readFile(t, filepath.Join(store, "notes.txt")))
}
