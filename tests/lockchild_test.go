package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// Background children of `scribe lock`. Each test runs
// `scribe lock -- sh -c '... &'`, whose background child keeps descriptor 3
// and the SCRIBE_LOCK_* environment, and steps it through signal files the
// test creates. The scripts get their paths from the environment: D (the
// test's folder), S (the store) and SCRIBE (the binary).

// childLib is sourced by every child script: await waits for a signal
// file, record writes a result file atomically.
const childLib = `
await() { while [ ! -e "$D/$1" ]; do sleep 0.01; done; }
record() { echo "$2" > "$D/$1.tmp" && mv "$D/$1.tmp" "$D/$1"; }
`

// childEnv is a test's folder with a child script in it.
type childEnv struct {
	dir, store, lockFile string
}

// newChildEnv makes a store and writes script (with childLib) as
// $D/child.sh.
func newChildEnv(t *testing.T, script string) *childEnv {
	t.Helper()
	store := newStore(t)
	real, err := filepath.EvalSymlinks(store)
	require.NoError(t, err)
	c := &childEnv{dir: t.TempDir(), store: real, lockFile: filepath.Join(real, ".scribe", "lock")}
	require.NoError(t, os.WriteFile(filepath.Join(c.dir, "child.sh"), []byte(childLib+script), 0o644))
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
			for _, l := range logs {
				t.Logf("%s:\n%s", filepath.Base(l), readFile(t, l))
			}
		}
	})
	return c
}

func (c *childEnv) env() []string {
	return []string{"D=" + c.dir, "S=" + c.store, "SCRIBE=" + scribeBin}
}

// lock starts `scribe lock --store S -- sh -c cmd` in the background.
func (c *childEnv) lock(t *testing.T, cmd string) *bgProc {
	t.Helper()
	return background(t, c.env(), scribeBin, "lock", "--store", c.store, "--", "sh", "-c", cmd)
}

// signal creates the signal file name.
func (c *childEnv) signal(t *testing.T, name string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(c.dir, name), nil, 0o644))
}

// await waits for the result file name and returns its content.
func (c *childEnv) await(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(c.dir, name)
	require.Eventually(t, func() bool { _, err := os.Stat(path); return err == nil }, 20*time.Second, 10*time.Millisecond,
		"no %s from the background child", name)
	return strings.TrimSpace(readFile(t, path))
}

// fd3 is what descriptor 3 of process pid is open on, "" if it is closed.
func fd3(t *testing.T, pid string) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join("/proc", pid, "fd", "3"))
	if err != nil {
		return ""
	}
	return target
}

// flockFree reports whether flock(1), an outside process, can take the
// lock file at once.
func flockFree(t *testing.T, lockFile string) bool {
	t.Helper()
	flockBin, err := exec.LookPath("flock")
	require.NoError(t, err, "flock(1) from util-linux is needed")
	return exec.Command(flockBin, "-n", lockFile, "true").Run() == nil
}

