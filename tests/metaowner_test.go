package tests

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// otherUserName is the second local user that plays another user of the
// machine: someone who was given, or took, write access to a store's
// .scribe folder.
const otherUserName = "scribe-other"

// otherUser is the second local user's credential, the user created with
// useradd if missing. Running a process as another user takes root (CI
// runs as root); elsewhere the test is skipped.
func otherUser(t testing.TB) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root: commands run as a second local user (%s)", otherUserName)
	}
	u, err := user.Lookup(otherUserName)
	if err != nil {
		if _, lerr := exec.LookPath("useradd"); lerr != nil {
			t.Skipf("no user %s, and no useradd to create one", otherUserName)
		}
		out, aerr := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", otherUserName).CombinedOutput()
		// Another test process may have created it meanwhile: look again.
		u, err = user.Lookup(otherUserName)
		require.NoError(t, err, "useradd %s: %v: %s", otherUserName, aerr, out)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	require.NoError(t, err)
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	require.NoError(t, err)
	require.NotZero(t, uid, "%s must not be root", otherUserName)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// asOther runs a shell script as the other user and wants it to succeed.
func asOther(t testing.TB, cred *syscall.Credential, script string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "SCRIBE_ROUTE=", "SCRIBE_STORE="}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "as %s: %s\n%s", otherUserName, script, out)
}

// reachable lets the other user through the test's temporary folders down
// to path (t.TempDir makes them owner-only), and run the scribe binary.
func reachable(t testing.TB, path string) {
	t.Helper()
	for _, dir := range []string{filepath.Dir(filepath.Dir(path)), filepath.Dir(path), filepath.Dir(scribeBin)} {
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(dir, fi.Mode().Perm()|0o055))
	}
}

// entrance is one way into a store: a command a hook, an agent host or a
// person runs.
type entrance struct {
	name string
	run  func(t *testing.T, store string) result
}

// entrances are every command that reads or writes a store's .scribe.
func entrances() []entrance {
	cmd := func(args ...string) func(t *testing.T, store string) result {
		return func(t *testing.T, store string) result {
			a := append([]string{args[0], "--store", store}, args[1:]...)
			return runWith(t, scribeBin, []string{"SCRIBE_AUTOSTART=", "SCRIBE_EXIT_IDLE="}, strings.NewReader(""), a...)
		}
	}
	return []entrance{
		{"submit direct", cmd("submit", "--route", "direct", "--id", "note-2", "put", "b.txt", "owner")},
		{"submit prefer, a retry", cmd("submit", "--id", "note-1", "put", "a.txt", "owner")},
		{"submit autostart", cmd("submit", "--autostart", "--exit-idle", testExitIdle, "--id", "note-3", "put", "c.txt", "owner")},
		{"status", cmd("status")},
		{"status ID", cmd("status", "--json", "note-1")},
		{"wait", cmd("wait", "--timeout", "2s", "note-1")},
		{"jobs", cmd("jobs")},
		{"lock", cmd("lock", "--", "true")},
		{"recover", cmd("recover")},
		{"stop", cmd("stop")},
		{"mcp", cmd("mcp")}, // stdin is empty: a server that starts exits 0 at once
		{"serve", func(t *testing.T, store string) result { return serveBriefly(t, store, 30*time.Second) }},
	}
}

