package tests

import (
	"context"
	"fmt"
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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The disk under the store, queue and journal included,
// fills up and is freed again. JetStream's write error must not stay set:
// the daemon says what is wrong while the disk is full, recovers by itself
// once space is back, and every job whose submit returned success is
// applied exactly once, in order; no submit reports a false success.
func TestQueueRecoversAfterDiskFull(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	mountTmpfs(t, store, "16m")
	d := startDaemon(t, store, "--max-bytes", strconv.Itoa(4<<20))
	log := filepath.Join(store, "log.txt")
	// Lines over a page long: each stored job and each append needs new
	// pages, which a full tmpfs refuses.
	line := func(id string) string { return id + " " + strings.Repeat("x", 6000) + "\n" }
	submit := func(id string) result {
		return scribe(t, "", "submit", "--store", store, "--route", "require", "--id", id, "append", "log.txt", line(id))
	}
	var okIDs, failedIDs []string
	var mu sync.Mutex
	record := func(id string, r result) bool {
		mu.Lock()
		defer mu.Unlock()
		if r.code == 0 {
			okIDs = append(okIDs, id)
			return true
		}
		failedIDs = append(failedIDs, id)
		t.Logf("%s: exit %d: %s", id, r.code, strings.TrimSpace(r.stderr))
		assert.Empty(t, r.stdout, "%s: a failed submit must not print the job as queued", id)
		assert.NotEmpty(t, r.stderr, "%s: a failed submit says why", id)
		return false
	}
	for i := range 3 {
		id := fmt.Sprintf("before-%d", i)
		r := scribe(t, "", "submit", "--store", store, "--wait", "--id", id, "append", "log.txt", line(id))
		require.Equal(t, 0, r.code, r.stderr)
		record(id, r)
	}

	// Jobs queued while an outside holder keeps the writer away, so that
	// it meets the full disk with jobs in hand.
	release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock"))
	for i := range 5 {
		id := fmt.Sprintf("queued-%d", i)
		r := submit(id)
		require.Equal(t, 0, r.code, r.stderr)
		record(id, r)
	}
	ballast := filepath.Join(store, "ballast")
	// dd stops with "No space left on device".
	_ = exec.Command("dd", "if=/dev/zero", "of="+ballast, "bs=64k").Run()
	release()
	// A few more while full, at once: each fails or is queued, never
	// both. A submit that fails here has tried for its whole bound (a
	// submit without --wait retries an unacknowledged publish for 30 s),
	// so these run beside the sequential ones below rather than after
	// them: the disk stays full until both are done.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			id := fmt.Sprintf("more-%d", i)
			record(id, submit(id))
		})
	}
	for i := 0; ; i++ {
		require.Less(t, i, 40, "submits never failed on a full disk")
		id := fmt.Sprintf("full-%02d", i)
		if !record(id, submit(id)) {
			break
		}
	}
	wg.Wait()
	var fault string
	require.Eventually(t, func() bool {
		fault = daemonFault(t, store)
		return strings.Contains(fault, "the queue cannot store jobs")
	}, 30*time.Second, 50*time.Millisecond, "status shows the queue's fault while the disk is full: %q", fault)
	t.Logf("fault while full: %s", fault)
	assert.Contains(t, strings.ToLower(fault), "no space left on device")
	assert.Empty(t, readFile(t, log)[len(line("before-0"))*3:], "nothing applied while the disk is full")

	require.NoError(t, os.Remove(ballast))
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(store, &st))
	t.Logf("free once the ballast is gone: %d bytes", uint64(st.Bavail)*uint64(st.Bsize))
	var after result
	require.Eventually(t, func() bool {
		after = scribe(t, "", "submit", "--store", store, "--route", "require", "--wait=10s", "--id", "after-0", "append", "log.txt", line("after-0"))
		return after.code == 0
	}, 90*time.Second, 100*time.Millisecond, "a submit never succeeded once space was back: %s", after.stderr)
	record("after-0", after)
	for i := 1; i < 3; i++ {
		id := fmt.Sprintf("after-%d", i)
		r := scribe(t, "", "submit", "--store", store, "--wait=20s", "--id", id, "append", "log.txt", line(id))
		require.Equal(t, 0, r.code, r.stderr)
		record(id, r)
	}

	// Every job whose submit succeeded is applied exactly once, in the
	// order the submits returned; a failed one at most once.
	require.Eventually(t, func() bool {
		got := readFile(t, log)
		for _, id := range okIDs {
			if !strings.Contains(got, line(id)) {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "every job whose submit succeeded is applied")
	got := readFile(t, log)
	count := map[string]int{}
	var order []string
	for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		id, rest, _ := strings.Cut(l, " ")
		assert.Equal(t, strings.Repeat("x", 6000), rest, "line of %s is whole", id)
		count[id]++
		order = append(order, id)
	}
	// Concurrent submits have no order among themselves.
	concurrent := func(id string) bool { return strings.HasPrefix(id, "more-") }
	var okOrder, okSequential []string
	for _, id := range order {
		if !slices.Contains(failedIDs, id) && !concurrent(id) {
			okOrder = append(okOrder, id)
		}
	}
	for _, id := range okIDs {
		if !concurrent(id) {
			okSequential = append(okSequential, id)
		}
	}
	assert.Equal(t, okSequential, okOrder, "the jobs whose submit succeeded, once each and in order")
	for _, id := range okIDs {
		assert.Equal(t, 1, count[id], "%s applied once", id)
		r := scribe(t, "", "status", "--store", store, id)
		assert.Equal(t, 0, r.code, "%s recorded: %s", id, r.stderr)
	}
	for _, id := range failedIDs {
		assert.LessOrEqual(t, count[id], 1, "%s (its submit failed) applied at most once", id)
	}
	require.Eventually(t, func() bool { return daemonFault(t, store) == "" }, 20*time.Second, 50*time.Millisecond,
		"the fault clears once the daemon has recovered")
	assert.Contains(t, d.log.String(), "the queue is working again", "the daemon says it recovered")
	t.Logf("%d submits succeeded, %d failed while the disk was full", len(okIDs), len(failedIDs))
}

// The queue reserves --max-bytes of disk up
// front, and a disk too full for it is refused. A daemon that cannot
// have it exits at once, saying how much it needs, how much there
// is, and which flag lowers it.
func TestDiskFullAtStartNamesMaxBytes(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	const maxBytes = int64(1) << 50 // 1 PiB: more than any test machine has free
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, scribeBin, "serve", "--store", store, "--max-bytes", strconv.FormatInt(maxBytes, 10))
	cmd.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "scribe serve must refuse: %s", out)
	require.NoError(t, ctx.Err(), "scribe serve must exit at once, not serve")
	msg := string(out)
	assert.Contains(t, msg, "--max-bytes", "names the flag")
	assert.Contains(t, msg, "1.0 PiB", "names the reservation")
	assert.Contains(t, msg, "free", "names the free space")
	assert.NotContains(t, msg, "insufficient storage resources available\n", "not only JetStream's bare error")
	t.Logf("refusal: %s", msg)

	// A queue that exists keeps its limits rather than refuse to start:
	// JetStream would not even let them be lowered while the disk is short.
	startDaemon(t, store).stop(t)
	d := startDaemon(t, store, "--max-bytes", strconv.FormatInt(maxBytes, 10))
	assert.Contains(t, d.log.String(), "the queue keeps its former limits")
	r := scribe(t, "", "submit", "--store", store, "--wait", "append", "log.txt", "x\n")
	assert.Equal(t, 0, r.code, r.stderr)
}
