package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
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

	"github.com/scribehq/scribe/queue"
)

// Power loss, as a disk that loses what was not synced. Each filesystem
// (ext4, xfs, btrfs) runs a chain of cuts on one image: a daemon and
// producers (real scribe processes: Submit-only and Apply, of both
// priority classes, a direct writer beside the daemon, exec jobs, the
// first writes to fresh stores (some only appending to a file the
// folder had), puts that rename over a file (some big enough to be
// staged), new files in new folders,
// merges, multi-op jobs) write for a moment; at a random instant, or right after the first write to
// a fresh store returned, all of them are SIGSTOPped at once and the
// image is copied: what a power cut leaves. The copy is then mounted
// where the store was, a daemon drains its queue and `scribe recover`
// redoes what a direct writer was cut in, and the store is checked:
//
//   - every job whose Submit returned (--sync always) or whose Apply or
//     direct write returned (both modes) has its outcome recorded:
//     applied;
//   - every applied job's bytes are there exactly once (a line appended
//     once, a file put whole, a merged key), every job without an
//     outcome left nothing, a multi-op job all or nothing; lines in
//     their producer's order;
//   - what earlier cuts verified is still there, byte for byte, and at
//     the end every outcome recorded is unchanged.
//
// The next cut runs on the recovered copy. $SCRIBE_POWERCUTS sets the
// number of cuts with --sync always on ext4 and on xfs (12 by default,
// 24 between them; btrfs gets half as many, and each filesystem one cut
// with --sync 1s for every four of them), and $SCRIBE_POWERCUT_SEED
// replays a run.
func TestPowerLoss(t *testing.T) {
	t.Parallel()
	requirePowerCut(t)
	always := 12
	if s := os.Getenv("SCRIBE_POWERCUTS"); s != "" {
		var err error
		always, err = strconv.Atoi(s)
		require.NoError(t, err, "SCRIBE_POWERCUTS")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SCRIBE_POWERCUT_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "SCRIBE_POWERCUT_SEED")
	}
	t.Logf("SCRIBE_POWERCUT_SEED=%d", seed)
	powerCutLock(t)
	images := filepath.Join(t.TempDir(), "images")
	mountTmpfs(t, images, "2g")
	// The filesystems side by side, each in a heavy slot: each has its
	// own image, loop device, mount point and processes, and stops and
	// copies only its own; the writeback settings they share are held
	// back for as long as any runs.
	for _, fs := range powerFilesystems {
		t.Run(fs.name, func(t *testing.T) {
			t.Parallel()
			requireMkfs(t, fs)
			heavy(t)
			rng := rand.New(rand.NewPCG(seed, uint64(len(fs.name))))
			n := always
			if fs.half {
				n = max(1, n/2)
			}
			runPowerCuts(t, fs, images, n, max(1, n/4), rng)
		})
	}
}

// Producer routes.
const (
	routeSubmit = "submit" // queued, not waited for: acknowledged when queued
	routeApply  = "apply"  // queued and waited for: acknowledged when applied
	routeDirect = "direct" // written by the process itself, beside the daemon or alone
	routeExec   = "exec"   // an exec job; every other one waited for
)

// Job kinds, each with its own trace in the store.
const (
	kindAppend  = iota // a line to <P>.log
	kindPutNew         // a new file in new folders: n/<P>/<k%3>/<ID>.txt
	kindPutOver        // <P>.cur, replaced by a rename each time
	kindMerge          // a key of <P>.json
	kindMulti          // a line to <P>.multi and the file n/<P>/<ID>.m, together
	kindCount
	kindExec     // runs `scribe submit --route direct` of a line to exec/<P>.log, in the store's turn
	kindExisting // a line to existing.txt, which the store folder had before scribe came
)

// existingFile is a file a fresh store holds before its first write, as
// a folder someone makes a store of would: a first write that only
// appends to it makes no entry in the store's folder but .scribe.
const (
	existingFile = "existing.txt"
	existingLine = "written before scribe"
)

// powerJob is one job a producer submitted.
type powerJob struct {
	id   string
	k    int // its place in its producer's sequence
	kind int
	wait bool // an exec job that was waited for
	// code is how the process ended: its exit code, or 128+signal.
	code int
	out  string
}

