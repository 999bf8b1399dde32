package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/scribehq/scribe/tests/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bgProc is a process that keeps running while the test talks to it.
type bgProc struct {
	cmd    *exec.Cmd
	lines  *bufio.Scanner
	stdin  interface{ Close() error }
	exited chan struct{}
	err    error
}

// background starts a process in its own process group; its stdout lines
// are read with expectLine. It is killed, with its group, at cleanup.
func background(t *testing.T, env []string, name string, args ...string) *bgProc {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	var stderr testkit.SyncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	p := &bgProc{cmd: cmd, lines: bufio.NewScanner(stdout), stdin: stdin, exited: make(chan struct{})}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		if t.Failed() {
			t.Logf("%s %v stderr:\n%s", name, args, stderr.String())
		}
	})
	// Wait closes stdout once the process has exited: tests read the lines
	// they expect while it is still running (blocked on stdin or sleeping).
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p
}

// expectLine reads the process's next stdout line.
func (p *bgProc) expectLine(t *testing.T, want string) {
	t.Helper()
	require.True(t, p.lines.Scan(), "process ended before printing %q", want)
	require.Equal(t, want, p.lines.Text())
}

// holdStore holds a store's lock with `scribe lock` until release is called.
func holdStore(t *testing.T, args ...string) (release func() int) {
	t.Helper()
	p := background(t, nil, scribeBin, append(append([]string{"lock"}, args...), "--", "sh", "-c", "echo held; read _ || true")...)
	p.expectLine(t, "held")
	return func() int {
		p.stdin.Close()
		<-p.exited
		return p.cmd.ProcessState.ExitCode()
	}
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	return st.Ino
}

// A holder whose critical section lasts ten times
// every lock-related threshold the daemon is given is never robbed: neither
// a waiting direct writer nor the daemon's writer enters before it leaves.
func TestLongHolderIsNeverRobbed(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	const threshold = 200 * time.Millisecond
	startDaemon(t, store, "--idle-release", threshold.String(), "--warn-after", threshold.String(),
		"--hand-off-grace", threshold.String())
	trace := filepath.Join(store, "trace.txt")
	hold := 10 * threshold

	a := background(t, nil, scribeBin, "lock", "--store", store, "--", "sh", "-c",
		fmt.Sprintf("echo 'A enter' >> %s; echo in; sleep %g; echo 'A leave' >> %s", trace, hold.Seconds(), trace))
	a.expectLine(t, "in")
	// While A holds: queued jobs and a waiting direct writer.
	for i := range 5 {
		r := scribe(t, "", "submit", "--store", store, "append", "trace.txt", fmt.Sprintf("D %d\n", i))
		require.Equal(t, 0, r.code, r.stderr)
	}
	b := scribe(t, "", "lock", "--store", store, "--wait", "30s", "--", "sh", "-c", fmt.Sprintf("echo 'B enter' >> %s; echo 'B leave' >> %s", trace, trace))
	require.Equal(t, 0, b.code, b.stderr)
	<-a.exited
	require.NoError(t, a.err)
	require.Eventually(t, func() bool { return strings.Count(readFile(t, trace), "D ") == 5 }, 20*time.Second, 20*time.Millisecond)

	lines := strings.Split(strings.TrimSpace(readFile(t, trace)), "\n")
	require.Equal(t, "A enter", lines[0], "trace: %q", lines)
	require.Equal(t, "A leave", lines[1], "nothing entered while A held the store: %q", lines)
	assert.Len(t, lines, 2+2+5)
	bEnter, bLeave := slices.Index(lines, "B enter"), slices.Index(lines, "B leave")
	assert.Equal(t, bEnter+1, bLeave, "nothing entered while B held the store: %q", lines)
}

