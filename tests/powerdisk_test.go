package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The power-cut machinery: a store on a loop-mounted filesystem whose
// own commits and the kernel's periodic writeback are held back, so that
// only what scribe (and JetStream) fsynced reaches the loop device; a
// copy of the image file is then what a power cut at that instant leaves.
// The model is a disk that keeps every write it completed: it does not
// reorder or drop writes that were not flushed, as a drive's volatile
// cache may.

// powerFS is a filesystem the power-cut test runs on.
type powerFS struct {
	name string
	// mkfs makes the filesystem; the image file is appended.
	mkfs []string
	size int64 // of the image
	// mount are the mount options: commits held back, and what mounting
	// a copy needs.
	mount string
	// maxBytes is the daemon's --max-bytes: JetStream reserves it up
	// front, within 75% of the free space.
	maxBytes int64
	// sysctl holds back the filesystem's own periodic log writes.
	sysctl map[string]string
	// half: a filesystem the promises are checked on besides, with half
	// the cuts, to keep the run short.
	half bool
}

var powerFilesystems = []powerFS{
	{
		name: "ext4",
		// Inode tables and journal initialised now, not by a kernel
		// thread writing in the background after the mount.
		mkfs:     []string{"mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"},
		size:     128 << 20,
		mount:    "commit=600,noinit_itable",
		maxBytes: 24 << 20,
	},
	{
		name:     "xfs",
		mkfs:     []string{"mkfs.xfs", "-q", "-f"},
		size:     320 << 20, // mkfs.xfs wants more than 300 MB
		mount:    "nouuid",
		maxBytes: 32 << 20,
		// The log worker forces the log every 30 s by default.
		sysctl: map[string]string{"fs/xfs/xfssyncd_centisecs": "720000"},
	},
	{
		name:     "btrfs",
		mkfs:     []string{"mkfs.btrfs", "-q", "-f"},
		size:     256 << 20,
		mount:    "commit=600",
		maxBytes: 32 << 20,
		half:     true,
	},
}

// requirePowerCut skips the test unless it can make loop-mounted
// filesystems: root, loop devices, losetup, mount, flock(1).
func requirePowerCut(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("power-cut tests need root: they mount loop devices")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("power-cut tests need loop devices: %v", err)
	}
	for _, bin := range []string{"losetup", "mount", "umount", "flock"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("power-cut tests need %s: %v", bin, err)
		}
	}
	// /dev/loop-control may be there and still give no device (a
	// container): try one.
	probe := filepath.Join(t.TempDir(), "probe.img")
	require.NoError(t, os.WriteFile(probe, make([]byte, 1<<20), 0o600))
	out, err := exec.Command("losetup", "--find", "--show", probe).CombinedOutput()
	if err != nil {
		t.Skipf("power-cut tests need a loop device: losetup: %v: %s", err, out)
	}
	out, err = exec.Command("losetup", "-d", strings.TrimSpace(string(out))).CombinedOutput()
	require.NoError(t, err, "losetup -d: %s", out)
}

// requireMkfs skips the (sub)test when fs cannot be made here.
func requireMkfs(t *testing.T, fs powerFS) {
	t.Helper()
	if _, err := exec.LookPath(fs.mkfs[0]); err != nil {
		t.Skipf("%s: %v (install %s)", fs.name, err, map[string]string{"ext4": "e2fsprogs", "xfs": "xfsprogs", "btrfs": "btrfs-progs"}[fs.name])
	}
}

// powerCutLock serialises the power-cut tests of every process on the
// machine: the writeback settings they change are the whole machine's.
func powerCutLock(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "scribe-powercut.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
	}, 10*time.Minute, 100*time.Millisecond, "another power-cut test holds %s", f.Name())
	t.Cleanup(func() { f.Close() })
}

// sysctlSaved is where the writeback settings' former values wait while
// a test has changed them, so that a run killed before its cleanup (a
// go test timeout) is undone by the next run.
var sysctlSaved = filepath.Join(os.TempDir(), "scribe-powercut-sysctl.json")

// restoreSysctls writes back the settings a former run saved, if any.
func restoreSysctls(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(sysctlSaved)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	require.NoError(t, err)
	var saved [][2]string
	require.NoError(t, json.Unmarshal(b, &saved))
	for i := len(saved) - 1; i >= 0; i-- {
		writeSysctl(t, saved[i][0], saved[i][1])
	}
	require.NoError(t, os.Remove(sysctlSaved))
}