// exited reports whether a background process has exited.
func exited(p *bgProc) bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// A background child that keeps descriptor 3 and SCRIBE_LOCK_* after
// `scribe lock` has exited does not re-take the store through it: its
// direct submit is an ordinary direct writer (refused while someone holds
// the store, applied under a lock and an epoch of its own when it is
// free), and the store is free again once it is done, although the child
// still has descriptor 3 open.
func TestBackgroundChildCannotRetakeAfterParentExits(t *testing.T) {
	t.Parallel()
	c := newChildEnv(t, `
record pid $$
for n in 1 2; do
	await go-$n
	"$SCRIBE" submit --store "$S" --route direct --id bg-$n append f.txt $n
	record code-$n $?
done
await done
`)
	p := c.lock(t, `sh "$D/child.sh" >"$D/child.log" 2>&1 & echo "epoch $SCRIBE_EPOCH"`)
	require.True(t, p.lines.Scan())
	parentEpoch, err := strconv.ParseUint(strings.TrimPrefix(p.lines.Text(), "epoch "), 10, 64)
	require.NoError(t, err, p.lines.Text())
	<-p.exited
	require.NoError(t, p.err, "scribe lock exits with its command")
	pid := c.await(t, "pid")
	require.Equal(t, c.lockFile, fd3(t, pid), "the background child kept descriptor 3")
	assert.True(t, flockFree(t, c.lockFile), "scribe lock released the store when it exited")

	// Someone else holds the store: the child is refused like anyone.
	release := holdWithFlock(t, c.lockFile)
	c.signal(t, "go-1")
	assert.Equal(t, "75", c.await(t, "code-1"))
	assert.NoFileExists(t, filepath.Join(c.store, "f.txt"))
	release()

	// The store is free: the child gets it through a lock of its own...
	c.signal(t, "go-2")
	require.Equal(t, "0", c.await(t, "code-2"))
	assert.Equal(t, "2", readFile(t, filepath.Join(c.store, "f.txt")))
	r := scribe(t, "", "status", "--store", c.store, "--json", "bg-2")
	require.Equal(t, 0, r.code, r.stderr)
	var out queue.Outcome
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	assert.Greater(t, out.Epoch, parentEpoch, "applied under an acquisition of its own, not the parent's")
	// ...and lets go of it: descriptor 3, still open in the child, holds
	// nothing.
	require.Equal(t, c.lockFile, fd3(t, pid))
	assert.True(t, flockFree(t, c.lockFile), "the store is free after the child's submit")
	r = scribe(t, "", "lock", "--store", c.store, "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
	c.signal(t, "done")
}

// Two background children of a `scribe lock` that has exited never hold
// the store at once: they share one open file description, so re-taking
// it would let both in.
func TestBackgroundChildrenNeverHoldTogether(t *testing.T) {
	t.Parallel()
	c := newChildEnv(t, `
n=$1
record pid-$n $$
await go-$n
N=$n "$SCRIBE" lock --store "$S" -- sh -c 'echo "in $N" >> "$D/trace"; while [ ! -e "$D/release-$N" ]; do sleep 0.01; done; echo "out $N" >> "$D/trace"'
record code-$n $?
await done
`)
	p := c.lock(t, `for n in 1 2; do sh "$D/child.sh" $n >"$D/child-$n.log" 2>&1 & done`)
	<-p.exited
	require.NoError(t, p.err)
	for _, n := range []string{"1", "2"} {
		require.Equal(t, c.lockFile, fd3(t, c.await(t, "pid-"+n)), "child %s kept descriptor 3", n)
	}
	trace := filepath.Join(c.dir, "trace")

	c.signal(t, "go-1")
	require.Eventually(t, func() bool { return readFile(t, trace) == "in 1\n" }, 20*time.Second, 10*time.Millisecond)
	c.signal(t, "go-2")
	assert.Equal(t, "75", c.await(t, "code-2"), "the second child is refused while the first holds the store")
	assert.Equal(t, "in 1\n", readFile(t, trace), "nobody entered beside the first child")
	assert.False(t, flockFree(t, c.lockFile), "the first child holds the store")

	c.signal(t, "release-1")
	assert.Equal(t, "0", c.await(t, "code-1"))
	assert.Equal(t, "in 1\nout 1\n", readFile(t, trace))
	assert.True(t, flockFree(t, c.lockFile), "free once the first child is done, though both keep descriptor 3")
	c.signal(t, "done")
}

// A background child of a `scribe lock` killed with SIGKILL does not join
// the dead hold. The kernel keeps that flock for as long as any process
// has descriptor 3 open (the store stays busy, "held by an unknown
// process"); once a scribe process is the last to have it, it lets it go
// and gets in with a lock of its own.
func TestBackgroundChildOfKilledParent(t *testing.T) {
	t.Parallel()
	c := newChildEnv(t, `
record pid $$
await go-1
"$SCRIBE" submit --store "$S" --route direct --id bg-1 append f.txt 1 2>"$D/err-1"
record code-1 $?
# The last holder of descriptor 3: this shell closes its copy, the
# subshell passes its own to the submit it becomes.
(await go-2; exec "$SCRIBE" submit --store "$S" --route direct --id bg-2 append f.txt 2) &
exec 3>&-
wait $!
record code-2 $?
await done
`)
	p := c.lock(t, `sh "$D/child.sh" >"$D/child.log" 2>&1 & echo "$$"; exec sleep 600 >/dev/null 2>&1`)
	require.True(t, p.lines.Scan())
	cmdPID, err := strconv.Atoi(p.lines.Text())
	require.NoError(t, err)
	pid := c.await(t, "pid")
	require.Equal(t, c.lockFile, fd3(t, pid))

	require.NoError(t, p.cmd.Process.Kill()) // scribe lock alone: its command and the child live on
	<-p.exited
	assert.False(t, flockFree(t, c.lockFile), "the command and the child keep the dead hold's flock")

	c.signal(t, "go-1")
	assert.Equal(t, "75", c.await(t, "code-1"), "the child does not join a dead parent's hold")
	assert.Contains(t, readFile(t, filepath.Join(c.dir, "err-1")), "unknown process")
	assert.NoFileExists(t, filepath.Join(c.store, "f.txt"))

	require.NoError(t, syscall.Kill(cmdPID, syscall.SIGKILL))
	require.Eventually(t, func() bool { return fd3(t, pid) == "" }, 20*time.Second, 10*time.Millisecond, "the child closed descriptor 3")
	assert.False(t, flockFree(t, c.lockFile), "the subshell keeps descriptor 3, and with it the flock")

	c.signal(t, "go-2")
	assert.Equal(t, "0", c.await(t, "code-2"), "the last holder of descriptor 3 lets it go and gets in")
	assert.Equal(t, "2", readFile(t, filepath.Join(c.store, "f.txt")))
	assert.True(t, flockFree(t, c.lockFile))
	c.signal(t, "done")
}

// A background child that joined the hold while `scribe lock`'s command
// ran keeps the store held after the command has exited: `scribe lock`
// releases only when the child has let go, so no outside writer gets in
// beside it.
func TestJoinedChildOutlivesCommand(t *testing.T) {
	t.Parallel()
	c := newChildEnv(t, `
"$SCRIBE" lock --store "$S" -- sh -c 'touch "$D/inside"; while [ ! -e "$D/release" ]; do sleep 0.01; done'
record code $?
`)
	p := c.lock(t, `sh "$D/child.sh" >"$D/child.log" 2>&1 & while [ ! -e "$D/inside" ]; do sleep 0.01; done; echo command done`)
	p.expectLine(t, "command done")
	assert.Never(t, func() bool { return exited(p) || flockFree(t, c.lockFile) }, time.Second, 20*time.Millisecond,
		"the store is held while the joined child is inside")
	r := scribe(t, "", "submit", "--store", c.store, "--route", "direct", "append", "f.txt", "outside")
	assert.Equal(t, 75, r.code, r.stderr)

	c.signal(t, "release")
	assert.Equal(t, "0", c.await(t, "code"))
	require.Eventually(t, func() bool { return exited(p) }, 20*time.Second, 10*time.Millisecond, "scribe lock exits once the child let go")
	require.NoError(t, p.err)
	assert.True(t, flockFree(t, c.lockFile))
}
