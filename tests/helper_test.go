package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/lock"
)

// runHelper is the test binary acting as another process that uses the
// writer library directly (SCRIBE_TEST_HELPER=mode:args). It returns the
// exit code.
func runHelper(spec string) int {
	mode, arg, _ := strings.Cut(spec, ":")
	switch mode {
	case "race": // race:<store>:<trace>:<n> — acquire n times, tracing enter/leave
		parts := strings.Split(arg, ":")
		n, _ := strconv.Atoi(parts[2])
		return helperRace(parts[0], parts[1], n)
	case "panic": // panic:<store> — panic while holding the store, recover, then idle
		func() {
			defer func() { _ = recover() }()
			h, err := writer.Take(context.Background(), arg, writer.Options{Command: "panicking helper"})
			if err != nil {
				return
			}
			defer h.Unlock()
			panic("boom")
		}()
		fmt.Println("recovered")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // stay alive until the test is done
		return 0
	case "measure": // measure:<file> BIN ARGS... — run BIN, write its peak RSS to file
		return helperMeasure(arg, os.Args[1:])
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

// helperMeasure runs argv on the helper's stdin, stdout and stderr,
// writes the most memory it took (its max RSS, in bytes) to file, and
// exits as it did (128+signal if a signal killed it). Linux counts in a
// child's max RSS that of the process that started it, up to its exec
// (Go starts commands with vfork): started by this small process, not
// by the test binary, which the parallel tests make big, the figure is
// the program's own.
func helperMeasure(file string, argv []string) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "SCRIBE_TEST_HELPER=") })
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, err)
		return 127
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		if err := os.WriteFile(file, []byte(strconv.FormatInt(ru.Maxrss<<10, 10)), 0o600); err != nil { // KiB on Linux
			fmt.Fprintln(os.Stderr, err)
			return 127
		}
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// helperRace takes the store lock n times, as fast as it can, appending
// "pid enter i inode" and "pid leave i" to the trace (O_APPEND: each line
// lands whole), so that the test can look for any overlap.
func helperRace(store, trace string, n int) int {
	f, err := os.OpenFile(trace, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	pid := os.Getpid()
	lockPath := lock.DefaultPath(store)
	for i := 0; i < n; {
		h, err := writer.Take(context.Background(), store, writer.Options{Command: "race helper"})
		if errors.Is(err, lock.ErrLocked) {
			continue // contention is the point: try again at once
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		var st syscall.Stat_t
		_ = syscall.Stat(lockPath, &st)
		fmt.Fprintf(f, "%d enter %d %d\n", pid, i, st.Ino)
		fmt.Fprintf(f, "%d leave %d\n", pid, i)
		if err := h.Unlock(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		i++
	}
	return 0
}