// A holder killed with SIGKILL mid-section frees the lock at
// once; nothing removes or recreates the lock file.
func TestKilledHolderFreesTheLock(t *testing.T) {
	// Not parallel: it times processes (the next lock within 2 s), and the
	// other tests' load would time the machine instead.
	store := newStore(t)
	lockFile := filepath.Join(store, ".scribe", "lock")
	p := background(t, nil, scribeBin, "lock", "--store", store, "--", "sh", "-c", "echo in; sleep 60")
	p.expectLine(t, "in")
	ino := inodeOf(t, lockFile)
	r := scribe(t, "", "lock", "--store", store, "--", "true")
	require.Equal(t, 75, r.code, "held")

	require.NoError(t, syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)) // scribe lock and its command
	<-p.exited
	r = scribe(t, "", "lock", "--store", store, "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Less(t, r.duration, 2*time.Second)
	assert.Equal(t, ino, inodeOf(t, lockFile), "the lock file is the same file")
}

// Two processes racing for a free store lock 1000 times never
// both win, and the lock file's inode never changes.
func TestRacingAcquirersNeverBothWin(t *testing.T) {
	t.Parallel()
	heavy(t)
	store := newStore(t)
	trace := filepath.Join(t.TempDir(), "trace")
	const n = 500 // per process: 1000 acquisitions in all
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), fmt.Sprintf("SCRIBE_TEST_HELPER=race:%s:%s:%d", store, trace, n))
			out, err := cmd.CombinedOutput()
			assert.NoError(t, err, "%s", out)
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(readFile(t, trace)), "\n")
	require.Len(t, lines, 2*2*n)
	inodes := map[string]bool{}
	inside := ""
	for i, l := range lines {
		f := strings.Fields(l)
		switch f[1] {
		case "enter":
			require.Empty(t, inside, "line %d: %s entered while %s was inside", i, f[0], inside)
			inside = f[0]
			inodes[f[3]] = true
		case "leave":
			require.Equal(t, inside, f[0], "line %d", i)
			inside = ""
		}
	}
	assert.Len(t, inodes, 1, "the lock file was never replaced")
}

// Nested holds — a `scribe lock` child and grandchild join the
// parent's hold at once; any unrelated process stays excluded meanwhile.
func TestNestedHoldsThroughChildren(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	script := fmt.Sprintf(`
%[1]s lock --store %[2]s -- %[1]s lock --store %[2]s -- true; echo "nested lock $?"
%[1]s submit --store %[2]s --route direct --wait append f.txt child >/dev/null; echo "direct submit $?"
SCRIBE_LOCK_ID= %[1]s lock --store %[2]s -- true 2>/dev/null; echo "unrelated $?"
echo done; read _ || true`, scribeBin, store)
	p := background(t, nil, scribeBin, "lock", "--store", store, "--", "sh", "-c", script)
	p.expectLine(t, "nested lock 0")
	p.expectLine(t, "direct submit 0")
	p.expectLine(t, "unrelated 75")
	p.expectLine(t, "done")
	outside := scribe(t, "", "lock", "--store", store, "--", "true")
	assert.Equal(t, 75, outside.code, "an outside process is excluded while the nested holds run")
	p.stdin.Close()
	<-p.exited
	require.NoError(t, p.err)
	assert.Equal(t, "child", readFile(t, filepath.Join(store, "f.txt")))
	r := scribe(t, "", "lock", "--store", store, "--", "true")
	assert.Equal(t, 0, r.code, "released with the outermost hold")
}