// powerProducer is one process after another, each submitting the next
// job; jobs of one producer have traces of their own.
type powerProducer struct {
	name  string // unique in the run, no "-": the exec command takes it from the job ID
	store string
	route string
	first int // the kind of job 0
	limit int // how many jobs at most; 0: no limit
	// existing: job 0 appends to existingFile.
	existing bool
	// paced: a direct writer beside the daemon that leaves it its turns:
	// it pauses after each job, and every other job fails fast instead
	// of waiting for the lock.
	paced bool
	// high: its jobs are queued high, in a class of their own.
	high bool
	jobs []*powerJob
}

// guaranteed reports whether j's acknowledgement promises its outcome
// in this mode: a Submit only with --sync always.
func (p *powerProducer) guaranteed(j *powerJob, mode string) bool {
	switch {
	case mode == "always":
		return true
	case p.route == routeSubmit:
		return false
	case p.route == routeExec:
		return j.wait
	}
	return true
}

// powerPayload is the content of the file job id puts: its ID and a
// length of its own, up to a few pages, or for one job in six 64 to 80
// KiB, a file the writer stages.
func powerPayload(id string) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	n := 1 + int(h.Sum32()%400)
	if h.Sum32()%6 == 0 {
		n = 4096 + int(h.Sum32()%1024)
	}
	return id + " " + strings.Repeat("0123456789abcdef", n) + "\n"
}

// powerCut is the load of one cut: every process it starts joins the
// daemon's process group, so that all stop at one instant.
type powerCut struct {
	n       int
	mode    string // --sync
	daemon  *daemon
	pgid    int
	jobDir  string // job files, outside the image
	started time.Time
	at      time.Time // the cut

	mu      sync.RWMutex // held to start a process; taken whole to stop them all
	stopped bool
	cut     chan struct{} // closed at the cut
	killed  bool

	wg        sync.WaitGroup
	jobsMu    sync.Mutex // guards the producers' jobs
	producers []*powerProducer
	failures  []string
}

// kill SIGKILLs every process of the cut, once.
func (c *powerCut) kill() {
	if !c.killed {
		c.killed, c.daemon.killed = true, true
		killGroup(c.pgid)
	}
}

// run starts bin in the cut's process group and waits for it; false if
// the cut came first.
func (c *powerCut) run(bin string, args ...string) (res result, ok bool) {
	c.mu.RLock()
	if c.stopped {
		c.mu.RUnlock()
		return result{}, false
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_CRASH_AT=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: c.pgid}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Start()
	c.mu.RUnlock()
	if err != nil {
		return result{code: -1, stdout: err.Error()}, true
	}
	err = cmd.Wait()
	res.stdout = out.String()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		res.code, res.stdout = -1, err.Error()
	}
	return res, true
}

// args is the command line of p's job j.
func (c *powerCut) args(p *powerProducer, j *powerJob) ([]string, error) {
	args := []string{"submit", "--store", p.store, "--id", j.id}
	if p.high {
		args = append(args, "--priority", "high")
	}
	switch p.route {
	case routeSubmit:
		args = append(args, "--route", "require")
	case routeApply:
		args = append(args, "--route", "require", "--wait=30s")
	case routeDirect:
		args = append(args, "--route", "direct")
		if p.paced && j.k%2 == 0 {
			break // fail fast: in only while the daemon idles
		}
		args = append(args, "--wait=5s")
	case routeExec:
		args = append(args, "--route", "require")
		if j.wait {
			args = append(args, "--wait=30s")
		}
		return append(args, "exec", "note"), nil
	}
	switch j.kind {
	case kindAppend:
		return append(args, "append", p.name+".log", j.id+"\n"), nil
	case kindExisting:
		return append(args, "append", existingFile, j.id+"\n"), nil
	case kindPutNew:
		return append(args, "put", fmt.Sprintf("n/%s/%d/%s.txt", p.name, j.k%3, j.id), powerPayload(j.id)), nil
	case kindPutOver:
		return append(args, "put", p.name+".cur", powerPayload(j.id)), nil
	case kindMerge:
		return append(args, "merge", p.name+".json", fmt.Sprintf(`{%q: %d}`, j.id, j.k)), nil
	}
	type op struct {
		Op   string `json:"op"`
		Path string `json:"path"`
		Data string `json:"data"`
	}
	b, err := json.Marshal(map[string][]op{"ops": {
		{"append", p.name + ".multi", j.id + "\n"},
		{"put", fmt.Sprintf("n/%s/%s.m", p.name, j.id), powerPayload(j.id)},
	}})
	if err != nil {
		return nil, err
	}
	f := filepath.Join(c.jobDir, j.id+".json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		return nil, err
	}
	return append(args, "--job", f), nil
}

