package exec

import (
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// commandBaseEnv are the variables of the daemon's own environment that
// an exec command gets, with every LC_* variable: what a program needs to
// find its files and speak the user's language, and nothing of what the
// daemon was given to reach its queue (credentials, routes, scribe's own
// settings). The command's Env and scribe's variables come after them.
var commandBaseEnv = []string{"HOME", "LANG", "LANGUAGE", "LOGNAME", "PATH", "SHELL", "TMPDIR", "TZ", "USER"}

// commandEnv is an exec command's environment before scribe's own
// variables: of environ (the daemon's), commandBaseEnv and LC_*; then
// env, the command's own, which may override them.
func commandEnv(environ, env []string) []string {
	out := make([]string, 0, len(commandBaseEnv)+len(env)+8)
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if ok && (slices.Contains(commandBaseEnv, k) || strings.HasPrefix(k, "LC_")) {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// inheritedFDs lists this process's descriptors above 2 that are not
// close-on-exec. Go opens every file close-on-exec, so these came from
// outside: from whoever started the process (a shell's `exec 3>&1`, a
// supervisor), or from code that cleared the flag on purpose. os/exec
// hands a child only the files it is given, but every descriptor without
// the flag goes along too.
func inheritedFDs() []int {
	names, err := dirNames("/proc/self/fd")
	if err != nil {
		names, err = dirNames("/dev/fd")
	}
	var fds []int
	if err != nil { // no listing: try every number a descriptor may have
		var lim unix.Rlimit
		n := 1024
		if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
			n = int(min(uint64(lim.Cur), 1<<16))
		}
		for fd := 3; fd < n; fd++ {
			fds = append(fds, fd)
		}
	} else {
		for _, name := range names {
			if fd, err := strconv.Atoi(name); err == nil && fd > 2 {
				fds = append(fds, fd)
			}
		}
	}
	// The listing's own descriptor is closed by now: F_GETFD fails on it.
	return slices.DeleteFunc(fds, func(fd int) bool {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		return err != nil || flags&unix.FD_CLOEXEC != 0
	})
}

// CloseInherited closes every descriptor above 2 that this process
// inherited (see inheritedFDs) and returns their numbers. A daemon calls
// it first thing: it must hold nothing of its starter's, such as the pipe
// a hook's caller reads to EOF, for its whole life.
//
// It is safe for a lock: closing one descriptor of an open file
// description never releases a flock held through another (the kernel
// frees it when the last one closes), so a parent's lock handed down
// stays the parent's. close(2) does drop the caller's own POSIX record
// locks on the file, which is why this comes before the process takes
// any lock.
func CloseInherited() []int {
	fds := inheritedFDs()
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
	return fds
}

// keepInheritedFromChildren marks every descriptor this process inherited
// close-on-exec, so that an exec command gets none of them: only 0-2 and
// the store lock it is handed. Go's own are close-on-exec already.
func keepInheritedFromChildren() {
	for _, fd := range inheritedFDs() {
		unix.CloseOnExec(fd)
	}
}

// dirNames lists the names in dir.
func dirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, err
}
