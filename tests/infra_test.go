package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// mountTmpfs mounts a small tmpfs at dir (root only), unmounted at cleanup.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); this test needs root", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
}

func remount(t *testing.T, dir, mode string) {
	t.Helper()
	out, err := exec.Command("mount", "-o", "remount,"+mode, dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// daemonFault returns the I/O fault the daemon reports, "" if none.
func daemonFault(t *testing.T, store string) string {
	t.Helper()
	r := scribe(t, "", "status", "--store", store, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep queue.StatusReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	return rep.Fault
}

// The store's disk turns read-only, or fills up,
// under load. Nothing is recorded as applied that is not on disk; status
// shows the fault; when it clears, every queued job applies exactly once.
func TestStoreFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		size   string
		break_ func(t *testing.T, data string)
		mend   func(t *testing.T, data string)
		fault  string
	}{
		{"read-only", "1m",
			func(t *testing.T, data string) { remount(t, data, "ro") },
			func(t *testing.T, data string) { remount(t, data, "rw") },
			"read-only file system"},
		{"full", "128k",
			func(t *testing.T, data string) {
				// Fill it: dd stops with "No space left on device".
				_ = exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(data, "filler"), "bs=4k").Run()
			},
			func(t *testing.T, data string) { require.NoError(t, os.Remove(filepath.Join(data, "filler"))) },
			"no space left on device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			data := filepath.Join(store, "data")
			mountTmpfs(t, data, tt.size)
			startDaemon(t, store)
			log := filepath.Join(data, "log.txt")
			// Lines over a page long: each append needs new space.
			line := func(i int) string { return fmt.Sprintf("%03d %s\n", i, strings.Repeat("x", 5000)) }
			for i := range 3 {
				r := scribe(t, "", "submit", "--store", store, "--wait", "--id", fmt.Sprintf("j%d", i), "append", "data/log.txt", line(i))
				require.Equal(t, 0, r.code, r.stderr)
			}

			tt.break_(t, data)
			for i := 3; i < 10; i++ {
				r := scribe(t, "", "submit", "--store", store, "--id", fmt.Sprintf("j%d", i), "append", "data/log.txt", line(i))
				require.Equal(t, 0, r.code, "queued despite the fault: %s", r.stderr)
			}
			require.Eventually(t, func() bool {
				return strings.Contains(strings.ToLower(daemonFault(t, store)), tt.fault)
			}, 20*time.Second, 20*time.Millisecond, "status shows the fault")
			got := readFile(t, log)
			assert.True(t, strings.HasPrefix(got, line(0)+line(1)+line(2)), "what was applied is intact")
			stuck := 0
			for i := 3; i < 10; i++ {
				r := scribe(t, "", "status", "--store", store, fmt.Sprintf("j%d", i))
				if r.code == 0 {
					assert.Contains(t, got, line(i), "j%d is recorded applied, so it must be on disk", i)
				} else {
					stuck++
				}
			}
			assert.Positive(t, stuck, "the fault held jobs back")

			tt.mend(t, data)
			want := ""
			for i := range 10 {
				want += line(i)
			}
			require.Eventually(t, func() bool { return readFile(t, log) == want }, 30*time.Second, 20*time.Millisecond,
				"every queued job applied exactly once after the fault cleared")
			require.Eventually(t, func() bool { return daemonFault(t, store) == "" }, 10*time.Second, 20*time.Millisecond)
			for i := range 10 {
				r := scribe(t, "", "status", "--store", store, fmt.Sprintf("j%d", i))
				assert.Equal(t, 0, r.code, "j%d recorded: %s", i, r.stderr)
			}
		})
	}
}

// A writer that cannot take the store for a reason other than another
// holder (here a full disk refuses its holder identity) shows the fault
// as one, as it does a fault while applying, not as a wait for a holder;
// once space is back it takes the store and the fault clears.
func TestFullDiskWhileTakingTheStoreIsAFault(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	mountTmpfs(t, store, "16m")
	startDaemon(t, store, "--max-bytes", strconv.Itoa(4<<20))
	release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock"))
	r := scribe(t, "", "submit", "--store", store, "--route", "require", "--id", "j1", "append", "log.txt", "j1\n")
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool {
		st := scribe(t, "", "status", "--store", store)
		return strings.Contains(st.stdout, "writer waiting")
	}, 20*time.Second, 20*time.Millisecond, "the writer waits for the outside holder")

	ballast := filepath.Join(store, "ballast")
	_ = exec.Command("dd", "if=/dev/zero", "of="+ballast, "bs=64k").Run() // stops with "No space left on device"
	release()
	var fault string
	require.Eventually(t, func() bool {
		fault = daemonFault(t, store)
		return strings.Contains(fault, "holder")
	}, 20*time.Second, 20*time.Millisecond, "status shows the failure to take the store as a fault: %q", fault)
	assert.Contains(t, strings.ToLower(fault), "no space left on device")
	st := scribe(t, "", "status", "--store", store)
	assert.Contains(t, st.stdout, "writer failing, retrying")
	assert.NotContains(t, st.stdout, "writer waiting")

	require.NoError(t, os.Remove(ballast))
	require.Eventually(t, func() bool { return readFile(t, filepath.Join(store, "log.txt")) == "j1\n" },
		30*time.Second, 20*time.Millisecond, "the job applies once space is back")
	require.Eventually(t, func() bool { return daemonFault(t, store) == "" }, 10*time.Second, 20*time.Millisecond)
}

// A journal cut short (an outside `truncate`, a disk that lost its tail)
// is refused with a clear error by every command, never a crash (bbolt
// maps the file and trusts its meta page: the page past the end was a
// SIGBUS), and nothing is written: not the files, not the journal.
func TestJournalCutShortIsRefused(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	for i := range 6 {
		r := scribe(t, "", "submit", "--store", store, "--route", "direct", "--wait", "append", "log.txt", fmt.Sprintf("%d\n", i))
		require.Equal(t, 0, r.code, r.stderr)
	}
	jpath := filepath.Join(store, ".scribe", "journal.db")
	const cut = 4 * 4096 // its meta pages and two more: the journal's pages run past that
	require.NoError(t, os.Truncate(jpath, cut))
	log := readFile(t, filepath.Join(store, "log.txt"))

	st := scribe(t, "", "status", "--store", store)
	assert.Equal(t, 0, st.code, st.stderr)
	assert.Contains(t, st.stdout, "the journal is damaged")
	for _, args := range [][]string{
		{"submit", "--store", store, "--route", "direct", "--wait", "append", "log.txt", "late\n"},
		{"lock", "--store", store, "--", "true"},
		{"recover", "--store", store},
	} {
		r := scribe(t, "", args...)
		assert.Equal(t, 1, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "the journal is damaged", "%v", args)
		assert.NotContains(t, r.stderr, "SIGBUS", "%v", args)
	}
	assert.Equal(t, log, readFile(t, filepath.Join(store, "log.txt")))
	after, err := os.Stat(jpath)
	require.NoError(t, err)
	assert.Equal(t, int64(cut), after.Size(), "the damaged journal is left as it is")
}