// produce runs p's jobs one after another until the cut; first, if not
// nil, is closed when job 0 has been acknowledged.
func (c *powerCut) produce(p *powerProducer, first chan struct{}) {
	c.wg.Go(func() {
		for k := 0; ; k++ {
			j := &powerJob{id: fmt.Sprintf("%s-%d", p.name, k), k: k, kind: (p.first + k) % kindCount}
			if p.route == routeExec {
				j.kind, j.wait = kindExec, k%2 == 1
			}
			if p.existing && k == 0 {
				j.kind = kindExisting
			}
			if p.limit > 0 && k >= p.limit {
				return
			}
			args, err := c.args(p, j)
			if err != nil {
				c.jobsMu.Lock()
				c.failures = append(c.failures, fmt.Sprintf("%s: %v", j.id, err))
				c.jobsMu.Unlock()
				return
			}
			r, ok := c.run(scribeBin, args...)
			if !ok {
				return
			}
			j.code, j.out = r.code, r.stdout
			c.jobsMu.Lock()
			p.jobs = append(p.jobs, j)
			// 75: busy or a bounded wait ran out; 137: the cut's SIGKILL.
			if j.code != 0 && j.code != 75 && j.code != 128+int(syscall.SIGKILL) {
				c.failures = append(c.failures, fmt.Sprintf("%s (%s): exit %d: %s", j.id, p.route, j.code, j.out))
			}
			c.jobsMu.Unlock()
			if k == 0 && first != nil && j.code == 0 {
				close(first)
			}
			if p.paced { // load, not synchronisation
				select {
				case <-time.After(time.Duration(100+rand.IntN(200)) * time.Millisecond):
				case <-c.cut:
					return
				}
			}
		}
	})
}

// startCutDaemon starts `scribe serve` as the leader of a new process
// group and waits until it serves.
func startCutDaemon(t *testing.T, store string, args ...string) *daemon {
	t.Helper()
	cmd := exec.Command(scribeBin, append([]string{"serve", "--store", store, "--log-level", "debug"}, args...)...)
	cmd.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_CRASH_AT=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	d := startProcess(t, cmd)
	d.store = store
	require.Eventually(t, func() bool {
		select {
		case <-d.exited:
			return true
		default:
		}
		disc, err := queue.ReadDiscovery(store)
		return err == nil && disc.PID == d.cmd.Process.Pid
	}, 30*time.Second, 10*time.Millisecond)
	select {
	case <-d.exited:
		t.Fatalf("scribe serve exited at start: %v\n%s", d.err, d.log.String())
	default:
	}
	return d
}

// powerStats counts, per mode, what the cuts covered.
type powerStats struct {
	cuts, jobs, acked, checked, lost, triggered int
	byRoute                                     map[string]int // acknowledged jobs by route
	// queued: acknowledged jobs applied only after the power came back,
	// found in the queue; redone: batches cut between their intent and
	// their files, finished by the next holder; reruns: exec commands cut
	// mid-run and run again.
	queued, redone, reruns int
}

