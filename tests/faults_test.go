package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// crashJob is one job of the crash workload: CLI arguments after
// `submit --store S --id ID`.
type crashJob struct {
	id   string
	args []string
}

// crashWorkload mixes multi-op jobs, appends, puts and merges. Job 0 is
// multi-op, so a crash between its files ("file" step) leaves a batch half
// on disk; the puts are big enough to be staged.
func crashWorkload(t *testing.T) []crashJob {
	t.Helper()
	var jobs []crashJob
	dir := t.TempDir()
	for i := range 12 {
		id := fmt.Sprintf("job-%02d", i)
		switch i % 4 {
		case 0:
			job := fmt.Sprintf(`{"id":%q,"ops":[
				{"op":"append","path":"multi.txt","data":"m %d\n"},
				{"op":"merge","path":"state.json","data":"{\"m%d\": %d}"},
				{"op":"put","path":"sub/last.txt","data":"last %d"}]}`, id, i, i, i, i)
			f := filepath.Join(dir, id+".json")
			require.NoError(t, os.WriteFile(f, []byte(job), 0o644))
			jobs = append(jobs, crashJob{id, []string{"--job", f}})
		case 1:
			jobs = append(jobs, crashJob{id, []string{"append", "log.txt", fmt.Sprintf("a %d\n", i)}})
		case 2:
			jobs = append(jobs, crashJob{id, []string{"put", "put.txt", crashPut(i)}})
		case 3:
			jobs = append(jobs, crashJob{id, []string{"merge", "state.json", fmt.Sprintf(`{"k%d": %d}`, i, i)}})
		}
	}
	return jobs
}

// crashPut is what the put of job i writes: 80 KiB, a file the writer
// stages.
func crashPut(i int) string { return fmt.Sprintf("v %d", i) + strings.Repeat(" big", 20<<10) }

// checkCrashWorkload checks the store after the workload: every job applied
// exactly once, in order, no torn file.
func checkCrashWorkload(t *testing.T, store string, jobs []crashJob) {
	t.Helper()
	for _, j := range jobs {
		var out queue.Outcome
		require.Eventually(t, func() bool {
			r := scribe(t, "", "status", "--store", store, "--json", j.id)
			return r.code == 0 && json.Unmarshal([]byte(r.stdout), &out) == nil
		}, 30*time.Second, 20*time.Millisecond, "outcome of %s", j.id)
		assert.Equal(t, queue.StatusApplied, out.Status, "%s: %s", j.id, out.Detail)
	}
	var wantLog, wantMulti string
	wantState := map[string]int{}
	for i := range jobs {
		switch i % 4 {
		case 0:
			wantMulti += fmt.Sprintf("m %d\n", i)
			wantState[fmt.Sprintf("m%d", i)] = i
		case 1:
			wantLog += fmt.Sprintf("a %d\n", i)
		case 3:
			wantState[fmt.Sprintf("k%d", i)] = i
		}
	}
	assert.Equal(t, wantLog, readFile(t, filepath.Join(store, "log.txt")), "appends once each, in order")
	assert.Equal(t, wantMulti, readFile(t, filepath.Join(store, "multi.txt")), "multi-op appends once each, in order")
	assert.Equal(t, crashPut(10), readFile(t, filepath.Join(store, "put.txt")), "the last put wins, whole")
	assert.Equal(t, fmt.Sprintf("last %d", 8), readFile(t, filepath.Join(store, "sub", "last.txt")))
	var state map[string]int
	require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(store, "state.json"))), &state), "state.json parses")
	assert.Equal(t, wantState, state)
}

