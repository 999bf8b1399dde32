package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// scribeBin is the binary under test, built once by TestMain beside
// scribedBin, the daemon's binary it hands serve to (with -race
// when the tests run with it, so the daemon's races are caught too) and
// with -tags scribefault, so that the crash tests can inject faults
// through the daemon's environment (writer/fault.go).
var (
	scribeBin  string
	scribedBin string
	raceBuild  bool
)

// faultTag is the build tag that compiles the fault-injection hooks in.
const faultTag = "scribefault"

func TestMain(m *testing.M) {
	if mode := os.Getenv("SCRIBE_TEST_HELPER"); mode != "" {
		os.Exit(runHelper(mode))
	}
	dir, err := os.MkdirTemp("", "scribe-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scribeBin, scribedBin = filepath.Join(dir, "scribe"), filepath.Join(dir, "scribed")
	args := []string{"build", "-tags", faultTag, "-o", dir + string(filepath.Separator)}
	if raceBuild {
		args = append(args, "-race")
		// A race-enabled binary sleeps 1 s at exit by default; the tests
		// run thousands of them. Races still fail them (exit 66).
		os.Setenv("GORACE", "atexit_sleep_ms=0 exitcode=66 "+os.Getenv("GORACE"))
	}
	build := exec.Command("go", append(args, "github.com/scribehq/scribe/cmd/scribe", "github.com/scribehq/scribe/cmd/scribed")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build scribe:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is a finished scribe process.
type result struct {
	code     int
	stdout   string
	stderr   string
	duration time.Duration
}

// scribe runs the binary to completion.
func scribe(t testing.TB, stdin string, args ...string) result {
	t.Helper()
	return runProgram(t, scribeBin, stdin, args...)
}

// runProgram runs a program built by the tests to completion, without the
// caller's scribe environment.
func runProgram(t testing.TB, bin, stdin string, args ...string) result {
	t.Helper()
	return runWith(t, bin, nil, strings.NewReader(stdin), args...)
}

// runWith is runProgram with more environment (after the caller's SCRIBE_
// variables are cleared) and any stdin (nil: none). A process killed by a
// signal exits 128+signal, as a shell reports it.
func runWith(t testing.TB, bin string, env []string, stdin io.Reader, args ...string) result {
	t.Helper()
	r, err := runProcess(bin, env, stdin, args...)
	require.NoError(t, err, "run %s %v", bin, args)
	return r
}

// runProcess is runWith without a testing.TB, for goroutines: the error
// says the program could not be run at all.
func runProcess(bin string, env []string, stdin io.Reader, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), append([]string{"SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_CRASH_AT="}, env...)...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), duration: time.Since(start)}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code, err = ee.ExitCode(), nil
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.code = 128 + int(ws.Signal())
		}
	}
	return r, err
}

// newStore makes an empty store folder.
func newStore(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	require.NoError(t, os.Mkdir(dir, 0o755))
	return dir
}

// daemon is a running `scribe serve`, or another long-running process
// (startProcess).
type daemon struct {
	cmd    *exec.Cmd
	store  string
	log    *syncBuffer
	exited chan struct{}
	err    error
	killed bool
}

// startDaemon starts `scribe serve` on a store and waits until it serves:
// its discovery file is written and names its pid.
func startDaemon(t testing.TB, store string, extra ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, store, nil, extra...)
}

// startDaemonEnv is startDaemon with extra environment (fault hooks).
func startDaemonEnv(t testing.TB, store string, env []string, extra ...string) *daemon {
	t.Helper()
	d := spawnDaemon(t, store, env, extra...)
	d.waitServing(t)
	return d
}

// waitServing waits until a started `scribe serve` serves d.store: its
// discovery file is written and names its pid.
func (d *daemon) waitServing(t testing.TB) {
	t.Helper()
	require.Eventually(t, func() bool {
		select {
		case <-d.exited:
			return true
		default:
		}
		disc, err := queue.ReadDiscovery(d.store)
		return err == nil && disc.PID == d.cmd.Process.Pid
	}, 30*time.Second, 10*time.Millisecond)
	select {
	case <-d.exited:
		t.Fatalf("scribe serve exited at start: %v\n%s", d.err, d.log.String())
	default:
	}
}

// spawnDaemon starts `scribe serve` without waiting for it to serve (it
// may die at once, by a fault hook).
func spawnDaemon(t testing.TB, store string, env []string, extra ...string) *daemon {
	t.Helper()
	cmd := exec.Command(scribeBin, append([]string{"serve", "--store", store, "--log-level", "debug"}, extra...)...)
	cmd.Env = append(os.Environ(), env...)
	d := startProcess(t, cmd)
	d.store = store
	return d
}

// startProcess starts cmd, a long-running process (a daemon, a cluster
// node, a nats-server), its output captured, without waiting for it to
// be ready. It is stopped at cleanup: SIGTERM, and an exit 0 wanted.
func startProcess(t testing.TB, cmd *exec.Cmd) *daemon {
	t.Helper()
	d := &daemon{cmd: cmd, log: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.log, d.log
	require.NoError(t, cmd.Start())
	go func() { d.err = cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() { d.stop(t) })
	return d
}

// kill SIGKILLs the daemon and waits for it to be gone.
func (d *daemon) kill(t testing.TB) {
	t.Helper()
	d.killed = true
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// stop sends SIGTERM and waits for a clean exit; it dumps the log on
// failure.
func (d *daemon) stop(t testing.TB) {
	t.Helper()
	select {
	case <-d.exited:
		if !d.killed && d.err != nil {
			t.Errorf("daemon exited on its own: %v; log:\n%s", d.err, d.log.String())
		}
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		t.Errorf("daemon did not stop on SIGTERM within 30s")
	}
	if d.err != nil {
		t.Errorf("daemon exited with %v after SIGTERM, want 0; log:\n%s", d.err, d.log.String())
	} else if t.Failed() {
		t.Logf("daemon log:\n%s", d.log.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a process's output and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// readFile returns a store file's content, "" if it does not exist.
func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	require.NoError(t, err)
	return string(b)
}