func runPowerCuts(t *testing.T, fs powerFS, images string, nAlways, nInterval int, rng *rand.Rand) {
	began := time.Now()
	mnt := filepath.Join(t.TempDir(), "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	img := filepath.Join(images, fs.name+"-0.img")
	makeImage(t, fs, img)
	cur := mountImage(t, fs, img, mnt)
	holdBackWriteback(t, fs.sysctl)

	// The exec command writes through the journal: a direct write that
	// joins the daemon's hold, under an ID of its own, so that running
	// it again (rerun_safe) is harmless and its line can be counted.
	cfg := filepath.Join(t.TempDir(), "config.toml")
	shell := `exec "$0" submit --store "$SCRIBE_STORE" --route direct --id "$SCRIBE_JOB_ID-in" --newline append "exec/${SCRIBE_JOB_ID%%-*}.log" "$SCRIBE_JOB_ID"`
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, `[exec.note]
program = "/bin/sh"
args = ['-c', '%s', '%s']
timeout = "60s"
rerun_safe = true
env = { GORACE = %q }
`, shell, scribeBin, os.Getenv("GORACE")), 0o600))

	modes := slices.Repeat([]string{"always"}, nAlways)
	modes = append(modes, slices.Repeat([]string{"1s"}, nInterval)...)
	rng.Shuffle(len(modes), func(i, j int) { modes[i], modes[j] = modes[j], modes[i] })
	stats := map[string]*powerStats{}
	verified := map[string]string{}                    // path → content an earlier cut checked
	recorded := map[string]map[string]*queue.Outcome{} // store → ID → outcome an earlier cut checked
	var dstore string
	for n, mode := range modes {
		st := stats[mode]
		if st == nil {
			st = &powerStats{byRoute: map[string]int{}}
			stats[mode] = st
		}
		st.cuts++
		// A new store for the daemon every fourth cut, a new one for a
		// direct writer at every cut: first writes to fresh stores, their
		// .scribe and journal included. Their folders are made durable
		// first; the rest is scribe's to keep.
		freshDaemon := n%4 == 0
		if freshDaemon {
			dstore = filepath.Join(mnt, fmt.Sprintf("d%d", n))
			makeFreshStore(t, dstore)
		}
		fstore := filepath.Join(mnt, fmt.Sprintf("f%d", n))
		makeFreshStore(t, fstore)
		syncDir(t, mnt)

		c := &powerCut{n: n, mode: mode, jobDir: t.TempDir(), started: time.Now(), cut: make(chan struct{})}
		c.daemon = startCutDaemon(t, dstore, "--sync", mode, "--max-bytes", strconv.FormatInt(fs.maxBytes, 10),
			"--config", cfg, "--idle-release", "200ms")
		c.pgid = c.daemon.cmd.Process.Pid
		t.Cleanup(c.kill) // a cut that failed half way leaves no stopped process
		first, firstFresh := make(chan struct{}), make(chan struct{})
		names := fmt.Sprintf("c%d", n)
		c.producers = []*powerProducer{
			{name: names + "s0", store: dstore, route: routeSubmit},
			{name: names + "s1", store: dstore, route: routeSubmit, first: 2, high: true},
			{name: names + "a0", store: dstore, route: routeApply, first: 1, existing: freshDaemon && n%8 == 0},
			{name: names + "a1", store: dstore, route: routeApply, first: 3, high: true},
			{name: names + "a2", store: dstore, route: routeApply, first: 4},
			{name: names + "d0", store: dstore, route: routeDirect, first: 4, paced: true},
			{name: names + "f0", store: fstore, route: routeDirect, first: kindPutNew, limit: 5, existing: n%2 == 1},
			{name: names + "e0", store: dstore, route: routeExec},
		}
		// Some cuts begin with an outside holder of the store lock, so
		// that Submit-only jobs wait in the queue alone.
		if !freshDaemon && rng.IntN(2) == 0 {
			hold := fmt.Sprintf("%.3f", 0.1+0.5*rng.Float64())
			c.wg.Go(func() { c.run("flock", filepath.Join(dstore, ".scribe", "lock"), "sleep", hold) })
		}
		for _, p := range c.producers {
			var signal chan struct{}
			switch p.name {
			case names + "a0":
				signal = first
			case names + "f0":
				signal = firstFresh
			}
			c.produce(p, signal)
		}
		// The instant: right after the first write to a fresh store
		// returned, or at random.
		var trigger <-chan struct{}
		switch {
		case freshDaemon && n%8 == 0:
			trigger = first
		case n%3 == 1:
			trigger = firstFresh
		}
		delay := time.Duration(100+rng.IntN(1400)) * time.Millisecond
		if trigger != nil {
			delay = 30 * time.Second // the trigger comes first; this only bounds it
		}
		instant := "at random, after " + delay.String()
		select {
		case <-trigger:
			st.triggered++
			instant = "right after the first write to a fresh store returned"
		case <-time.After(delay):
			require.Nil(t, trigger, "cut %d: the first write to a fresh store never returned", n)
		}
		next := filepath.Join(images, fmt.Sprintf("%s-%d.img", fs.name, n+1))
		c.mu.Lock()
		c.stopped, c.at = true, time.Now()
		close(c.cut)
		stopGroup(t, c.pgid)
		cur.powerCut(t, next)
		c.kill()
		c.mu.Unlock()
		<-c.daemon.exited
		c.wg.Wait()
		for _, f := range c.failures {
			t.Errorf("cut %d: %s", n, f)
		}

		// The power is back: the copy, where the store was.
		cur.unmount(t)
		cur = mountImage(t, fs, next, mnt)
		recoverStores(t, c, dstore, fstore, fs, cfg, st)
		for path, want := range verified {
			got, err := os.ReadFile(path)
			if assert.NoError(t, err, "cut %d: %s, checked after an earlier cut", n, path) && string(got) != want {
				t.Errorf("cut %d: %s changed since an earlier cut checked it: %d bytes, %.40q…, were %d, %.40q…", n, path, len(got), got, len(want), want)
			}
		}
		for _, store := range []string{dstore, fstore} {
			outs := listOutcomes(t, store, time.Since(c.started)+time.Second)
			if recorded[store] == nil {
				recorded[store] = map[string]*queue.Outcome{}
			}
			for _, p := range c.producers {
				if p.store == store {
					checkProducer(t, c, p, outs, st, verified)
				}
			}
			for id, o := range outs {
				recorded[store][id] = o
			}
		}
		jobs, acked := 0, map[string]int{}
		for _, p := range c.producers {
			for _, j := range p.jobs {
				jobs++
				if j.code == 0 {
					acked[p.route]++
				}
			}
		}
		t.Logf("cut %d: --sync %s, daemon store %s, cut %s: %d jobs submitted, acknowledged %v",
			n, mode, filepath.Base(dstore), instant, jobs, acked)
		if t.Failed() {
			t.Logf("cut %d (--sync %s): the daemon's log:\n%s", n, mode, c.daemon.log.String())
			return
		}
	}
	// Every outcome checked after its cut is still recorded, unchanged.
	for store, want := range recorded {
		outs := listOutcomes(t, store, 0)
		if len(outs) >= queue.MaxJobsLimit {
			continue // more than one listing shows; each was checked after its own cut
		}
		for id, o := range want {
			assert.Equal(t, o, outs[id], "%s: the outcome of %s changed after later cuts", store, id)
		}
	}
	for _, mode := range []string{"always", "1s"} {
		if st := stats[mode]; st != nil {
			t.Logf("%s, --sync %s: %d cuts (%d right after a first write to a fresh store), %d jobs submitted, %d acknowledged (%v), %d checked; "+
				"%d acknowledged jobs applied from the queue after the cut, %d interrupted batches redone, %d exec commands run again; %d acknowledged Submit-only jobs lost",
				fs.name, mode, st.cuts, st.triggered, st.jobs, st.acked, st.byRoute, st.checked, st.queued, st.redone, st.reruns, st.lost)
		}
	}
	t.Logf("%s: %d cuts in %s", fs.name, len(modes), time.Since(began).Round(time.Millisecond))
}