// The daemon dies (SIGKILL, by the SCRIBE_CRASH_AT
// hook) at each step of the batch pipeline in turn; after a restart every
// job is applied exactly once and no file is torn.
func TestCrashAtEachStep(t *testing.T) {
	t.Parallel()
	heavy(t)
	for _, step := range []string{"fetched", "staged", "intent", "file", "files", "commit", "ack", "acked", "published"} {
		t.Run(step, func(t *testing.T) {
			store := newStore(t)
			jobs := crashWorkload(t)
			d := startDaemonEnv(t, store, []string{"SCRIBE_CRASH_AT=" + step + ":2"})
			first, crashed := d, d.exited
			for _, j := range jobs {
				args := append([]string{"submit", "--store", store, "--route", "require", "--id", j.id}, j.args...)
				for try := 0; ; try++ {
					// A submit in flight when the daemon dies waits for a
					// daemon to come back: restart it meanwhile.
					done := make(chan result, 1)
					go func() { done <- scribe(t, "", args...) }()
					var r result
				wait:
					for {
						select {
						case r = <-done:
							break wait
						case <-crashed: // the fault fired: restart without it
							crashed = nil
							d = startDaemon(t, store)
						}
					}
					if r.code == 0 {
						break
					}
					require.Less(t, try, 50, "%s never queued: %s", j.id, r.stderr)
				}
			}
			// The fault fires on the second batch at the latest.
			select {
			case <-first.exited:
			case <-time.After(20 * time.Second):
				t.Fatalf("the daemon never reached step %q twice", step)
			}
			first.killed = true
			var ee *exec.ExitError
			require.ErrorAs(t, first.err, &ee)
			assert.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal(), "died by the hook")
			if d == first {
				d = startDaemon(t, store)
			}
			checkCrashWorkload(t, store, jobs)
			if step == "intent" || step == "file" || step == "files" {
				assert.Contains(t, d.log.String(), "redoing an interrupted batch", "the restarted daemon finished the batch the crash cut")
			}
		})
	}
}

// Producers SIGKILLed mid-submit and retried with the same ID
// never double a job.
func TestKilledSubmittersRetrySameID(t *testing.T) {
	t.Parallel()
	heavy(t)
	store := newStore(t)
	startDaemon(t, store)
	const n = 30
	var wg sync.WaitGroup
	for p := range 3 {
		wg.Go(func() {
			for i := range n {
				id := fmt.Sprintf("p%d-%d", p, i)
				args := []string{"submit", "--store", store, "--wait", "--id", id, "append", "log.txt", id + "\n"}
				// First attempt killed after a random instant, then retried.
				cmd := exec.Command(scribeBin, args...)
				require.NoError(t, cmd.Start())
				time.Sleep(time.Duration(i%7) * 3 * time.Millisecond) // a spread of kill instants, not a synchronisation
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				r := scribe(t, "", args...)
				assert.Equal(t, 0, r.code, r.stderr)
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(store, "log.txt"))), "\n")
	assert.Len(t, lines, 3*n, "each job once")
	count := map[string]int{}
	for _, l := range lines {
		count[l]++
	}
	for l, c := range count {
		assert.Equal(t, 1, c, "%s applied %d times", l, c)
	}
}

// Garbage, an unknown version and a job that panics the
// applier, published raw between valid jobs: the valid ones apply, the
// daemon stays up, the bad ones are rejected or dead-lettered, visibly.
func TestPoisonMessages(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemonEnv(t, store, []string{"SCRIBE_PANIC_ON=boom.txt"})
	disc, err := queue.ReadDiscovery(store)
	require.NoError(t, err)
	nc, err := nats.Connect(disc.URL, pinned(t, disc), nats.UserInfo(disc.User, disc.Password))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	sid := disc.StoreID
	good := func(i int) string {
		return fmt.Sprintf(`{"v":1,"id":"good-%d","store":%q,"ops":[{"op":"append","path":"ok.txt","data":"%d\n"}]}`, i, sid, i)
	}
	msgs := []struct{ id, body string }{
		{"good-0", good(0)},
		{"garbage-1", "\x00\xffnot json at all"},
		{"good-1", good(1)},
		{"v9", fmt.Sprintf(`{"v":9,"id":"v9","store":%q,"ops":[]}`, sid)},
		{"good-2", good(2)},
		{"boom", fmt.Sprintf(`{"v":1,"id":"boom","store":%q,"ops":[{"op":"put","path":"boom.txt","data":"x"}]}`, sid)},
		{"good-3", good(3)},
		{"garbage-2", `["an","array"]`},
		{"good-4", good(4)},
	}
	for _, m := range msgs {
		_, err := queue.Publish(t.Context(), js, sid, queue.JobsSubject(sid), m.id, []byte(m.body))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return readFile(t, filepath.Join(store, "ok.txt")) == "0\n1\n2\n3\n4\n"
	}, 20*time.Second, 20*time.Millisecond, "the valid jobs apply in order")
	assert.NoFileExists(t, filepath.Join(store, "boom.txt"))

	for id, reason := range map[string]queue.Reason{"v9": queue.ReasonBadVersion, "boom": queue.ReasonInternal} {
		r := scribe(t, "", "status", "--store", store, "--json", id)
		require.Equal(t, 0, r.code, r.stderr)
		var o queue.Outcome
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &o))
		assert.Equal(t, queue.StatusRejected, o.Status)
		assert.Equal(t, reason, o.Reason, o.Detail)
	}
	r := scribe(t, "", "status", "--store", store, "--dead", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var dead queue.DeadLetters
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &dead))
	assert.Equal(t, 2, dead.Total)
	if assert.Len(t, dead.Letters, 2) {
		assert.Equal(t, `["an","array"]`, string(dead.Letters[0].Data), "newest first")
		assert.Equal(t, "\x00\xffnot json at all", string(dead.Letters[1].Data))
	}
	select {
	case <-d.exited:
		t.Fatal("the daemon died")
	default:
	}
	ok := scribe(t, "", "submit", "--store", store, "--wait", "append", "ok.txt", "after\n")
	assert.Equal(t, 0, ok.code, ok.stderr)
}