// After a critical section panics (and the panic is
// recovered), another process can lock at once, while the panicking
// process is still alive.
func TestReleaseOnPanic(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	p := background(t, []string{"SCRIBE_TEST_HELPER=panic:" + store}, os.Args[0])
	p.expectLine(t, "recovered")
	r := scribe(t, "", "lock", "--store", store, "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
}

// scribe and other flock(2) users exclude each other on one
// lock file: flock(1) and Python's fcntl.flock.
func TestInteropWithOtherFlockUsers(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	toolLock := filepath.Join(t.TempDir(), "tool.lock")

	// flock(1) holds → scribe lock exits 75, naming an unknown holder.
	release := holdWithFlock(t, toolLock)
	r := scribe(t, "", "lock", "--store", store, "--lock-file", toolLock, "--", "true")
	assert.Equal(t, 75, r.code)
	assert.Contains(t, r.stderr, "unknown process")
	release()

	// scribe holds → flock -n on the same file fails.
	releaseScribe := holdStore(t, "--store", store, "--lock-file", toolLock)
	out, err := exec.Command("flock", "-n", toolLock, "true").CombinedOutput()
	assert.Error(t, err, "flock -n got a lock scribe holds: %s", out)
	assert.Equal(t, 0, releaseScribe())

	// Python holds → the daemon defers the queued jobs, then applies them.
	python, err := exec.LookPath("python3")
	require.NoError(t, err, "python3 is needed for this interop test")
	py := background(t, nil, python, "-c", fmt.Sprintf(`
import fcntl, sys
f = open(%q, "a")
fcntl.flock(f, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
`, toolLock))
	py.expectLine(t, "held")
	d := startDaemon(t, store, "--lock-file", toolLock)
	for i := range 3 {
		r := scribe(t, "", "submit", "--store", store, "append", "f.txt", strconv.Itoa(i))
		require.Equal(t, 0, r.code, r.stderr)
	}
	require.Eventually(t, func() bool { return strings.Contains(d.log.String(), "waiting for the store") }, 20*time.Second, 20*time.Millisecond)
	assert.NoFileExists(t, filepath.Join(store, "f.txt"))
	py.stdin.Close()
	<-py.exited
	require.Eventually(t, func() bool { return readFile(t, filepath.Join(store, "f.txt")) == "012" }, 20*time.Second, 20*time.Millisecond)
}

// Fair hand-off. With producers keeping the queue busy, a
// waiting direct writer gets the lock well within its wait, and every
// queued job is still applied exactly once.
func TestFairHandOff(t *testing.T) {
	// Not parallel: it times processes (the median wait), and the
	// other tests' load would time the machine instead.
	store := newStore(t)
	startDaemon(t, store)
	var stop atomic.Bool
	var sent atomic.Int64
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				r := scribe(t, "", "submit", "--store", store, "--id", fmt.Sprintf("p%d-%d", p, i), "append", "log.txt", fmt.Sprintf("%d %d\n", p, i))
				if !assert.Equal(t, 0, r.code, r.stderr) {
					return
				}
				sent.Add(1)
			}
		})
	}
	require.Eventually(t, func() bool { return sent.Load() >= 40 }, 30*time.Second, 10*time.Millisecond, "producers got going")
	var waits []time.Duration
	for range 3 {
		r := scribe(t, "", "lock", "--store", store, "--wait", "10s", "--", "true")
		require.Equal(t, 0, r.code, r.stderr)
		waits = append(waits, r.duration)
	}
	stop.Store(true)
	wg.Wait()
	slices.Sort(waits)
	t.Logf("a waiting direct writer got the busy store in %v (min, median, max)", waits)
	assert.Less(t, waits[1], 5*time.Second, "median wait well under the 10s bound")

	total := int(sent.Load())
	require.Eventually(t, func() bool {
		return strings.Count(readFile(t, filepath.Join(store, "log.txt")), "\n") >= total
	}, 30*time.Second, 20*time.Millisecond)
	lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(store, "log.txt"))), "\n")
	assert.Len(t, lines, total, "every job applied exactly once")
	seen := map[string]bool{}
	for _, l := range lines {
		assert.False(t, seen[l], "doubled: %q", l)
		seen[l] = true
	}
}

// A refused direct writer exits 75 quickly.
func TestFailFastLatency(t *testing.T) {
	// Not parallel: it times processes (the median refusal), and the
	// other tests' load would time the machine instead.
	store := newStore(t)
	release := holdStore(t, "--store", store)
	defer release()
	var ds []time.Duration
	for range 15 {
		r := scribe(t, "", "lock", "--store", store, "--", "true")
		require.Equal(t, 75, r.code)
		ds = append(ds, r.duration)
	}
	slices.Sort(ds)
	t.Logf("refused scribe lock: median %v, max %v (process exec to exit)", ds[len(ds)/2], ds[len(ds)-1])
	assert.Less(t, ds[len(ds)/2], time.Second)
}

