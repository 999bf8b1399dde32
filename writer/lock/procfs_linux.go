package lock

import (
	"bufio"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockHolders lists the pids of the processes that hold a lock (flock or
// POSIX; not those waiting for one) on the file at path, as /proc/locks
// shows them, without touching the lock: a probe that took the lock, even
// shared and for an instant, could make a tool's own non-blocking attempt
// fail. ok is false where /proc/locks cannot be read. A file that does
// not exist has no holders.
//
// A pid is 0 for a holder in a pid namespace this process does not see
// (on some kernels such a holder is not listed at all: an empty list is
// not proof that the file is free), and -1 for an open file description
// lock. The kernel credits a flock to
// the process that took it; where that one no longer has it (it is gone,
// a zombie not yet reaped, its pid taken by another process, or it closed
// its descriptor), the lock is held by the processes that inherited its
// descriptor (a daemon SIGKILLed while its command runs), and those are
// listed instead, where this process may read their descriptors.
func LockHolders(path string) (pids []int, ok bool) {
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return nil, false
	}
	defer locks.Close()
	m := newMounts()
	k, err := m.keyOf(path)
	if err != nil {
		return nil, true // no file: nobody holds it
	}
	// "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters have "->".
	sc := bufio.NewScanner(locks)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] == "->" {
			continue
		}
		dev, ino, ok := parseLockID(fields[5])
		if !ok || ino != k.ino || dev != k.lockDev && dev != k.statDev {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil || slices.Contains(pids, pid) {
			continue
		}
		if dev != k.statDev && m.holdsOther(pid, k) {
			continue
		}
		if pid > 0 && !pidHolds(pid, fields[1:], k.ino) {
			if heirs := inheritors(fields[1:], k.ino); len(heirs) > 0 {
				for _, h := range heirs {
					if !slices.Contains(pids, h) {
						pids = append(pids, h)
					}
				}
				continue
			}
		}
		pids = append(pids, pid)
	}
	if sc.Err() != nil {
		return nil, false
	}
	return pids, true
}

// lockKey is how /proc/locks may name a file. It prints the device of the
// file's superblock, which is not always the one stat shows: on btrfs
// stat shows each subvolume's own device, /proc/locks the filesystem's,
// which /proc/self/mountinfo gives every mount of it. Both are looked for.
type lockKey struct {
	ino     uint64
	statDev uint64 // what stat says
	lockDev uint64 // the superblock's, by the mount the file is on; statDev if unknown
}

// mounts maps mount IDs to their superblock's device, from
// /proc/self/mountinfo, read once when first needed.
type mounts struct {
	read bool
	dev  map[uint64]uint64
}

func newMounts() *mounts { return &mounts{} }

// keyOf stats path (following symlinks, as a lock on it would).
func (m *mounts) keyOf(path string) (lockKey, error) {
	var sx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_INO|unix.STATX_MNT_ID, &sx)
	if errors.Is(err, unix.ENOSYS) { // a kernel before 4.11
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			return lockKey{}, err
		}
		return lockKey{ino: st.Ino, statDev: uint64(st.Dev), lockDev: uint64(st.Dev)}, nil
	}
	if err != nil {
		return lockKey{}, err
	}
	k := lockKey{ino: sx.Ino, statDev: unix.Mkdev(sx.Dev_major, sx.Dev_minor)}
	k.lockDev = k.statDev
	if sx.Mask&unix.STATX_MNT_ID != 0 { // since Linux 5.8
		if dev, ok := m.devOf(sx.Mnt_id); ok {
			k.lockDev = dev
		}
	}
	return k, nil
}