// A full queue refuses new jobs at once with a clear error
// (exit 75) and drops nothing; after draining, submits work again and the
// jobs applied are exactly the jobs accepted.
func TestQueueFull(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store, "--max-jobs", "5")
	release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock"))
	accepted := 0
	var refused result
	for i := range 8 {
		r := scribe(t, "", "submit", "--store", store, "append", "log.txt", fmt.Sprintf("%d\n", i))
		if r.code == 0 {
			accepted++
			continue
		}
		refused = r
		break
	}
	// The writer holds up to a batch in hand; the stream's limit is 5.
	assert.Equal(t, 75, refused.code, refused.stderr)
	assert.Regexp(t, `queue full \(maximum messages exceeded\): job [0-9a-f]+ was not queued; retrying it is safe`, refused.stderr)
	assert.NotContains(t, refused.stderr, "nats: nats:")
	assert.Less(t, refused.duration, 5*time.Second)
	// A submit that waits for its outcome sends its job without waiting
	// for the queue's ack, and asks for it when no outcome comes: it is
	// refused as clearly, a moment later.
	waited := scribe(t, "", "submit", "--store", store, "--wait", "append", "log.txt", "waited\n")
	assert.Equal(t, 75, waited.code, waited.stderr)
	assert.Contains(t, waited.stderr, "queue full")
	assert.Less(t, waited.duration, 5*time.Second)
	release()
	require.Eventually(t, func() bool {
		return strings.Count(readFile(t, filepath.Join(store, "log.txt")), "\n") == accepted
	}, 20*time.Second, 20*time.Millisecond)
	r := scribe(t, "", "submit", "--store", store, "--wait", "append", "log.txt", "after\n")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, accepted+1, strings.Count(readFile(t, filepath.Join(store, "log.txt")), "\n"))
}

// SIGTERM under load exits 0 and releases the lock; nothing
// accepted is lost (a restart drains the rest). A submit cut off by the
// exit before its job's ack does not know its fate (exit 75) and retries
// with the same ID until the next daemon answers; such a job is applied
// at most once, and no other job that was not accepted is applied.
func TestSIGTERMUnderLoad(t *testing.T) {
	t.Parallel()
	heavy(t)
	store := newStore(t)
	d := startDaemon(t, store)
	var mu sync.Mutex
	var accepted []string
	codes := map[string]int{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for p := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("p%d-%d", p, i)
				r := scribe(t, "", "submit", "--store", store, "--route", "require", "--id", id, "append", "log.txt", id+"\n")
				mu.Lock()
				codes[id] = r.code
				if r.code == 0 {
					accepted = append(accepted, id)
				}
				mu.Unlock()
			}
		})
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(accepted) >= 40 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("no exit within 20s of SIGTERM")
	}
	assert.NoError(t, d.err, "exit 0 on SIGTERM")
	close(stop)
	r := scribe(t, "", "lock", "--store", store, "--", "true")
	assert.Equal(t, 0, r.code, "the lock is free: %s", r.stderr)

	// The submits still in flight retry through the next daemon, within
	// their bound, rather than wait all of it out.
	startDaemon(t, store)
	wg.Wait()
	require.Eventually(t, func() bool {
		return strings.Count(readFile(t, filepath.Join(store, "log.txt")), "\n") >= len(accepted)
	}, 30*time.Second, 20*time.Millisecond)
	lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(store, "log.txt"))), "\n")
	count := map[string]int{}
	for _, l := range lines {
		count[l]++
	}
	for _, id := range accepted {
		assert.Equal(t, 1, count[id], "%s, accepted, applied exactly once", id)
	}
	for id, n := range count {
		code, submitted := codes[id]
		assert.True(t, submitted, "line %q is no job's", id)
		if code != 0 {
			assert.Equal(t, 75, code, "%s was applied, although its submit exited %d, not 75 (fate unknown)", id, code)
			assert.Equal(t, 1, n, "%s, of unknown fate, applied at most once", id)
		}
	}
	t.Logf("%d accepted, %d applied", len(accepted), len(lines))
}

