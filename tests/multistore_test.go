package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// One daemon, many stores.

// startMulti starts `scribe serve` for several stores, its shared queue
// in queueDir, and waits until it serves them all: every store's
// discovery file names its pid.
func startMulti(t testing.TB, queueDir string, stores []string, extra ...string) *daemon {
	t.Helper()
	args := []string{"serve", "--log-level", "debug", "--queue-dir", queueDir}
	for _, s := range stores {
		args = append(args, "--store", s)
	}
	d := &daemon{cmd: exec.Command(scribeBin, append(args, extra...)...), store: stores[0], log: newProcessLog(t), exited: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = d.log.f, d.log.f
	require.NoError(t, d.cmd.Start())
	go func() { d.err = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() { d.stop(t) })
	require.Eventually(t, func() bool {
		select {
		case <-d.exited:
			return true
		default:
		}
		for _, s := range stores {
			disc, err := queue.ReadDiscovery(realPath(t, s))
			if err != nil || disc.PID != d.cmd.Process.Pid {
				return false
			}
		}
		return true
	}, 60*time.Second, 10*time.Millisecond)
	select {
	case <-d.exited:
		t.Fatalf("scribe serve exited at start: %v\n%s", d.err, d.log.String())
	default:
	}
	return d
}

func realPath(t testing.TB, dir string) string {
	t.Helper()
	real, err := queue.ResolveStore(dir)
	require.NoError(t, err)
	return real
}

// newStores makes n empty store folders.
func newStores(t testing.TB, n int) []string {
	t.Helper()
	stores := make([]string, n)
	for i := range stores {
		stores[i] = newStore(t)
	}
	return stores
}

// submitJob is one `scribe submit` of the load: it appends "ID\n".
type submitJob struct {
	store, id string
}

// submitAll runs every job as a `scribe submit --route require` process,
// producers at a time, each job after the previous of its producer, and
// returns the jobs whose submit failed.
func submitAll(t *testing.T, jobs [][]submitJob) (failed []submitJob) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, producer := range jobs {
		wg.Go(func() {
			for _, j := range producer {
				r, err := scribeNoT("submit", "--store", j.store, "--route", "require", "--id", j.id, "append", "log.txt", j.id+"\n")
				if err != nil || r.code != 0 {
					mu.Lock()
					failed = append(failed, j)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return failed
}

// load makes producers jobs of each store's, perProducer each.
func load(stores []string, producers, perProducer int) [][]submitJob {
	var jobs [][]submitJob
	for s, store := range stores {
		for p := range producers {
			var list []submitJob
			for i := range perProducer {
				list = append(list, submitJob{store: store, id: fmt.Sprintf("s%d-p%d-%03d", s, p, i)})
			}
			jobs = append(jobs, list)
		}
	}
	return jobs
}

// appliedOnce waits until each store's log.txt holds exactly its jobs'
// lines, each once, and nothing else: nothing lost, doubled or misrouted.
func appliedOnce(t *testing.T, jobs [][]submitJob) {
	t.Helper()
	want := map[string][]string{}
	for _, producer := range jobs {
		for _, j := range producer {
			want[j.store] = append(want[j.store], j.id)
		}
	}
	for store, ids := range want {
		slices.Sort(ids)
		var got []string
		ok := assert.Eventually(t, func() bool {
			got = strings.Fields(readFile(t, filepath.Join(store, "log.txt")))
			return len(got) >= len(ids)
		}, 60*time.Second, 20*time.Millisecond, "%s: all its jobs applied", store)
		slices.Sort(got)
		if ok {
			assert.Equal(t, ids, got, "%s: each of its jobs once, none of another store's", store)
		}
	}
}

// One daemon serves three stores: concurrent submits (processes) to each
// are applied once each, in the right store; every store's discovery file
// works for submit and status; a second daemon for one of them is refused
// naming the first, and serves none of its stores; a client of one store
// cannot queue for another with its credentials.
func TestMultiStoreServes(t *testing.T) {
	t.Parallel()
	stores := newStores(t, 3)
	queueDir := filepath.Join(t.TempDir(), "queue")
	d := startMulti(t, queueDir, stores)
	pid := strconv.Itoa(d.cmd.Process.Pid)

	jobs := load(stores, 3, 6)
	require.Empty(t, submitAll(t, jobs), "every submit succeeds")
	appliedOnce(t, jobs)

	for i, store := range stores {
		r := scribe(t, "", "submit", "--store", store, "--wait", "--json", "--id", "last", "put", "who.txt", fmt.Sprint(i))
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, fmt.Sprint(i), readFile(t, filepath.Join(store, "who.txt")))
		r = scribe(t, "", "status", "--store", store, "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var st struct {
			StoreID string `json:"store_id"`
			Daemon  *struct {
				PID int `json:"pid"`
			} `json:"daemon"`
			Applied *uint64 `json:"applied"`
			Queued  *uint64 `json:"queued"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
		require.NotNil(t, st.Daemon, "status finds the daemon through %s's discovery file", store)
		assert.Equal(t, d.cmd.Process.Pid, st.Daemon.PID)
		assert.Equal(t, queue.StoreID(realPath(t, store)), st.StoreID)
		require.NotNil(t, st.Applied)
		assert.EqualValues(t, 3*6+1, *st.Applied, "%s's writer applied its jobs only", store)
		r = scribe(t, "", "status", "--store", store, "--json", "s"+strconv.Itoa(i)+"-p0-000")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, `"applied"`)
	}

	// A second daemon for one of them, alone or with a store of its own.
	other := newStore(t)
	for _, args := range [][]string{
		{"serve", "--store", stores[1]},
		{"serve", "--store", other, "--store", stores[1], "--queue-dir", filepath.Join(t.TempDir(), "q2")},
	} {
		r := scribe(t, "", args...)
		assert.Equal(t, 75, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "already serves "+realPath(t, stores[1]))
		assert.Contains(t, r.stderr, "pid "+pid)
	}
	assert.NoFileExists(t, queue.Layout{Root: realPath(t, other)}.Discovery(), "never half-serve")
	assert.True(t, flockFree(t, queue.Layout{Root: realPath(t, other)}.DaemonLock()), "the other store's daemon lock was let go")

	// A's credentials, B's subject: refused by the server, nothing queued.
	da, err := queue.ReadDiscovery(realPath(t, stores[0]))
	require.NoError(t, err)
	db, err := queue.ReadDiscovery(realPath(t, stores[1]))
	require.NoError(t, err)
	assert.Equal(t, da.URL, db.URL, "one server")
	assert.NotEqual(t, da.User, db.User, "a user per store")
	violations := make(chan error, 8)
	nc, err := nats.Connect(da.URL, pinned(t, da), nats.UserInfo(da.User, da.Password), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	job, err := json.Marshal(map[string]any{"v": 1, "id": "intruder", "store": db.StoreID, "ops": []any{map[string]any{"op": "put", "path": "who.txt", "data": "A was here"}}})
	require.NoError(t, err)
	msg := nats.NewMsg(queue.JobsSubject(db.StoreID))
	msg.Data = job
	_, err = js.PublishMsg(t.Context(), msg, jetstream.WithMsgID("intruder"), jetstream.WithRetryAttempts(0))
	require.Error(t, err, "no ack for a job published to another store's subject")
	select {
	case err := <-violations:
		assert.ErrorIs(t, err, nats.ErrPermissionViolation)
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not refuse the publish")
	}
	r := scribe(t, "", "status", "--store", stores[1], "--json", "intruder")
	assert.NotEqual(t, 0, r.code, "B never saw the job")
	assert.NotContains(t, r.stdout, `"applied"`)
	assert.Equal(t, "1", readFile(t, filepath.Join(stores[1], "who.txt")))
	d.stop(t)
}

// SIGKILL the daemon of three stores in the middle of a load and start it
// again: every job whose submit returned is applied, and the others once
// resubmitted with the same ID; none twice, none in another store.
func TestMultiStoreSIGKILL(t *testing.T) {
	t.Parallel()
	heavy(t)
	stores := newStores(t, 3)
	queueDir := filepath.Join(t.TempDir(), "queue")
	d := startMulti(t, queueDir, stores)
	jobs := load(stores, 3, 10)

	var failed []submitJob
	done := make(chan struct{})
	go func() { failed = submitAll(t, jobs); close(done) }()
	require.Eventually(t, func() bool {
		n := 0
		for _, s := range stores {
			n += len(strings.Fields(readFile(t, filepath.Join(s, "log.txt"))))
		}
		return n >= 20
	}, 60*time.Second, 5*time.Millisecond, "some jobs applied before the kill")
	d.kill(t)
	<-done
	t.Logf("%d submits failed while the daemon was down", len(failed))

	d = startMulti(t, queueDir, stores)
	require.Empty(t, submitAll(t, [][]submitJob{failed}), "resubmitted with the same IDs")
	appliedOnce(t, jobs)
	d.stop(t)
}

// The set of stores changes: the jobs of a store the daemon no longer
// serves stay in the shared queue folder, reported in the log and in the
// store's status; a daemon of that store alone refuses to start while the
// folder is in use, saying where the jobs are, and takes them over once
// it is free. The jobs a daemon of one store leaves in the store move to
// the shared folder when a daemon of several serves it.
func TestMultiStoreSetChange(t *testing.T) {
	t.Parallel()
	stores := newStores(t, 3)
	a, c := stores[0], stores[2]
	queueDir := filepath.Join(t.TempDir(), "queue")
	d := startMulti(t, queueDir, stores)
	release := holdWithFlock(t, filepath.Join(c, ".scribe", "lock")) // c's writer waits: its jobs stay queued
	for i := range 3 {
		r := scribe(t, "", "submit", "--store", c, "--route", "require", "--id", fmt.Sprintf("c%d", i), "append", "log.txt", fmt.Sprintf("c%d\n", i))
		require.Equal(t, 0, r.code, r.stderr)
	}
	d.stop(t)
	release()
	require.Empty(t, readFile(t, filepath.Join(c, "log.txt")))

	d = startMulti(t, queueDir, stores[:2])
	assert.Regexp(t, `jobs wait in the shared queue folder for a store this daemon does not serve.* store=`+regexp.QuoteMeta(realPath(t, c))+`.* jobs=3`, d.log.String())
	r := scribe(t, "", "status", "--store", c)
	assert.Contains(t, r.stdout, "3 jobs of this store wait in the shared queue folder "+realPath(t, queueDir))
	r = scribe(t, "", "submit", "--store", c, "append", "log.txt", "direct\n")
	assert.NotEqual(t, 0, r.code, "no direct write past the stranded jobs: %s", r.stderr)

	r = scribe(t, "", "serve", "--store", c)
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "shared queue folder "+realPath(t, queueDir)+" is in use by daemon pid "+strconv.Itoa(d.cmd.Process.Pid))
	assert.NoFileExists(t, queue.Layout{Root: realPath(t, c)}.Discovery())
	d.stop(t)

	single := startDaemon(t, c)
	require.Eventually(t, func() bool { return readFile(t, filepath.Join(c, "log.txt")) == "c0\nc1\nc2\n" }, 30*time.Second, 20*time.Millisecond,
		"the store's own daemon took its jobs over, in order")
	assert.Contains(t, single.log.String(), "took over the store's queued jobs from the shared queue folder")

	// And back: jobs a daemon of one store leaves in the store.
	release = holdWithFlock(t, filepath.Join(c, ".scribe", "lock"))
	r = scribe(t, "", "submit", "--store", c, "--route", "require", "--id", "c3", "append", "log.txt", "c3\n")
	require.Equal(t, 0, r.code, r.stderr)
	single.stop(t)
	release()
	d = startMulti(t, queueDir, []string{a, c})
	require.Eventually(t, func() bool { return readFile(t, filepath.Join(c, "log.txt")) == "c0\nc1\nc2\nc3\n" }, 30*time.Second, 20*time.Millisecond)
	assert.Contains(t, d.log.String(), "took over the store's queued jobs from its own queue folder")
	r = scribe(t, "", "submit", "--store", c, "--wait", "--id", "c4", "append", "log.txt", "c4\n")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "c0\nc1\nc2\nc3\nc4\n", readFile(t, filepath.Join(c, "log.txt")))
	d.stop(t)
}

// --exit-idle waits for every store; the example of docs/config.md runs
// as written.
func TestMultiStoreDocExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "config.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)## Several stores.*?```toml\n(.*?)```.*?```sh\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "no example under ## Several stores")
	root := realPath(t, t.TempDir())
	home := filepath.Join(root, "stores") // ~/stores
	require.NoError(t, os.Mkdir(home, 0o755))
	cfg := filepath.Join(home, "scribe.toml")
	require.NoError(t, os.WriteFile(cfg, m[1], 0o644))
	// The shell block's set-up, as written: the lines before scribe's.
	var setup []string
	for _, line := range strings.Split(string(m[2]), "\n") {
		if strings.HasPrefix(line, "scribe ") {
			break
		}
		setup = append(setup, line)
	}
	sh := exec.Command("sh", "-ec", strings.Join(setup, "\n"))
	sh.Env = append(os.Environ(), "HOME="+root)
	out, err := sh.CombinedOutput()
	require.NoError(t, err, "%s", out)

	r := scribe(t, "", "serve", "--config", cfg, "--check-config")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `path = "`+filepath.Join(home, "wiki")+`"`)
	assert.Contains(t, r.stdout, `lock_file = "`+filepath.Join(home, ".wiki.lock")+`"`)

	d := &daemon{cmd: exec.Command(scribeBin, "serve", "--config", cfg, "--exit-idle", "300ms"), log: newProcessLog(t), exited: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = d.log.f, d.log.f
	require.NoError(t, d.cmd.Start())
	go func() { d.err = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() { d.stop(t) })
	require.Eventually(t, func() bool {
		disc, err := queue.ReadDiscovery(filepath.Join(home, "wiki"))
		return err == nil && disc.PID == d.cmd.Process.Pid
	}, 60*time.Second, 10*time.Millisecond, "serving:\n%s", d.log.String())
	disc, err := queue.ReadDiscovery(filepath.Join(home, "wiki"))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(home, ".wiki.lock"), disc.LockFile, "the store's own lock file")
	r = scribe(t, "", "submit", "--store", filepath.Join(home, "wiki"), "--wait", "put", "hello.txt", "hi")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "hi", readFile(t, filepath.Join(home, "wiki", "hello.txt")))
	assert.DirExists(t, filepath.Join(home, "queue", "jetstream"), "the shared queue folder of the example")
	select {
	case <-d.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the daemon did not exit once every store was idle")
	}
	require.NoError(t, d.err, d.log.String())
	assert.Contains(t, d.log.String(), "idle; exiting")
}

// Two stores of one daemon that share a lock file take it in turn, each
// under its own journal: a job lands in the store it was submitted for,
// and a direct write to one inside `scribe lock` of the other does not
// join that hold (its epoch is the other store's) but waits its turn.
func TestMultiStoreSharedLockFile(t *testing.T) {
	t.Parallel()
	dir := realPath(t, t.TempDir())
	shared := filepath.Join(dir, "shared.lock")
	notes, wiki := filepath.Join(dir, "notes"), filepath.Join(dir, "wiki")
	for _, s := range []string{notes, wiki} {
		require.NoError(t, os.Mkdir(s, 0o755))
		writeConfig(t, s, "lock_file = "+tomlString(shared)+"\n", 0o600)
	}
	cfg := filepath.Join(dir, "scribe.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf("queue_dir = \"q\"\n[[store]]\npath = %s\nlock_file = %s\n[[store]]\npath = %s\nlock_file = %s\n",
		tomlString(notes), tomlString(shared), tomlString(wiki), tomlString(shared))), 0o600))
	d := &daemon{cmd: exec.Command(scribeBin, "serve", "--config", cfg, "--idle-release", "50ms"), store: notes, log: newProcessLog(t), exited: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = d.log.f, d.log.f
	require.NoError(t, d.cmd.Start())
	go func() { d.err = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() { d.stop(t) })
	require.Eventually(t, func() bool {
		disc, err := queue.ReadDiscovery(wiki)
		return err == nil && disc.PID == d.cmd.Process.Pid
	}, 60*time.Second, 10*time.Millisecond, "serving:\n%s", d.log.String())

	for i := range 5 {
		for _, s := range []string{notes, wiki} {
			r := scribe(t, "", "submit", "--store", s, "--wait=30s", "--id", fmt.Sprintf("%s-%d", filepath.Base(s), i), "append", "log.txt", filepath.Base(s)+"\n")
			require.Equal(t, 0, r.code, r.stderr)
		}
	}
	assert.Equal(t, strings.Repeat("notes\n", 5), readFile(t, filepath.Join(notes, "log.txt")))
	assert.Equal(t, strings.Repeat("wiki\n", 5), readFile(t, filepath.Join(wiki, "log.txt")))
	r := scribe(t, "", "status", "--store", wiki, "notes-0")
	assert.Equal(t, 1, r.code, "the wiki journal knows no notes job: %s%s", r.stdout, r.stderr)

	r = scribe(t, "", "lock", "--store", notes, "--wait=30s", "--", scribeBin, "submit", "--store", wiki, "--route", "direct", "put", "inside.txt", "x")
	assert.Equal(t, 75, r.code, "%s%s", r.stdout, r.stderr)
	assert.NoFileExists(t, filepath.Join(wiki, "inside.txt"))
}