// refusedEverywhere runs every entrance on store and wants each to refuse
// with want (the *InsecureError's message), exit 1, and to change nothing
// under dir (the store, and whatever a planted symlink points to) nor
// start a daemon.
func refusedEverywhere(t *testing.T, store, dir, want string) {
	t.Helper()
	killServes(t, store)
	before := treeSnapshot(t, dir)
	for _, e := range entrances() {
		t.Run(e.name, func(t *testing.T) {
			r := e.run(t, store)
			assert.Equal(t, 1, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
			assert.Contains(t, r.stderr, "scribe: "+want)
			assert.Equal(t, before, treeSnapshot(t, dir), "a refusal writes nothing, records nothing")
			assert.Empty(t, serveProcs(t, store), "no daemon started")
		})
	}
}

// killServes kills, at the end of the test, any daemon of store that an
// entrance started although it should have refused (as the old code did):
// none is expected, and none can be asked to stop through a .scribe the
// test made untrustworthy.
func killServes(t *testing.T, store string) {
	t.Cleanup(func() {
		for _, pid := range serveProcs(t, store) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// Another user given write access to .scribe swaps in a
// journal of their own, which has note-1 as a different job. Every
// entrance refuses, the same way: first because the folder is open to
// others, then, once its owner closes it again, because the journal is
// not theirs. Nothing is written or recorded, and the owner's retry of
// note-1 is never judged against the other user's history.
func TestOtherUserSwapsJournal(t *testing.T) {
	t.Parallel()
	cred := otherUser(t)
	store := newStore(t)
	real, err := queue.ResolveStore(store)
	require.NoError(t, err)
	l := queue.Layout{Root: real}
	r := scribe(t, "", "submit", "--store", store, "--route", "direct", "--id", "note-1", "put", "a.txt", "owner")
	require.Equal(t, 0, r.code, r.stderr)

	// The other user's own journal, where note-1 is another job.
	evil := filepath.Join(t.TempDir(), "evil")
	require.NoError(t, os.Mkdir(evil, 0o755))
	require.NoError(t, os.Chown(evil, int(cred.Uid), int(cred.Gid)))
	reachable(t, evil)
	reachable(t, store)
	require.NoError(t, os.Chmod(l.Meta(), 0o777)) // the owner opens .scribe to others
	asOther(t, cred, scribeBin+" submit --store "+evil+" --route direct --id note-1 put a.txt evil && "+
		"mv "+queue.Layout{Root: evil}.Journal()+" "+l.Journal())

	t.Run("folder open to others", func(t *testing.T) {
		refusedEverywhere(t, store, filepath.Dir(store), "refusing "+l.Meta()+": it is world-writable (mode drwxrwxrwx)")
	})
	require.NoError(t, os.Chmod(l.Meta(), 0o700)) // closed again; the journal stays
	t.Run("journal not the owner's", func(t *testing.T) {
		refusedEverywhere(t, store, filepath.Dir(store), "refusing journal "+l.Journal()+": it is owned by uid "+strconv.Itoa(int(cred.Uid)))
	})
	assert.Equal(t, "owner", readFile(t, filepath.Join(store, "a.txt")))
}

// Another user plants .scribe/autostart as a symlink to
// a file path; the owner's hook (submit --autostart, no daemon running)
// refuses, and the file it points to is not created.
func TestOtherUserPlantsAutostartGate(t *testing.T) {
	t.Parallel()
	cred := otherUser(t)
	store := newStore(t)
	real, err := queue.ResolveStore(store)
	require.NoError(t, err)
	l := queue.Layout{Root: real}
	require.NoError(t, os.Mkdir(l.Meta(), 0o700))
	reachable(t, store)
	require.NoError(t, os.Chmod(l.Meta(), 0o770))
	require.NoError(t, os.Chown(l.Meta(), 0, int(cred.Gid))) // the other user's group may write
	target := filepath.Join(filepath.Dir(store), "created-by-the-owner")
	asOther(t, cred, "ln -s "+target+" "+l.AutostartGate())

	hook := func(t *testing.T, want string) {
		killServes(t, store)
		r := runWith(t, scribeBin, []string{"SCRIBE_AUTOSTART=", "SCRIBE_EXIT_IDLE="}, strings.NewReader(""),
			"submit", "--store", store, "--autostart", "--exit-idle", testExitIdle, "put", "a.txt", "x")
		assert.Equal(t, 1, r.code, r.stderr)
		assert.Contains(t, r.stderr, "scribe: "+want)
		assert.NoFileExists(t, target, "the owner's hook created the file the other user named")
		assert.NoFileExists(t, filepath.Join(store, "a.txt"))
		assert.Empty(t, serveProcs(t, store), "no daemon started")
	}
	t.Run("folder open to the group", func(t *testing.T) {
		hook(t, "refusing "+l.Meta()+": it is group-writable (mode drwxrwx---)")
	})
	require.NoError(t, os.Chmod(l.Meta(), 0o700))
	t.Run("gate a symlink", func(t *testing.T) {
		hook(t, "refusing autostart gate "+l.AutostartGate()+": it is a symlink")
	})
}

// The same for the store lock and the config file. A
// lock file planted as a symlink is neither followed nor created, one
// planted as the other user's own file is not written to; a config file
// of the other user's (which could name the commands the daemon runs) is
// read by no entrance.
func TestOtherUserPlantsLockAndConfig(t *testing.T) {
	t.Parallel()
	cred := otherUser(t)
	uid := strconv.Itoa(int(cred.Uid))
	for _, c := range []struct {
		name   string
		file   func(l queue.Layout) string
		role   string
		plant  func(path, target string) string // the other user's script
		wanted string                           // the problem, once .scribe is closed again
	}{
		{"lock as a symlink", queue.Layout.Lock, "store lock",
			func(path, target string) string { return "ln -s " + target + " " + path }, "it is a symlink"},
		{"lock of the other user's", queue.Layout.Lock, "store lock",
			func(path, _ string) string { return "printf '' > " + path + " && chmod 644 " + path }, "it is owned by uid " + uid},
		{"config as a symlink", queue.Layout.Config, "config file",
			func(path, target string) string {
				return "printf 'autostart = true\\n' > " + target + " && chmod 600 " + target + " && ln -s " + target + " " + path
			}, "it is a symlink"},
		{"config of the other user's", queue.Layout.Config, "config file",
			func(path, _ string) string {
				return "printf 'autostart = true\\n[exec.x]\\nprogram = \"/bin/sh\"\\ntimeout = \"1m\"\\n' > " + path + " && chmod 600 " + path
			}, "it is owned by uid " + uid},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := newStore(t)
			real, err := queue.ResolveStore(store)
			require.NoError(t, err)
			l := queue.Layout{Root: real}
			require.NoError(t, os.Mkdir(l.Meta(), 0o700))
			reachable(t, store)
			dir := filepath.Dir(store)
			require.NoError(t, os.Chmod(dir, 0o777)) // somewhere the other user may put a file to point at
			target := filepath.Join(dir, "planted")
			require.NoError(t, os.Chmod(l.Meta(), 0o777))
			asOther(t, cred, c.plant(c.file(l), target))
			t.Run("folder open to others", func(t *testing.T) {
				refusedEverywhere(t, store, dir, "refusing "+l.Meta()+": it is world-writable (mode drwxrwxrwx)")
			})
			require.NoError(t, os.Chmod(l.Meta(), 0o700))
			t.Run("planted file", func(t *testing.T) {
				refusedEverywhere(t, store, dir, "refusing "+c.role+" "+c.file(l)+": "+c.wanted)
			})
		})
	}
}