// Poison that kills the daemon outright (not a recoverable panic) never
// loops for ever: after it has killed the writer three times it is
// rejected, and the jobs around it apply.
func TestPoisonThatKillsTheWriter(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	env := []string{"SCRIBE_CRASH_ON=poison.txt"}
	d := startDaemonEnv(t, store, env)
	release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock")) // queue all three first
	for _, args := range [][]string{
		{"--id", "before", "append", "ok.txt", "before\n"},
		{"--id", "poison", "put", "poison.txt", "x"},
		{"--id", "after", "append", "ok.txt", "after\n"},
	} {
		r := scribe(t, "", append([]string{"submit", "--store", store, "--route", "require"}, args...)...)
		require.Equal(t, 0, r.code, r.stderr)
	}
	release()
	deaths := restartUntil(t, d, store, env, 1+3, func() bool {
		return readFile(t, filepath.Join(store, "ok.txt")) == "before\nafter\n"
	})
	assert.GreaterOrEqual(t, deaths, 1, "the poison did kill the daemon")
	r := scribe(t, "", "status", "--store", store, "--json", "poison")
	require.Equal(t, 0, r.code, r.stderr)
	var o queue.Outcome
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &o))
	assert.Equal(t, queue.ReasonInternal, o.Reason)
	assert.Contains(t, o.Detail, "died 3 times")
	assert.NoFileExists(t, filepath.Join(store, "poison.txt"))
}

// A daemon that stops (or dies) with jobs still queued leaves the store
// "stranded": the prefer route must not write directly past those jobs,
// and says what to do; --route direct still can; the next daemon drains
// them and lifts it.
func TestStrandedQueueBlocksPreferFallback(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"SIGTERM", "SIGKILL"} {
		t.Run(how, func(t *testing.T) {
			store := newStore(t)
			d := startDaemon(t, store)
			release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock"))
			r := scribe(t, "", "submit", "--store", store, "--id", "queued-first", "append", "log.txt", "first\n")
			require.Equal(t, 0, r.code, r.stderr)
			if how == "SIGKILL" {
				d.kill(t)
			} else {
				d.stop(t)
			}
			release()

			r = scribe(t, "", "submit", "--store", store, "append", "log.txt", "second\n")
			assert.Equal(t, 75, r.code, "the prefer route must not overtake the queued job: %s", r.stderr)
			assert.Contains(t, r.stderr, "scribe serve")
			assert.Empty(t, readFile(t, filepath.Join(store, "log.txt")))
			st := scribe(t, "", "status", "--store", store)
			assert.Equal(t, 0, st.code, "status still works: %s", st.stderr)
			assert.Contains(t, st.stdout, "jobs may be waiting in the queue")

			d = startDaemon(t, store)
			require.Eventually(t, func() bool { return readFile(t, filepath.Join(store, "log.txt")) == "first\n" }, 20*time.Second, 20*time.Millisecond)
			r = scribe(t, "", "submit", "--store", store, "--wait", "append", "log.txt", "second\n")
			require.Equal(t, 0, r.code, r.stderr)
			assert.Equal(t, "first\nsecond\n", readFile(t, filepath.Join(store, "log.txt")))

			// Drained: once no daemon runs, direct writes are fine again.
			d.stop(t)
			assert.NoFileExists(t, queue.Layout{Root: store}.Stranded())
			r = scribe(t, "", "submit", "--store", store, "append", "log.txt", "third\n")
			assert.Equal(t, 0, r.code, r.stderr)
			assert.Equal(t, "first\nsecond\nthird\n", readFile(t, filepath.Join(store, "log.txt")))
		})
	}
}