// devOf is the superblock device of mount id.
func (m *mounts) devOf(id uint64) (uint64, bool) {
	if !m.read {
		m.read = true
		m.dev = map[uint64]uint64{}
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			return 0, false
		}
		defer f.Close()
		// "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw"
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20) // mount options can be long (overlay's layers)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			id, err := strconv.ParseUint(fields[0], 10, 64)
			maj, min, ok := strings.Cut(fields[2], ":")
			if err != nil || !ok {
				continue
			}
			ma, err1 := strconv.ParseUint(maj, 10, 32)
			mi, err2 := strconv.ParseUint(min, 10, 32)
			if err1 == nil && err2 == nil {
				m.dev[id] = unix.Mkdev(uint32(ma), uint32(mi))
			}
		}
	}
	dev, ok := m.dev[id]
	return dev, ok
}

// holdsOther reports whether a lock line that names k's inode on k's
// superblock, but not by k's own device, is pid's lock on another file:
// on btrfs every subvolume numbers its inodes afresh, so files of two
// subvolumes can share one name in /proc/locks. It is only when pid has
// such another file open and not k's that the line is taken to be the
// other's; when it cannot tell (pid's descriptors are not readable, or
// pid handed its lock to a child and closed its own), the line counts:
// a lock wrongly seen makes a job wait, one missed makes it fail.
func (m *mounts) holdsOther(pid int, k lockKey) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	names, err := readDirNames(dir)
	if err != nil {
		return false
	}
	other := false
	for _, name := range names {
		var sx unix.Statx_t
		if unix.Statx(unix.AT_FDCWD, dir+name, 0, unix.STATX_INO|unix.STATX_MNT_ID, &sx) != nil || sx.Ino != k.ino {
			continue
		}
		if unix.Mkdev(sx.Dev_major, sx.Dev_minor) == k.statDev {
			return false // pid has k's file open: the lock may well be on it
		}
		if sx.Mask&unix.STATX_MNT_ID != 0 {
			if dev, ok := m.devOf(sx.Mnt_id); ok && dev == k.lockDev {
				other = true
			}
		}
	}
	return other
}

// pidHolds reports whether process pid has a descriptor that holds lock
// (as inheritors reads them), or may have: true where its descriptors
// cannot be read and it is not gone.
func pidHolds(pid int, lock []string, ino uint64) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	fds, err := readDirNames(dir + "fd")
	if err != nil {
		return !errors.Is(unix.Kill(pid, 0), unix.ESRCH)
	}
	for _, fd := range fds {
		var st unix.Stat_t
		if unix.Stat(dir+"fd/"+fd, &st) == nil && st.Ino == ino && fdinfoHolds(dir+"fdinfo/"+fd, lock) {
			return true
		}
	}
	return false
}

// inheritors lists the processes that hold the lock that /proc/locks
// describes by lock (a line's fields after its number) on inode ino
// through a descriptor: each has, among its descriptors of the file, one
// whose /proc/PID/fdinfo lists that lock. Processes whose descriptors
// this one may not read are not seen.
func inheritors(lock []string, ino uint64) []int {
	procs, err := readDirNames("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p)
		if err != nil {
			continue
		}
		dir := "/proc/" + p + "/"
		fds, err := readDirNames(dir + "fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			var st unix.Stat_t
			if unix.Stat(dir+"fd/"+fd, &st) != nil || st.Ino != ino {
				continue
			}
			if fdinfoHolds(dir+"fdinfo/"+fd, lock) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// fdinfoHolds reports whether the descriptor whose fdinfo file is path
// holds lock: a "lock:" line of it reads as lock after its number.
func fdinfoHolds(path string, lock []string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "lock:")
		if f := strings.Fields(rest); ok && len(f) > 1 && slices.Equal(f[1:], lock) {
			return true
		}
	}
	return false
}

// parseLockID parses /proc/locks' "MAJOR:MINOR:INODE", the device numbers
// in hex, the inode in decimal.
func parseLockID(s string) (dev, ino uint64, ok bool) {
	maj, rest, ok1 := strings.Cut(s, ":")
	min, inode, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	ma, err1 := strconv.ParseUint(maj, 16, 32)
	mi, err2 := strconv.ParseUint(min, 16, 32)
	ino, err3 := strconv.ParseUint(inode, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, false
	}
	return unix.Mkdev(uint32(ma), uint32(mi)), ino, true
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