// makeFreshStore makes a store folder that holds existingFile, all of it
// durable (its entry in its parent too, once the caller syncs that).
func makeFreshStore(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, os.Mkdir(dir, 0o755))
	f, err := os.Create(filepath.Join(dir, existingFile))
	require.NoError(t, err)
	_, err = f.WriteString(existingLine + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	syncDir(t, dir)
}

// syncDir fsyncs a folder, so that entries made in it are durable.
func syncDir(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Sync())
}

// recoverStores brings the cut's stores back as a user would after the
// power came back: a daemon drains the queue (redoing its interrupted
// batch, settling an interrupted exec run) and exits once idle; `scribe
// recover` redoes a batch a direct writer was interrupted in.
func recoverStores(t *testing.T, c *powerCut, dstore, fstore string, fs powerFS, cfg string, st *powerStats) {
	t.Helper()
	const idle = 200 * time.Millisecond
	d := spawnDaemon(t, dstore, nil, "--sync", c.mode, "--max-bytes", strconv.FormatInt(fs.maxBytes, 10), "--config", cfg,
		"--exit-idle", idle.String())
	select {
	case <-d.exited:
	case <-time.After(time.Minute):
		t.Fatalf("cut %d: the daemon did not drain its queue and exit within a minute:\n%s", c.n, d.log.String())
	}
	require.NoError(t, d.err, "cut %d: the draining daemon:\n%s", c.n, d.log.String())
	log := d.log.String()
	assert.NotContains(t, log, "stopping with jobs still queued")
	st.redone += strings.Count(log, "redoing an interrupted batch")
	st.reruns += strings.Count(log, "a command was interrupted; it is safe to run again")
	for _, store := range []string{dstore, fstore} {
		if _, err := os.Stat(filepath.Join(store, ".scribe", "journal.db")); errors.Is(err, os.ErrNotExist) {
			continue // never written, or lost: the checks tell which
		}
		r := scribe(t, "", "recover", "--store", store)
		require.Equal(t, 0, r.code, "cut %d: recover %s: %s%s", c.n, store, r.stdout, r.stderr)
		if strings.HasPrefix(r.stdout, "finished an interrupted batch") {
			st.redone++
		}
	}
}