func readSysctl(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc/sys", name))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

func writeSysctl(t *testing.T, name, value string) {
	t.Helper()
	err := os.WriteFile(filepath.Join("/proc/sys", name), []byte(value), 0)
	require.NoError(t, err, "sysctl %s=%s", name, value)
}

// writeback is the tests that hold back the kernel's writeback: its
// settings are the whole machine's, so the first saves and changes them
// and the last restores them.
var writeback struct {
	sync.Mutex
	users int
	saved [][2]string // name, former value
}

// holdBackWriteback stops the kernel's periodic writeback and raises the
// dirty threshold at which it writes back in the background, and sets
// extra (the filesystem's own log interval). Every value is restored at
// cleanup of the last test that holds it back, also when a test fails.
func holdBackWriteback(t *testing.T, extra map[string]string) {
	t.Helper()
	writeback.Lock()
	defer writeback.Unlock()
	var set [][2]string
	if writeback.users == 0 {
		probe := "vm/dirty_writeback_centisecs"
		if err := os.WriteFile(filepath.Join("/proc/sys", probe), []byte(readSysctl(t, probe)), 0); err != nil {
			t.Skipf("power-cut tests hold back the kernel's writeback, and cannot here: %v", err)
		}
		restoreSysctls(t)
		// Writing one of dirty_background_bytes and _ratio zeroes the
		// other, and a zero is not accepted back: restore the one that
		// was set.
		bg := [2]string{"vm/dirty_background_ratio", readSysctl(t, "vm/dirty_background_ratio")}
		if b := readSysctl(t, "vm/dirty_background_bytes"); b != "0" {
			bg = [2]string{"vm/dirty_background_bytes", b}
		}
		writeback.saved = [][2]string{
			bg,
			{"vm/dirty_writeback_centisecs", readSysctl(t, "vm/dirty_writeback_centisecs")},
			{"vm/dirty_expire_centisecs", readSysctl(t, "vm/dirty_expire_centisecs")},
		}
		set = [][2]string{
			{"vm/dirty_background_bytes", strconv.Itoa(1 << 30)},
			{"vm/dirty_writeback_centisecs", "0"},
			{"vm/dirty_expire_centisecs", "360000"},
		}
	}
	for name, v := range extra {
		if !slices.ContainsFunc(writeback.saved, func(s [2]string) bool { return s[0] == name }) {
			writeback.saved = append(writeback.saved, [2]string{name, readSysctl(t, name)})
		}
		set = append(set, [2]string{name, v})
	}
	b, err := json.Marshal(writeback.saved)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(sysctlSaved, b, 0o600))
	writeback.users++
	t.Cleanup(func() {
		writeback.Lock()
		defer writeback.Unlock()
		if writeback.users--; writeback.users == 0 {
			restoreSysctls(t)
			writeback.saved = nil
		}
	})
	for _, s := range set {
		writeSysctl(t, s[0], s[1])
	}
}

// loopImage is a filesystem image file attached to a loop device and
// mounted.
type loopImage struct {
	file string
	dev  string // /dev/loopN
	dir  string // the mount point
}

// makeImage creates the image file and the filesystem in it.
func makeImage(t *testing.T, fs powerFS, file string) {
	t.Helper()
	f, err := os.Create(file)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(fs.size))
	require.NoError(t, f.Close())
	out, err := exec.Command(fs.mkfs[0], append(fs.mkfs[1:], file)...).CombinedOutput()
	require.NoError(t, err, "%s: %s", fs.mkfs, out)
}

// mountImage attaches file to a free loop device and mounts it at dir.
// Unmounting and detaching are the caller's (unmount), and done at
// cleanup if it has not.
func mountImage(t *testing.T, fs powerFS, file, dir string) *loopImage {
	t.Helper()
	out, err := exec.Command("losetup", "--find", "--show", file).CombinedOutput()
	require.NoError(t, err, "losetup: %s", out)
	im := &loopImage{file: file, dev: strings.TrimSpace(string(out)), dir: dir}
	out, err = exec.Command("mount", "-t", fs.name, "-o", fs.mount, im.dev, dir).CombinedOutput()
	if err != nil {
		_ = exec.Command("losetup", "-d", im.dev).Run()
		if strings.Contains(string(out), "unknown filesystem type") {
			t.Skipf("this kernel cannot mount %s: %s", fs.name, out)
		}
		require.NoError(t, err, "mount %s: %s", im.dev, out)
	}
	t.Cleanup(func() { im.unmount(t) })
	return im
}

// unmount unmounts the image, detaches its loop device and removes the
// file; it does nothing the second time.
func (im *loopImage) unmount(t *testing.T) {
	t.Helper()
	if im.dev == "" {
		return
	}
	// A process killed a moment ago may still be closing its files.
	var out []byte
	require.Eventually(t, func() bool {
		var err error
		out, err = exec.Command("umount", im.dir).CombinedOutput()
		return err == nil || strings.Contains(string(out), "not mounted")
	}, 30*time.Second, 20*time.Millisecond, "umount %s: %s", im.dir, out)
	out, err := exec.Command("losetup", "-d", im.dev).CombinedOutput()
	require.NoError(t, err, "losetup -d %s: %s", im.dev, out)
	im.dev = ""
	require.NoError(t, os.Remove(im.file))
}

