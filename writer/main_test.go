package writer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/lock"
)

// Helper processes play "another process" for the lock tests: a flock
// taken in this process is nested by the hold registry instead of being
// refused, so contention needs a real second process. A helper is this
// test binary re-executed with envHelper set; TestMain runs the helper
// instead of the tests.
const (
	envHelper  = "SCRIBE_TEST_HELPER"  // the mode: helperHold or helperTry
	envStore   = "SCRIBE_TEST_STORE"   // the store
	envLock    = "SCRIBE_TEST_LOCK"    // LockOptions.LockPath
	envMode    = "SCRIBE_TEST_MODE"    // LockOptions.Mode
	envCommand = "SCRIBE_TEST_COMMAND" // LockOptions.Command
	envSession = "SCRIBE_TEST_SESSION" // "1": also open a Session under the hold
	envAppend  = "SCRIBE_TEST_APPEND"  // with a session: append a line to this store file
	envCycles  = "SCRIBE_TEST_CYCLES"  // lock/unlock cycles, with GC, before the reported one
)

// Helper modes.
const (
	// helperHold takes the lock, reports, holds it until stdin reaches
	// EOF, releases it and exits 0.
	helperHold = "hold"
	// helperTry takes the lock, reports and releases it at once.
	helperTry = "try"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envHelper); mode != "" {
		os.Exit(runHelper(mode))
	}
	os.Exit(m.Run())
}

// report is what a helper prints on its first line, as JSON.
type report struct {
	PID    int
	OK     bool          // it holds the lock (and the session, if asked)
	Locked bool          // the attempt failed with ErrLocked
	Holder *queue.Holder // the LockedError's holder
	Err    string        // any error
	FD     uintptr       // the hold's descriptor: 3 when adopted from the parent
	// CloseOnExec is whether the hold's descriptor is close-on-exec.
	CloseOnExec bool
	Epoch       uint64 // the session's epoch
	// AppliedEpoch is the epoch recorded in the outcome of the append.
	AppliedEpoch uint64
}

