package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// mountedFS is a fresh filesystem mounted for one test.
type mountedFS struct {
	dir string // where the test's files go: the mount, or on btrfs a subvolume of it
	top string // btrfs only: the filesystem's top subvolume, another subvolume than dir's
}

// mkfsTools are the programs each filesystem needs, and their packages.
var mkfsTools = map[string][][2]string{
	"ext4":  {{"mkfs.ext4", "e2fsprogs"}, {"losetup", "util-linux"}},
	"xfs":   {{"mkfs.xfs", "xfsprogs"}, {"losetup", "util-linux"}},
	"btrfs": {{"mkfs.btrfs", "btrfs-progs"}, {"btrfs", "btrfs-progs"}, {"losetup", "util-linux"}},
}

// mountFS makes a filesystem of kind (ext4, xfs or btrfs on a loop
// device over a sparse image, tmpfs, or overlay) and mounts it on a
// folder of the test's; it is unmounted and its loop device detached at
// cleanup. The test is skipped when not run as root or a tool is missing.
func mountFS(t *testing.T, kind string) mountedFS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("mounting %s needs root", kind)
	}
	for _, tool := range mkfsTools[kind] {
		if _, err := exec.LookPath(tool[0]); err != nil {
			t.Skipf("%s needs %s (apt-get install %s)", kind, tool[0], tool[1])
		}
	}
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
		return strings.TrimSpace(string(out))
	}
	base := t.TempDir()
	mnt := filepath.Join(base, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	unmount := func(dir string) {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s; detaching it lazily", dir, err, out)
			_ = exec.Command("umount", "-l", dir).Run()
		}
	}
	switch kind {
	case "tmpfs":
		run("mount", "-t", "tmpfs", "-o", "size=256m,mode=0755", "tmpfs", mnt)
	case "overlay":
		// The layers on a tmpfs of their own: an overlay's upper layer
		// cannot be on an overlay, which the test's folder may be.
		layers := filepath.Join(base, "layers")
		require.NoError(t, os.Mkdir(layers, 0o755))
		run("mount", "-t", "tmpfs", "-o", "size=256m,mode=0755", "tmpfs", layers)
		t.Cleanup(func() { unmount(layers) })
		for _, d := range []string{"lower", "upper", "work"} {
			require.NoError(t, os.Mkdir(filepath.Join(layers, d), 0o755))
		}
		run("mount", "-t", "overlay", "overlay", "-o", "lowerdir="+layers+"/lower,upperdir="+layers+"/upper,workdir="+layers+"/work", mnt)
	default:
		img := filepath.Join(base, kind+".img")
		size := int64(256 << 20)
		if kind == "xfs" {
			size = 320 << 20 // mkfs.xfs refuses less than 300 MB
		}
		f, err := os.Create(img)
		require.NoError(t, err)
		require.NoError(t, f.Truncate(size)) // sparse
		require.NoError(t, f.Close())
		switch kind {
		case "ext4":
			run("mkfs.ext4", "-q", "-F", img)
		case "xfs":
			run("mkfs.xfs", "-q", "-f", img)
		case "btrfs":
			run("mkfs.btrfs", "-q", "-f", img)
		}
		dev := run("losetup", "--find", "--show", img)
		t.Cleanup(func() {
			if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
				t.Errorf("losetup -d %s: %v: %s", dev, err, out)
			}
		})
		run("mount", dev, mnt)
	}
	t.Cleanup(func() { unmount(mnt) })
	fs := mountedFS{dir: mnt}
	if kind == "btrfs" {
		run("btrfs", "subvolume", "create", filepath.Join(mnt, "sub"))
		fs.dir, fs.top = filepath.Join(mnt, "sub"), mnt
	}
	return fs
}

// inode is path's inode number.
func inode(t testing.TB, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	return st.Ino
}

// The kernel's lock table names a file by its filesystem's device, which
// is not always the one stat shows (every btrfs subvolume has its own).
// On each filesystem, a store whose exec command has a lock_file there:
// while flock(1) holds the tool's lock the job is deferred (status says
// why) and the mine does not start; once it lets go, the mine runs once
// and the job is applied. `scribe status` sees flock(1) holding the store
// lock there too. On btrfs, a lock on a file of another subvolume that
// has the tool lock's inode number does not defer the job.
func TestToolLockSeenOnEveryFilesystem(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"ext4", "xfs", "btrfs", "tmpfs", "overlay"} {
		t.Run(kind, func(t *testing.T) {
			fs := mountFS(t, kind)
			m := newMine(t)
			m.toolLock = filepath.Join(fs.dir, "tool.lock")
			// The first file of each subvolume: on btrfs they share an inode number.
			require.NoError(t, os.WriteFile(m.toolLock, nil, 0o644))
			decoy := ""
			if fs.top != "" {
				decoy = filepath.Join(fs.top, "decoy.lock")
				require.NoError(t, os.WriteFile(decoy, nil, 0o644))
				if inode(t, decoy) != inode(t, m.toolLock) {
					t.Logf("no file of another subvolume with the tool lock's inode number: that check is left out")
					decoy = ""
				}
			}
			store := filepath.Join(fs.dir, "store")
			require.NoError(t, os.Mkdir(store, 0o755))
			m.store, m.log = store, filepath.Join(store, "mine.log")

			// The queue reserves max_bytes on the store's disk up front.
			writeConfig(t, store, "max_bytes = 33554432\n\n"+m.command("mine", nil, `timeout = "30s"`, "lock_file = "+tomlString(m.toolLock)), 0o600)
			storeLock := filepath.Join(store, ".scribe", "lock")
			require.NoError(t, os.WriteFile(storeLock, nil, 0o600)) // as scribe makes it
			release := holdWithFlock(t, storeLock)
			var st struct {
				Lock struct{ State string } `json:"lock"`
			}
			r := scribe(t, "", "status", "--store", store, "--json")
			require.Equal(t, 0, r.code, r.stderr)
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
			assert.Equal(t, "held", st.Lock.State, "status sees flock(1) hold the store lock")
			release()
			startDaemon(t, store)

			if decoy != "" {
				releaseDecoy := holdWithFlock(t, decoy)
				r, o := submitWait(t, store, "--id", "beside-decoy", "exec", "mine")
				require.Equal(t, 0, r.code, r.stderr)
				assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s", o.Reason, o.Detail)
				assert.Len(t, m.lines(t, "start"), 1, "the mine ran: a lock on another subvolume's file is not its own")
				releaseDecoy()
			}

			release = holdWithFlock(t, m.toolLock)
			r = scribe(t, "", "submit", "--store", store, "--id", "deferred-"+kind, "exec", "mine")
			require.Equal(t, 0, r.code, r.stderr)
			var rep queue.StatusReport
			require.Eventually(t, func() bool {
				var ok bool
				rep, ok = report(t, store)
				return ok && rep.Deferred != ""
			}, 20*time.Second, 20*time.Millisecond, "status shows the job deferred")
			assert.Contains(t, rep.Deferred, m.toolLock, "status says which lock it waits for")
			for _, l := range m.lines(t, "") {
				assert.NotEqual(t, "deferred-"+kind, l.job, "the mine started while its lock was held: %+v", l)
			}
			release()
			o := outcomeOf(t, store, "deferred-"+kind)
			assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s", o.Reason, o.Detail)
			var ran []string
			for _, l := range m.lines(t, "end") {
				ran = append(ran, l.job)
			}
			assert.Contains(t, ran, "deferred-"+kind)
			assert.Empty(t, m.lines(t, "busy"), "the mine never found its lock held")
		})
	}
}