// A store reached through a symlink, a relative path, ".."
// segments or a trailing slash is the same store with the same lock; two
// different stores never contend.
func TestPathAliasesShareOneLock(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	other := newStore(t)
	parent := filepath.Dir(store)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(store, link))
	release := holdStore(t, "--store", store)
	defer release()

	for _, alias := range []string{link, store + "/", filepath.Join(store, "..", filepath.Base(store)), link + "/."} {
		r := scribe(t, "", "lock", "--store", alias, "--", "true")
		assert.Equal(t, 75, r.code, "%s: %s", alias, r.stderr)
	}
	rel := exec.Command(scribeBin, "lock", "--store", "./"+filepath.Base(store), "--", "true")
	rel.Dir = parent
	err := rel.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "relative path")
	assert.Equal(t, 75, ee.ExitCode())

	r := scribe(t, "", "lock", "--store", other, "--", "true")
	assert.Equal(t, 0, r.code, "a different store is not busy: %s", r.stderr)
}

// A store whose config file sets lock_file is locked on that file by every
// command, with no daemon running as with one: the tool that shares it,
// and a daemon started later, which takes it too, are excluded.
func TestCallersTakeTheConfiguredLockFile(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	toolLock := filepath.Join(t.TempDir(), "tool.lock")
	writeConfig(t, store, fmt.Sprintf("lock_file = %q\n", toolLock), 0o600)

	// scribe lock holds the tool's lock while CMD runs.
	r := scribe(t, "", "lock", "--store", store, "--", "flock", "-n", toolLock, "true")
	assert.Equal(t, 1, r.code, "flock -n got the tool's lock while scribe lock held the store: %s", r.stderr)

	// The tool holds it: a direct write is refused, and status names it.
	release := holdWithFlock(t, toolLock)
	r = scribe(t, "", "submit", "--store", store, "--route", "direct", "append", "f.txt", "x")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, "lock "+toolLock+" is held by an unknown process")
	r = scribe(t, "", "status", "--store", store, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var st struct {
		Lock struct{ Path, State string }
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	assert.Equal(t, toolLock, st.Lock.Path)
	assert.Equal(t, "held", st.Lock.State)
	release()
	assert.NoFileExists(t, filepath.Join(store, "f.txt"))

	// A daemon started by the same file takes the same lock: a direct
	// writer given none is not refused for taking another.
	startDaemon(t, store)
	r = scribe(t, "", "submit", "--store", store, "--route", "direct", "--wait=10s", "append", "f.txt", "y")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "y", readFile(t, filepath.Join(store, "f.txt")))
}

// TestTheJournalUnderAnotherNameIsNoLockFile: a hard link of the journal
// named as --lock-file is refused as its own name is (exit 2), before a
// holder writes its identity over it: the journal kept the outcome, and a
// retry of the job applies nothing again.
func TestTheJournalUnderAnotherNameIsNoLockFile(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	r := scribe(t, "", "submit", "--store", store, "--id", "job-1", "append", "log.txt", "x\n")
	require.Equal(t, 0, r.code, r.stderr)
	journal := filepath.Join(store, ".scribe", "journal.db")
	before := readFile(t, journal)
	link := filepath.Join(store, "tool.lock")
	require.NoError(t, os.Link(journal, link))

	for _, args := range [][]string{
		{"lock", "--store", store, "--lock-file", link, "--", "true"},
		{"submit", "--store", store, "--lock-file", link, "append", "log.txt", "y\n"},
	} {
		r := scribe(t, "", args...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "is scribe's journal, "+journal+", under another name", args)
	}
	assert.True(t, before == readFile(t, journal), "the journal is as it was")
	r = scribe(t, "", "submit", "--store", store, "--id", "job-1", "append", "log.txt", "x\n")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "x\n", readFile(t, filepath.Join(store, "log.txt")), "the retry applied nothing again")
}