// listOutcomes returns the store's recorded outcomes (of the last since,
// if not 0) by job ID, read from its journal; none if it has none.
func listOutcomes(t *testing.T, store string, since time.Duration) map[string]*queue.Outcome {
	t.Helper()
	outs := map[string]*queue.Outcome{}
	if _, err := os.Stat(filepath.Join(store, ".scribe", "journal.db")); errors.Is(err, os.ErrNotExist) {
		return outs
	}
	args := []string{"jobs", "--store", store, "--json", "--limit", strconv.Itoa(queue.MaxJobsLimit)}
	if since > 0 {
		args = append(args, "--since", since.Round(time.Second).String())
	}
	r := scribe(t, "", args...)
	require.Equal(t, 0, r.code, "jobs %s: %s", store, r.stderr)
	var list struct {
		Outcomes []*queue.Outcome `json:"outcomes"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	for _, o := range list.Outcomes {
		outs[o.ID] = o
	}
	return outs
}

// lineCounts reads a file of one job ID a line: how often each occurs,
// and their order. A missing file has none.
func lineCounts(t *testing.T, path string) (map[string]int, []string) {
	t.Helper()
	counts := map[string]int{}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return counts, nil
	}
	require.NoError(t, err)
	var order []string
	for l := range strings.Lines(string(b)) {
		id := strings.TrimSuffix(l, "\n")
		assert.True(t, strings.HasSuffix(l, "\n"), "%s: torn last line %q", path, l)
		counts[id]++
		order = append(order, id)
	}
	return counts, order
}

// checkProducer checks p's jobs against the recovered store and records
// the files it checked in verified.
func checkProducer(t *testing.T, c *powerCut, p *powerProducer, outs map[string]*queue.Outcome, st *powerStats, verified map[string]string) {
	t.Helper()
	at := func(rel string) string { return filepath.Join(p.store, rel) }
	files := map[string]bool{}
	logs := map[string][]string{} // file → the producer's IDs in it, in order
	counted := map[string]map[string]int{}
	lines := func(rel string) map[string]int {
		if counted[rel] == nil {
			counted[rel], logs[rel] = lineCounts(t, at(rel))
			files[rel] = true
		}
		return counted[rel]
	}
	var state map[string]int
	if b, err := os.ReadFile(at(p.name + ".json")); err == nil {
		assert.NoError(t, json.Unmarshal(b, &state), "cut %d: %s.json parses", c.n, p.name)
		files[p.name+".json"] = true
	}
	lastPut := -1
	for _, j := range p.jobs {
		st.jobs++
		o := outs[j.id]
		applied := o != nil && o.Applied()
		what := fmt.Sprintf("cut %d (--sync %s): %s (%s, kind %d, exit %d)", c.n, c.mode, j.id, p.route, j.kind, j.code)
		if o != nil && !applied {
			t.Errorf("%s: rejected: %s: %s", what, o.Reason, o.Detail)
		}
		if j.code == 0 {
			st.acked++
			st.byRoute[p.route]++
			if applied && o.At.After(c.at) {
				st.queued++
			}
			if !applied {
				if p.guaranteed(j, c.mode) {
					t.Errorf("%s: acknowledged, but no outcome recorded after the power cut", what)
				} else {
					st.lost++
				}
			}
		}
		st.checked++
		once := 0
		if applied {
			once = 1
		}
		switch j.kind {
		case kindAppend:
			assert.Equal(t, once, lines(p.name + ".log")[j.id], "%s: its line in %s.log", what, p.name)
		case kindExisting:
			l := lines(existingFile)
			assert.Equal(t, once, l[j.id], "%s: its line in %s", what, existingFile)
			assert.Equal(t, 1, l[existingLine], "%s: %s keeps what it held before", what, existingFile)
		case kindMulti:
			assert.Equal(t, once, lines(p.name + ".multi")[j.id], "%s: its line in %s.multi", what, p.name)
			checkPut(t, what, at(fmt.Sprintf("n/%s/%s.m", p.name, j.id)), j.id, applied)
			files[fmt.Sprintf("n/%s/%s.m", p.name, j.id)] = applied
		case kindPutNew:
			rel := fmt.Sprintf("n/%s/%d/%s.txt", p.name, j.k%3, j.id)
			checkPut(t, what, at(rel), j.id, applied)
			files[rel] = applied
		case kindPutOver:
			if applied {
				lastPut = j.k
			}
		case kindMerge:
			v, ok := state[j.id]
			assert.Equal(t, applied, ok, "%s: its key in %s.json", what, p.name)
			if ok {
				assert.Equal(t, j.k, v, "%s: its value in %s.json", what, p.name)
			}
		case kindExec:
			n := lines("exec/" + p.name + ".log")[j.id]
			inner := outs[j.id+"-in"]
			if applied {
				assert.Equal(t, 1, n, "%s: the line its command wrote, once", what)
				assert.True(t, inner != nil && inner.Applied(), "%s: its command's own write is recorded", what)
			} else {
				assert.LessOrEqual(t, n, 1, "%s: the line its command wrote, at most once", what)
				if c.mode == "always" {
					assert.Zero(t, n, "%s: no outcome, but its command ran", what)
				}
			}
			if n == 1 {
				assert.True(t, inner != nil && inner.Applied(), "%s: its command's line has no outcome", what)
			}
		}
	}
	if lastPut >= 0 {
		id := fmt.Sprintf("%s-%d", p.name, lastPut)
		checkPut(t, fmt.Sprintf("cut %d: %s.cur, last put by %s", c.n, p.name, id), at(p.name+".cur"), id, true)
		files[p.name+".cur"] = true
	} else {
		_, err := os.Stat(at(p.name + ".cur"))
		assert.ErrorIs(t, err, os.ErrNotExist, "cut %d: %s.cur, though no put of it is recorded", c.n, p.name)
	}
	// Lines only of the producer's jobs, each once, in its order.
	for rel, order := range logs {
		ks := make([]int, 0, len(order))
		for _, id := range order {
			if rel == existingFile && id == existingLine {
				continue
			}
			name, k, ok := strings.Cut(id, "-")
			n, err := strconv.Atoi(k)
			if !assert.True(t, ok && err == nil && name == p.name, "cut %d: %s holds a line of no job of %s: %q", c.n, rel, p.name, id) {
				continue
			}
			ks = append(ks, n)
		}
		assert.True(t, slices.IsSorted(ks), "cut %d: %s: lines out of order: %v", c.n, rel, order)
	}
	for rel, exists := range files {
		if !exists {
			continue
		}
		if b, err := os.ReadFile(at(rel)); err == nil {
			verified[at(rel)] = string(b)
		}
	}
}

// checkPut checks that path holds what job id put if it was applied, and
// does not exist if not.
func checkPut(t *testing.T, what, path, id string, applied bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if !applied {
		assert.ErrorIs(t, err, os.ErrNotExist, "%s: not applied, yet %s exists", what, path)
		return
	}
	if want := powerPayload(id); assert.NoError(t, err, "%s: applied, its file", what) && string(b) != want {
		t.Errorf("%s: %s holds %d bytes, %.40q…, not the %d it put", what, path, len(b), b, len(want))
	}
}