// ioState is the loop device's I/O counters and the requests in flight.
func (im *loopImage) ioState(t *testing.T) (stat string, inflight bool) {
	t.Helper()
	sys := filepath.Join("/sys/block", filepath.Base(im.dev))
	s, err := os.ReadFile(filepath.Join(sys, "stat"))
	require.NoError(t, err)
	f, err := os.ReadFile(filepath.Join(sys, "inflight"))
	require.NoError(t, err)
	for _, n := range strings.Fields(string(f)) {
		if n != "0" {
			inflight = true
		}
	}
	return string(s), inflight
}

// powerCut copies the image file to dst: what the disk holds when the
// power goes now. The processes that write the filesystem must be
// stopped; the kernel may still finish a sync one of them had started,
// so the copy is taken while no request is in flight and taken again if
// the device's counters moved during it.
func (im *loopImage) powerCut(t *testing.T, dst string) {
	t.Helper()
	for try := 0; ; try++ {
		require.Less(t, try, 100, "the loop device %s never stayed idle for a copy", im.dev)
		var before string
		require.Eventually(t, func() bool {
			var busy bool
			before, busy = im.ioState(t)
			return !busy
		}, 30*time.Second, time.Millisecond, "requests in flight on %s", im.dev)
		copySparse(t, im.file, dst)
		if after, busy := im.ioState(t); after == before && !busy {
			return
		}
	}
}

// copySparse copies src to dst, its data only: the holes of src stay
// holes.
func copySparse(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	fi, err := in.Stat()
	require.NoError(t, err)
	out, err := os.Create(dst)
	require.NoError(t, err)
	defer out.Close()
	fd := int(in.Fd())
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		require.NoError(t, err)
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		require.NoError(t, err)
		_, err = io.Copy(io.NewOffsetWriter(out, data), io.NewSectionReader(in, data, hole-data))
		require.NoError(t, err)
		off = hole
	}
	require.NoError(t, out.Truncate(fi.Size()))
	require.NoError(t, out.Close())
}

// procInfo is a process as /proc tells it.
type procInfo struct {
	pid, ppid, pgid int
}

// processes lists every process of the machine.
func processes() []procInfo {
	ents, _ := os.ReadDir("/proc")
	var ps []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// procStat returns the fields of /proc/PID/stat (or of a task's stat)
// after the command name, the first being the state.
func procStat(path string) ([]string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(string(b[i+1:]))
	return f, len(f) >= 3
}

func readProc(pid int) (procInfo, bool) {
	f, ok := procStat(fmt.Sprintf("/proc/%d/stat", pid))
	if !ok {
		return procInfo{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgid, _ := strconv.Atoi(f[2])
	return procInfo{pid, ppid, pgid}, true
}

// groupTree is the processes of group pgid and all their descendants,
// whatever group these are in (an exec command runs in its own).
func groupTree(pgid int) []int {
	ps := processes()
	children := map[int][]int{}
	var todo []int
	for _, p := range ps {
		children[p.ppid] = append(children[p.ppid], p.pid)
		if p.pgid == pgid {
			todo = append(todo, p.pid)
		}
	}
	seen := map[int]bool{}
	var out []int
	for len(todo) > 0 {
		pid := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		out = append(out, pid)
		todo = append(todo, children[pid]...)
	}
	return out
}

// stopped reports whether every thread of pid is stopped, or the process
// is gone or a zombie: it can do nothing more. A thread that waits in
// vfork for its child to exec counts as stopped once the child is: Go
// starts commands with vfork, and a child stopped before its exec keeps
// its parent's thread in the kernel (state D, in kernel_clone), where a
// stop signal cannot reach it; it can only return to be stopped.
func stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true // gone
	}
	for _, task := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s", pid, task.Name())
		f, ok := procStat(dir + "/stat")
		if !ok {
			continue
		}
		switch f[0] {
		case "T", "t", "Z", "X":
		case "D":
			wchan, _ := os.ReadFile(dir + "/wchan")
			if w := string(wchan); w != "kernel_clone" && w != "wait_for_vfork_done" {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// stopGroup SIGSTOPs the process group pgid at once, then every
// descendant of its members in another group, and waits until none of
// them can run.
func stopGroup(t *testing.T, pgid int) {
	t.Helper()
	_ = syscall.Kill(-pgid, syscall.SIGSTOP)
	require.Eventually(t, func() bool {
		all := true
		for _, pid := range groupTree(pgid) {
			if !stopped(pid) {
				_ = syscall.Kill(pid, syscall.SIGSTOP)
				all = false
			}
		}
		return all
	}, 30*time.Second, time.Millisecond, "processes of group %d would not stop", pgid)
}

// killGroup SIGKILLs the process group pgid and every descendant of its
// members, stopped as they are.
func killGroup(pgid int) {
	pids := groupTree(pgid)
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
