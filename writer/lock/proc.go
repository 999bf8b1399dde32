package lock

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// processAlive reports whether the process pid of this host, started at
// start (0: unknown), still exists: a pid reused by a later process is not
// the one that wrote an identity.
func processAlive(pid int, start uint64) bool {
	if pid <= 0 || errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return false
	}
	if start == 0 {
		return true
	}
	now, err := startTicks(pid)
	return err != nil || now == start // cannot tell: alive
}

// startTicks is when process pid started, in clock ticks after boot
// (/proc/<pid>/stat field 22; Linux only). A missing process is an
// fs.ErrNotExist.
func startTicks(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses, so
	// count from the last ')'; state is field 3.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 22-2 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	return strconv.ParseUint(fields[22-3], 10, 64)
}

// selfStart is this process's start time, for its identity.
var selfStart = sync.OnceValue(func() uint64 {
	start, _ := startTicks(os.Getpid())
	return start
})