func runHelper(mode string) int {
	rep := report{PID: os.Getpid()}
	fail := func(err error) int {
		rep.Err = err.Error()
		var le *lock.LockedError
		if errors.As(err, &le) {
			rep.Locked, rep.Holder = true, le.Holder
		}
		return printReport(rep)
	}
	store := os.Getenv(envStore)
	o := lock.Options{LockPath: os.Getenv(envLock), Mode: queue.Mode(os.Getenv(envMode)), Command: os.Getenv(envCommand)}
	so := writer.Options{LockPath: o.LockPath, Mode: o.Mode, Command: o.Command}
	withSession := os.Getenv(envSession) == "1"
	cycles, _ := strconv.Atoi(os.Getenv(envCycles))
	for range cycles {
		h, err := lock.Acquire(context.Background(), store, o)
		if err != nil {
			return fail(fmt.Errorf("cycle: %w", err))
		}
		if withSession {
			s, err := writer.Open(context.Background(), store, so)
			if err != nil {
				return fail(fmt.Errorf("cycle: %w", err))
			}
			if err := s.Close(); err != nil {
				return fail(err)
			}
		}
		if err := h.Unlock(); err != nil {
			return fail(err)
		}
		// Let the collector finalize whatever the released hold dropped.
		settleGC()
	}

	h, err := lock.Acquire(context.Background(), store, o)
	if err != nil {
		return fail(err)
	}
	defer h.Unlock()
	rep.FD = h.File().Fd()
	flags, err := unix.FcntlInt(rep.FD, unix.F_GETFD, 0)
	if err != nil {
		return fail(err)
	}
	rep.CloseOnExec = flags&unix.FD_CLOEXEC != 0
	if withSession {
		s, err := writer.Open(context.Background(), store, so)
		if err != nil {
			return fail(err)
		}
		defer s.Close()
		rep.Epoch = s.Epoch()
		if p := os.Getenv(envAppend); p != "" {
			job := &queue.Job{V: queue.Version, ID: fmt.Sprintf("child-%d", os.Getpid()), Store: s.StoreID(),
				Ops: []queue.Op{{Kind: queue.OpAppend, Path: p, Data: []byte("child\n")}}}
			res, err := s.Apply([]writer.Entry{{Job: job}})
			if err != nil {
				return fail(err)
			}
			if res[0].Outcome.Status != queue.StatusApplied {
				return fail(fmt.Errorf("append rejected: %s", res[0].Outcome.Detail))
			}
			rep.AppliedEpoch = res[0].Outcome.Epoch
		}
	}
	rep.OK = true
	if code := printReport(rep); code != 0 || mode != helperHold {
		return code
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

func printReport(r report) int {
	b, err := json.Marshal(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%s\n", b)
	return 0
}

// settleGC runs the collector until finalizers queued by earlier cycles
// have had their turn: each round waits for a fresh object's finalizer.
func settleGC() {
	for range 3 {
		done := make(chan struct{})
		runtime.SetFinalizer(new([64]byte), func(*[64]byte) { close(done) })
		runtime.GC()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			return
		}
	}
}

// helper is a running helper process.
type helper struct {
	// Report is the helper's first line.
	Report report
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *bytes.Buffer
	exited chan error
	stop   sync.Once
}

// helperOpt adjusts a helper's command before it starts.
type helperOpt func(*exec.Cmd)

// withEnv adds environment variables ("K=V") to a helper.
func withEnv(kv ...string) helperOpt {
	return func(c *exec.Cmd) { c.Env = append(c.Env, kv...) }
}

// withFiles passes files to a helper as descriptors 3, 4, ...
func withFiles(f ...*os.File) helperOpt {
	return func(c *exec.Cmd) { c.ExtraFiles = append(c.ExtraFiles, f...) }
}

// withSession makes a helper open a Session under its hold.
func withSession() helperOpt { return withEnv(envSession + "=1") }

// helperTimeout bounds how long a test waits for a helper, so that a
// helper stuck on a bug fails the test instead of hanging it.
const helperTimeout = 20 * time.Second

// startHelper starts a helper in mode on store and reads its report. It
// is stopped (stdin closed, exit awaited) at cleanup if not before.
func startHelper(tb testing.TB, mode, store string, o lock.Options, opts ...helperOpt) *helper {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		// Never inherit a hold from whatever runs the tests.
		if !strings.HasPrefix(kv, "SCRIBE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		envHelper+"="+mode, envStore+"="+store, envLock+"="+o.LockPath,
		envMode+"="+string(o.Mode), envCommand+"="+o.Command,
		// A race-enabled binary sleeps 1 s at exit by default; races still
		// fail the helper (exit 66).
		"GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0 exitcode=66",
	)
	for _, opt := range opts {
		opt(cmd)
	}
	stdin, err := cmd.StdinPipe()
	require.NoError(tb, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(tb, err)
	h := &helper{cmd: cmd, stdin: stdin, stderr: &bytes.Buffer{}, exited: make(chan error, 1)}
	cmd.Stderr = h.stderr
	require.NoError(tb, cmd.Start())
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, stdout)
		h.exited <- cmd.Wait()
	}()
	tb.Cleanup(func() { h.Stop(tb) })
	select {
	case line := <-lines:
		require.NoError(tb, json.Unmarshal([]byte(line), &h.Report), "helper said %q; stderr: %s", line, h.stderr)
	case <-time.After(helperTimeout):
		_ = cmd.Process.Kill()
		require.FailNow(tb, "helper did not report", "stderr: %s", h.stderr)
	}
	return h
}

// Stop closes the helper's stdin (a holder then releases) and waits for
// it to exit 0.
func (h *helper) Stop(tb testing.TB) {
	tb.Helper()
	h.stop.Do(func() {
		_ = h.stdin.Close()
		select {
		case err := <-h.exited:
			assert.NoError(tb, err, "helper %d; stderr: %s", h.cmd.Process.Pid, h.stderr)
		case <-time.After(helperTimeout):
			_ = h.cmd.Process.Kill()
			assert.Fail(tb, "helper did not exit", "stderr: %s", h.stderr)
		}
	})
}

// holdInChild has a helper process take the store lock and hold it until
// Stop (or the end of the test).
func holdInChild(tb testing.TB, store string, o lock.Options, opts ...helperOpt) *helper {
	tb.Helper()
	h := startHelper(tb, helperHold, store, o, opts...)
	require.True(tb, h.Report.OK, "the helper could not lock: %s", h.Report.Err)
	return h
}

// tryInChild has a helper process try the store lock once, release it
// and exit, and returns what it got.
func tryInChild(tb testing.TB, store string, o lock.Options, opts ...helperOpt) report {
	tb.Helper()
	h := startHelper(tb, helperTry, store, o, opts...)
	h.Stop(tb)
	return h.Report
}

// assertChildLocked checks that another process is refused the store lock
// with ErrLocked, and returns the holder it was told about.
func assertChildLocked(tb testing.TB, store string, o lock.Options, opts ...helperOpt) *queue.Holder {
	tb.Helper()
	r := tryInChild(tb, store, o, opts...)
	assert.False(tb, r.OK, "another process got the lock")
	assert.True(tb, r.Locked, "another process got %q, want ErrLocked", r.Err)
	return r.Holder
}

// assertChildGets checks that another process can take the store lock.
func assertChildGets(tb testing.TB, store string, o lock.Options, opts ...helperOpt) report {
	tb.Helper()
	r := tryInChild(tb, store, o, opts...)
	assert.True(tb, r.OK, "another process could not lock: %s", r.Err)
	return r
}
