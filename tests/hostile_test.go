package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// writeJobFile writes a multi-op job file and returns its path.
func writeJobFile(t *testing.T, ops string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"ops":`+ops+`}`), 0o644))
	return p
}

// requireWritable checks that the store takes an ordinary direct write and
// an outside `scribe lock` holder: nothing is wedged.
func requireWritable(t *testing.T, store, id string) {
	t.Helper()
	r := scribe(t, "", "submit", "--store", store, "--route", "direct", "--id", id, "put", id, "ok")
	require.Equal(t, 0, r.code, "the store is wedged: %+v", r)
	r = scribe(t, "", "lock", "--store", store, "--", "true")
	require.Equal(t, 0, r.code, "scribe lock: %+v", r)
	assert.Equal(t, "ok", readFile(t, filepath.Join(store, id)))
}

// outcomeOf polls the store's status for a job's outcome.
func outcomeOf(t *testing.T, store, id string) *queue.Outcome {
	t.Helper()
	var out queue.Outcome
	require.Eventually(t, func() bool {
		r := scribe(t, "", "status", "--store", store, "--json", id)
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &out) == nil && out.ID == id
	}, 30*time.Second, 50*time.Millisecond, "no outcome for %s", id)
	return &out
}

// No job, alone or batched with others, can make a batch that
// is decided and then impossible to carry out.
func TestOneJobCannotBrickTheStore(t *testing.T) {
	t.Parallel()
	t.Run("a file and a folder of one name in one job, direct", func(t *testing.T) {
		store := newStore(t)
		job := writeJobFile(t, `[{"op":"put","path":"a","data":"x"},{"op":"put","path":"a/b","data":"y"}]`)
		r := scribe(t, "", "submit", "--store", store, "--route", "direct", "--job", job)
		require.Equal(t, 1, r.code, "%+v", r)
		assert.Contains(t, r.stderr, "not_regular")
		_, err := os.Lstat(filepath.Join(store, "a"))
		assert.ErrorIs(t, err, os.ErrNotExist, "a rejected job changes nothing")
		requireWritable(t, store, "after")
	})

	t.Run("names whose temporary file would be too long", func(t *testing.T) {
		store := newStore(t)
		for _, n := range []int{244, 250, 255} {
			for _, op := range []string{"put", "merge"} {
				name := strings.Repeat("n", n)
				r := scribe(t, "", "submit", "--store", store, "--route", "direct", op, name, `{"a":1}`)
				require.Equal(t, 1, r.code, "%s of a %d-byte name: %+v", op, n, r)
				assert.Contains(t, r.stderr, "limit 243")
			}
		}
		requireWritable(t, store, "after")
	})

	t.Run("two submitters' jobs in one daemon batch", func(t *testing.T) {
		store := newStore(t)
		d := startDaemon(t, store)
		// A starting writer applies its first jobs one at a time (its
		// poison guard): get past them.
		for i := range 17 {
			r := scribe(t, "", "submit", "--store", store, "--wait", "put", fmt.Sprintf("warm-up/%d", i), "x")
			require.Equal(t, 0, r.code, "%+v", r)
		}
		// Hold the store from outside: the writer takes the first job and
		// waits for the lock with it, while the next two queue up behind
		// it, to be taken as one batch once it lets go.
		release := holdWithFlock(t, queue.Layout{Root: store}.Lock())
		for _, args := range [][]string{{"--id", "first", "put", "first", "x"}, {"--id", "file", "put", "x", "file"}, {"--id", "under", "append", "x/y", "line"}} {
			r := scribe(t, "", append([]string{"submit", "--store", store}, args...)...)
			require.Equal(t, 0, r.code, "%+v", r)
		}
		release()
		assert.True(t, outcomeOf(t, store, "file").Applied())
		under := outcomeOf(t, store, "under")
		assert.Equal(t, queue.ReasonNotRegular, under.Reason, "%+v", under)
		assert.Equal(t, "file", readFile(t, filepath.Join(store, "x")))
		r := scribe(t, "", "submit", "--store", store, "--wait", "--id", "next", "put", "next", "ok")
		require.Equal(t, 0, r.code, "the queue is wedged: %+v", r)
		d.stop(t)
		requireWritable(t, store, "after")
	})
}

// A redo that cannot succeed (here another program put a folder
// where the batch writes a file) is reported, with the way out, and the
// operator can give it up; the store then takes writes again.
func TestStuckBatchIsReportedAndCanBeAbandoned(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemonEnv(t, store, []string{"SCRIBE_CRASH_AT=intent"})
	r := scribe(t, "", "submit", "--store", store, "--id", "victim", "put", "p", "data")
	require.Equal(t, 0, r.code, "%+v", r)
	select {
	case <-d.exited: // killed itself with the intent recorded, before any file
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon never reached the intent step")
	}
	d.killed = true
	require.NoError(t, os.MkdirAll(filepath.Join(store, "p", "in-the-way"), 0o755))

	r = scribe(t, "", "submit", "--store", store, "--route", "direct", "put", "other", "x")
	require.Equal(t, 1, r.code, "%+v", r)
	assert.Contains(t, r.stderr, "cannot be finished")
	assert.Contains(t, r.stderr, "scribe recover")

	st := scribe(t, "", "status", "--store", store)
	assert.Contains(t, st.stdout, "stuck:", "%+v", st)
	assert.Contains(t, st.stdout, "p")
	var js struct {
		Interrupted *struct {
			Jobs  int    `json:"jobs"`
			Stuck string `json:"stuck"`
		} `json:"interrupted"`
	}
	st = scribe(t, "", "status", "--store", store, "--json")
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &js), st.stdout)
	require.NotNil(t, js.Interrupted)
	assert.Equal(t, 1, js.Interrupted.Jobs)
	assert.NotEmpty(t, js.Interrupted.Stuck)

	r = scribe(t, "", "recover", "--store", store)
	assert.Equal(t, 1, r.code, "recover without --abandon still fails: %+v", r)
	r = scribe(t, "", "recover", "--store", store, "--abandon")
	require.Equal(t, 0, r.code, "%+v", r)
	assert.Contains(t, r.stdout, "abandoned")

	out := outcomeOf(t, store, "victim")
	assert.Equal(t, queue.ReasonAbandoned, out.Reason)
	assert.Contains(t, out.Detail, "p")
	requireWritable(t, store, "after")
	// A daemon starts on it, and the abandoned job is not applied again.
	d = startDaemon(t, store)
	r = scribe(t, "", "submit", "--store", store, "--wait", "--id", "victim", "put", "p", "data")
	assert.Equal(t, 1, r.code, "%+v", r)
	assert.Contains(t, r.stderr, "abandoned")
	d.stop(t)
}

// Swapping a folder of the store with a symlink into .scribe,
// as fast as the kernel allows, while jobs write into that folder, never
// lets a job reach scribe's own files.
func TestSymlinkSwapCannotReachScribeFolder(t *testing.T) {
	t.Parallel()
	heavy(t) // the swapping keeps a core busy
	store := newStore(t)
	d := startDaemon(t, store)
	r := scribe(t, "", "submit", "--store", store, "--wait", "put", "warm-up", "x") // makes the journal
	require.Equal(t, 0, r.code, "%+v", r)
	meta := filepath.Join(store, queue.MetaDir)
	lockIno := inodeOf(t, filepath.Join(meta, "lock"))
	journalIno := inodeOf(t, filepath.Join(meta, "journal.db"))

	dir, link := filepath.Join(store, "d"), filepath.Join(store, "e")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Symlink(queue.MetaDir, link))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stopSwap := make(chan struct{})
	var swaps atomic.Int64
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for {
			select {
			case <-stopSwap:
				return
			default:
			}
			// d and e trade places atomically: d is now the folder, now
			// the symlink to .scribe.
			if err := unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("swap: %v", err)
				return
			}
			swaps.Add(1)
		}
	}()

	cl, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	defer cl.Close()
	const jobs = 150
	var wg sync.WaitGroup
	var applied, rejected atomic.Int64
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < jobs; i += 3 {
				name := []string{"d/lock", "d/journal.db", "d/daemon.json"}[i%3]
				out, err := cl.Apply(ctx, &queue.Job{ID: fmt.Sprintf("j%d", i), Ops: []queue.Op{{Kind: queue.OpPut, Path: name, Data: []byte("PWNED")}}})
				if !assert.NoError(t, err) {
					return
				}
				if out.Applied() {
					applied.Add(1)
				} else {
					rejected.Add(1)
				}
			}
		}()
	}
	// Let the jobs race the swapping; then stop it with d a folder, so
	// that batches the swap made fail can finish.
	require.Eventually(t, func() bool { return applied.Load()+rejected.Load() >= jobs/2 }, time.Minute, 10*time.Millisecond)
	close(stopSwap)
	<-swapped
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		require.NoError(t, unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE))
	}
	wg.Wait()
	t.Logf("%d swaps; %d jobs applied, %d rejected", swaps.Load(), applied.Load(), rejected.Load())
	assert.Equal(t, int64(jobs), applied.Load()+rejected.Load())

	assert.Equal(t, lockIno, inodeOf(t, filepath.Join(meta, "lock")), ".scribe/lock was replaced")
	assert.Equal(t, journalIno, inodeOf(t, filepath.Join(meta, "journal.db")), "the journal was replaced")
	for _, name := range []string{"lock", "daemon.json"} {
		b, err := os.ReadFile(filepath.Join(meta, name))
		require.NoError(t, err)
		assert.NotContains(t, string(b), "PWNED", ".scribe/%s holds a job's data", name)
	}
	// The journal holds jobs' data by design (a batch's intent keeps the
	// new content raw), so it is checked to be still bbolt's file: its
	// first meta page's magic in place, not a job's bytes.
	b, err := os.ReadFile(filepath.Join(meta, "journal.db"))
	require.NoError(t, err)
	require.Greater(t, len(b), 20)
	assert.Equal(t, []byte{0xed, 0xda, 0x0c, 0xed}, b[16:20], ".scribe/journal.db is no longer a bbolt file")
	// The journal is whole and has every outcome.
	for i := range jobs {
		outcomeOf(t, store, fmt.Sprintf("j%d", i))
	}
	d.stop(t)
	// And an outside flock user is excluded while a writer holds the store.
	r = scribe(t, "", "lock", "--store", store, "--", "flock", "-n", filepath.Join(meta, "lock"), "true")
	assert.NotEqual(t, 0, r.code, "flock(1) got the store lock while scribe lock held it: %+v", r)
}

// scribe's appends never remove bytes another program appends
// to the same file meanwhile (a shell's >>).
func TestAppendKeepsOtherWritersBytes(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemon(t, store)
	log := filepath.Join(store, "log")
	const others, ours = 5000, 400

	sh := exec.Command("sh", "-c", `i=0; while [ $i -lt `+fmt.Sprint(others)+` ]; do echo "other $i" >> "$1"; i=$((i+1)); done`, "sh", log)
	require.NoError(t, sh.Start())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	defer cl.Close()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < ours; i += 8 {
				out, err := cl.Apply(ctx, &queue.Job{Ops: []queue.Op{{Kind: queue.OpAppend, Path: "log", Data: fmt.Appendf(nil, "scribe %d\n", i)}}})
				if assert.NoError(t, err) {
					assert.True(t, out.Applied(), "%+v", out)
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, sh.Wait())
	d.stop(t)

	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(readFile(t, log), "\n"), "\n") {
		seen[line]++
	}
	lost, doubled := 0, 0
	for i := range others {
		switch seen[fmt.Sprintf("other %d", i)] {
		case 0:
			lost++
		case 1:
		default:
			doubled++
		}
	}
	for i := range ours {
		assert.Equal(t, 1, seen[fmt.Sprintf("scribe %d", i)], "scribe line %d", i)
	}
	assert.Zero(t, lost, "lines the shell appended were cut")
	assert.Zero(t, doubled)
	assert.Len(t, seen, others+ours, "no torn or foreign lines")
}
