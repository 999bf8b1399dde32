package tests

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// cmdPackages are the programs under test, each built once by TestMain
// into binDir under its package's last element (cmd/scribe → scribe).
var cmdPackages = []string{"github.com/scribehq/scribe/cmd/scribe", "github.com/scribehq/scribe/cmd/scribed"}

// binDir holds the binaries TestMain built.
var binDir string

// testParallel is how many tests of this package run at once unless
// -parallel says otherwise. Its default, GOMAXPROCS, leaves a 2-core
// machine mostly idle: the tests spend their time waiting for processes
// they started, fsyncs and timers. The heavy ones also take a slot of
// heavySlots. Tests that time processes against a bound stay serial:
// they run first, alone, before the parallel ones start.
const testParallel = 6

func TestMain(m *testing.M) {
	if mode := os.Getenv("SCRIBE_TEST_HELPER"); mode != "" {
		os.Exit(runHelper(mode))
	}
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", strconv.Itoa(testParallel))
	}
	dir, err := os.MkdirTemp("", "scribe-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	if raceBuild {
		// A race-enabled binary sleeps 1 s at exit by default; the tests
		// run thousands of them. Races still fail them (exit 66).
		os.Setenv("GORACE", "atexit_sleep_ms=0 exitcode=66 "+os.Getenv("GORACE"))
	}
	if err := buildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	scribeBin, scribedBin = filepath.Join(dir, "scribe"), filepath.Join(dir, "scribed")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildBinaries builds every package of cmdPackages into dir with the
// fault tag, in one go build.
func buildBinaries(dir string) error {
	return goBuild(dir+string(filepath.Separator), true, cmdPackages...)
}

// goBuild builds pkgs into out (a folder if it ends in a separator),
// with -race when the tests run with it and with the fault tag if tagged.
// One go build of several packages compiles what they share once.
func goBuild(out string, tagged bool, pkgs ...string) error {
	args := []string{"build", "-o", out}
	if tagged {
		args = append(args, "-tags", faultTag)
	}
	if raceBuild {
		args = append(args, "-race")
	}
	b, err := exec.Command("go", append(args, pkgs...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("build %s: %w\n%s", strings.Join(pkgs, " "), err, b)
	}
	return nil
}

// plainBin builds cmd/scribe once without the fault tag, for the tests
// that need a user's build. Its other flags are scribeBin's, so that go's
// cache serves every package the tag does not change.
var plainBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "scribe-plain")
	return bin, goBuild(bin, false, "github.com/scribehq/scribe/cmd/scribe")
})

// heavySlots bounds how many heavy tests (many processes at once, power
// cuts, benches) run together: two, so that beside the others they leave
// the machine responsive enough for the deadlines the tests and the
// daemons keep.
var heavySlots = make(chan struct{}, 2)

// heavy takes a slot of heavySlots until t and its subtests end. Call it
// after t.Parallel: the test waits in the parallel phase, not the serial
// one.
func heavy(t testing.TB) {
	t.Helper()
	heavySlots <- struct{}{}
	t.Cleanup(func() { <-heavySlots })
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
	return runCmd(cmd)
}

// runCmd runs a prepared command to completion, its output captured; the
// error says it could not be run at all.
func runCmd(cmd *exec.Cmd) (result, error) {
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
	log    *processLog
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
	d := &daemon{cmd: cmd, log: newProcessLog(t), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.log.f, d.log.f
	require.NoError(t, cmd.Start())
	go func() { d.err = cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() { d.stop(t) })
	return d
}

// kill SIGKILLs the daemon and waits for it to be gone.
// freeze stops the daemon with SIGSTOP, until the test ends: it holds
// its locks and its port, and answers nothing.
func (d *daemon) freeze(t testing.TB) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = d.cmd.Process.Signal(syscall.SIGCONT) })
}

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

// processLog is a process's output, in a file the process writes itself:
// a line is there once the process has written it. Through a pipe and a
// goroutine that copies it, a test that saw what a line announces could
// still miss the line.
type processLog struct{ f *os.File }

func newProcessLog(t testing.TB) *processLog {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "output-")
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return &processLog{f: f}
}

// String is what the process wrote so far.
func (l *processLog) String() string {
	b, _ := os.ReadFile(l.f.Name())
	return string(b)
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
