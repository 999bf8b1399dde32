package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// ProducerEnv, set to 1, makes `scribe bench` a producer process of
// Config.Procs: it runs Produce on its stdin and stdout.
const ProducerEnv = "SCRIBE_BENCH_PRODUCER"

// spec is what the producers of a run do.
type spec struct {
	Contender Contender     `json:"contender"`
	Workload  Workload      `json:"workload"`
	Dir       string        `json:"dir"`      // the store (scribe) or the folder (flock)
	Duration  time.Duration `json:"duration"` // how long to produce, when Jobs is 0
	Jobs      int           `json:"jobs"`     // jobs per producer; 0: by Duration
	Producer  int           `json:"producer"` // Config.Procs: this process's producer number
}

// producerResult is what one producer did.
type producerResult struct {
	Ready     bool    `json:"ready,omitempty"` // Config.Procs: set up, waiting for the start
	Seqs      int     `json:"seqs"`            // jobs attempted, numbered 1..Seqs
	Done      int     `json:"done"`            // jobs counted: applied, queued or written
	LastSeq   int     `json:"last_seq"`        // the last job counted
	LastID    string  `json:"last_id,omitempty"`
	GaveUp    []int   `json:"gave_up,omitempty"` // fail-fast: jobs given up (lost)
	Retries   int     `json:"retries"`
	Syncs     int     `json:"syncs"`  // flock: fsyncs made
	Latencies []int64 `json:"lat_ns"` // of counted jobs
	// Config.Procs: the process's own CPU time and /proc/self/io over
	// the run, and when it ended.
	CPUNS      int64  `json:"cpu_ns,omitempty"`
	WriteBytes int64  `json:"write_bytes,omitempty"`
	WChar      int64  `json:"wchar,omitempty"`
	End        int64  `json:"end_unix_ns,omitempty"`
	Err        string `json:"err,omitempty"`
}

// jobsFor is the count of jobs per producer for workload w; 0: by time.
func (b *bench) jobsFor(w Workload) int {
	if b.Jobs > 0 && w.Name == "put1m" {
		return max(1, b.Jobs/put1mJobsDivisor)
	}
	return b.Jobs
}

// run runs one contender on one workload with producers producers, on a
// fresh store, and measures it. With countSyncs, a scribe contender runs
// a second time, untimed, its daemon under strace, for its syncs per job.
func (b *bench) run(ctx context.Context, ct Contender, w Workload, producers int, countSyncs bool) (Figures, error) {
	f, err := b.measure(ctx, ct, w, producers, "")
	if err != nil || !ct.Scribe || !countSyncs || b.cfg.Strace == "" {
		return f, err
	}
	b.progress.add(", again under strace for syncs")
	g, err := b.measure(ctx, ct, w, producers, b.cfg.Strace)
	if err != nil {
		return f, fmt.Errorf("the run under strace: %w", err)
	}
	if g.Lost > 0 || g.Doubled > 0 {
		return f, fmt.Errorf("the run under strace lost %.0f and doubled %.0f writes", g.Lost, g.Doubled)
	}
	f.SyncsPerJob = g.SyncsPerJob
	return f, nil
}

// measure is one run; with strace (its path), the daemon runs under it
// and only the syncs per job it counts are worth anything.
func (b *bench) measure(ctx context.Context, ct Contender, w Workload, producers int, strace string) (f Figures, err error) {
	dir, err := b.runDir()
	if err != nil {
		return f, err
	}
	defer func() {
		switch {
		case err != nil: // keep what shows why
			b.failed = true
			err = fmt.Errorf("%w\n(the run's store and daemon log are kept in %s)", err, dir)
		case !b.cfg.Keep:
			os.RemoveAll(dir)
		}
	}()
	spec := spec{Contender: ct, Workload: w, Dir: filepath.Join(dir, "store"), Duration: b.duration, Jobs: b.jobsFor(w)}
	if err := os.Mkdir(spec.Dir, 0o755); err != nil {
		return f, fmt.Errorf("make store: %w", err)
	}
	var d *benchDaemon
	var c *client.Client // the bench's own: warm-up, and waiting for the queue to drain
	if ct.Scribe {
		if d, err = startBenchDaemon(ctx, b.cfg.Scribe, strace, dir, spec.Dir, ct.Sync); err != nil {
			return f, err
		}
		defer func() {
			if serr := d.stop(); err == nil {
				err = serr
			}
		}()
		if c, err = client.Open(ctx, spec.Dir, client.WithRoute(client.RouteRequire)); err != nil {
			return f, fmt.Errorf("open client: %w", err)
		}
		defer c.Close()
		if err := warmUp(ctx, c); err != nil {
			return f, fmt.Errorf("warm-up: %w", err)
		}
	}

	var before benchSnapshot
	load := b.loadGoroutines
	if b.Procs {
		load = b.loadProcs
	}
	results, start, end, err := load(ctx, spec, producers, func() { before = snapshot(ctx, d, true) })
	if err != nil {
		return f, err
	}
	if ct.Submit {
		if err := drain(ctx, c, d, results); err != nil {
			return f, err
		}
		end = time.Now()
	}
	after := snapshot(ctx, d, false)
	if d != nil && before.metricsErr == nil && after.metricsErr == nil {
		done := 0
		for _, r := range results {
			done += r.Done
		}
		after.metrics, after.metricsErr = d.settle(ctx, after.metrics, before.metrics.Applied+float64(done))
	}

	lost, doubled, err := verifyRun(w, spec.Dir, results)
	if err != nil {
		return f, err
	}
	f = figures(results, end.Sub(start))
	for _, r := range results {
		lost += len(r.GaveUp)
	}
	if d != nil && w.Name != "append" && before.metricsErr == nil && after.metricsErr == nil {
		// Only the last write of each producer shows in a merged or
		// replaced file: compare the daemon's count of applied jobs too.
		applied := int(after.metrics.Applied - before.metrics.Applied)
		lost = max(lost, int(f.Jobs)-applied)
		doubled = max(doubled, applied-int(f.Jobs))
	}
	f.Lost, f.Doubled = float64(lost), float64(doubled)
	perJob := func(x float64) *float64 {
		if f.Jobs == 0 {
			return nil
		}
		return ptr(x / f.Jobs)
	}

	// CPU and bytes written: the producers' and the daemon's.
	clientCPU := after.selfCPU - before.selfCPU
	clientIO := after.selfIO.minus(before.selfIO)
	if b.Procs {
		clientCPU, clientIO = 0, procIO{}
		for _, r := range results {
			clientCPU += time.Duration(r.CPUNS)
			clientIO.writeBytes += r.WriteBytes
			clientIO.wchar += r.WChar
		}
	}
	total, totalIO, known := clientCPU, clientIO, true
	f.CPUClientUS = perJob(us(clientCPU))
	if d != nil {
		known = before.daemonOK && after.daemonOK
		if known {
			dcpu := after.daemonCPU - before.daemonCPU
			f.CPUDaemonUS = perJob(us(dcpu))
			total += dcpu
			dio := after.daemonIO.minus(before.daemonIO)
			totalIO.writeBytes += dio.writeBytes
			totalIO.wchar += dio.wchar
		} else {
			totalIO = procIO{} // the daemon's share not known: no figure
		}
		if before.metricsErr == nil && after.metricsErr == nil {
			f.BatchMean, f.BatchP50 = batchStats(before.metrics, after.metrics)
		}
	}
	if known {
		f.CPUTotalUS = perJob(us(total))
	}
	switch {
	case totalIO.writeBytes > 0:
		f.BytesPerJob, f.BytesSource = perJob(float64(totalIO.writeBytes)), "write_bytes"
	case totalIO.wchar > 0: // the filesystem does not account write_bytes
		f.BytesPerJob, f.BytesSource = perJob(float64(totalIO.wchar)), "wchar"
	}

	// Syncs: flock counts its own; the daemon's are in its trace, complete
	// once strace has exited.
	if !ct.Scribe {
		syncs := 0
		for _, r := range results {
			syncs += r.Syncs
		}
		f.SyncsPerJob = perJob(float64(syncs))
	} else if d.tracePath != "" {
		if err := d.stop(); err != nil {
			return f, err
		}
		n, err := countSyncsFile(d.tracePath, start, end)
		if err != nil {
			return f, err
		}
		f.SyncsPerJob = perJob(float64(n))
	}
	return f, nil
}

// figures computes rate and latency from the producers' results.
func figures(results []producerResult, elapsed time.Duration) Figures {
	var lat []time.Duration
	var f Figures
	attempts := 0
	for _, r := range results {
		for _, ns := range r.Latencies {
			lat = append(lat, time.Duration(ns))
		}
		f.Jobs += float64(r.Done)
		f.Retries += float64(r.Retries)
		attempts += r.Seqs
	}
	slices.Sort(lat)
	f.Seconds = elapsed.Seconds()
	if f.Seconds > 0 {
		f.JobsPerSec = f.Jobs / f.Seconds
	}
	f.P50MS, f.P99MS = ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99))
	if attempts > 0 {
		f.RetriesPerJob = f.Retries / float64(attempts)
	}
	return f
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// warmUp applies untimed jobs through a fresh daemon, to another file.
func warmUp(ctx context.Context, c *client.Client) error {
	errs := make([]error, benchWarmup)
	var wg sync.WaitGroup
	for i := range benchWarmup {
		wg.Go(func() {
			job := &queue.Job{V: queue.Version, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "warmup.txt", Data: fmt.Appendf(nil, "warm-up %d\n", i)}}}
			out, err := c.Apply(ctx, job)
			if err == nil && !out.Applied() {
				err = fmt.Errorf("job %s not applied: %w", out.ID, out.Err())
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// drainStall is how long the queue may go without applying a job while
// drain waits for it.
const drainStall = 30 * time.Second

// drain waits until every job a Submit-only run queued is decided: each
// producer's last job, since a store's jobs are applied in the order the
// queue took them. A queue that stops moving is an error, which says
// where the jobs waited for stand.
func drain(ctx context.Context, c *client.Client, d *benchDaemon, results []producerResult) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(results))
	var wg sync.WaitGroup
	for i, r := range results {
		if r.LastID == "" {
			continue
		}
		wg.Go(func() {
			l, err := c.Wait(ctx, r.LastID)
			if err == nil && !l.Outcome.Applied() {
				err = fmt.Errorf("job %s not applied: %w", r.LastID, l.Outcome.Err())
			}
			errs[i] = err
		})
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	tick := time.NewTicker(drainStall)
	defer tick.Stop()
	applied := -1.0
	for {
		select {
		case <-waited:
			if err := errors.Join(errs...); err != nil {
				return fmt.Errorf("wait for the queue to drain: %w", err)
			}
			return nil
		case <-tick.C:
		}
		m, err := d.scrape(ctx)
		if err == nil && m.Applied > applied {
			applied = m.Applied
			continue
		}
		stuck := stuckJobs(ctx, c, results)
		cancel()
		<-waited
		return fmt.Errorf("the queue stopped draining: no job applied for %s (%v)%s%s", drainStall, err, stuck, d.logTail())
	}
}

// stuckJobs says where the producers' last jobs stand.
func stuckJobs(ctx context.Context, c *client.Client, results []producerResult) string {
	var sb strings.Builder
	for _, r := range results {
		if r.LastID == "" {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := c.Locate(lctx, r.LastID)
		cancel()
		switch {
		case err != nil:
			fmt.Fprintf(&sb, "\n  job %s: %v", r.LastID, err)
		case l.Found:
			fmt.Fprintf(&sb, "\n  job %s: %s", r.LastID, l.Outcome.Status)
		default:
			fmt.Fprintf(&sb, "\n  job %s: %s %d of %d %s", r.LastID, l.State, l.Position, l.Queued, l.Detail)
		}
	}
	return sb.String()
}

// loadGoroutines runs the producers as goroutines of this process, each
// with its own client or open files, as separate processes would have.
// mark is called just before they start.
func (b *bench) loadGoroutines(ctx context.Context, s spec, producers int, mark func()) (results []producerResult, start, end time.Time, err error) {
	workers := make([]Producer, producers)
	errs := make([]error, producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() { workers[p], errs[p] = NewProducer(ctx, s.Contender, s.Workload, s.Dir, p) })
	}
	wg.Wait()
	defer func() {
		for _, w := range workers {
			if w != nil {
				_ = w.Close()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return nil, start, end, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results = make([]producerResult, producers)
	gate := make(chan struct{})
	var until time.Time
	for p := range producers {
		wg.Go(func() {
			<-gate
			results[p] = produce(ctx, workers[p], until, s.Jobs)
			if results[p].Err != "" {
				cancel() // the run is lost: stop the others
			}
		})
	}
	mark()
	start = time.Now()
	until = start.Add(s.Duration)
	close(gate)
	wg.Wait()
	end = time.Now()
	return results, start, end, producerErr(results)
}

// loadProcs runs each producer as a process of this binary: all set up
// first, then started together. mark is called just before the start.
func (b *bench) loadProcs(ctx context.Context, s spec, producers int, mark func()) (results []producerResult, start, end time.Time, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type proc struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Reader
	}
	var procs []*proc
	defer func() {
		for _, pr := range procs {
			_ = pr.in.Close() // one still waiting for the start exits
		}
		if err != nil {
			cancel() // kills those still producing
		}
		for _, pr := range procs {
			_ = pr.cmd.Wait()
		}
	}()
	for p := range producers {
		s.Producer = p
		spec, err := json.Marshal(s)
		if err != nil {
			return nil, start, end, err
		}
		cmd := exec.CommandContext(ctx, b.cfg.Scribe, "bench")
		cmd.Env = append(os.Environ(), ProducerEnv+"=1")
		if os.Getenv("GOMAXPROCS") == "" {
			// As the lean scribe binary runs, which hooks are: a process
			// that waits on one connection at a time, where a second P
			// only adds threads that spin and wake each other.
			cmd.Env = append(cmd.Env, "GOMAXPROCS=1")
		}
		cmd.Stderr = b.cfg.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, start, end, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, start, end, err
		}
		if err := cmd.Start(); err != nil {
			return nil, start, end, fmt.Errorf("start producer process: %w", err)
		}
		pr := &proc{cmd: cmd, in: in, out: bufio.NewReader(out)}
		procs = append(procs, pr)
		if _, err := fmt.Fprintf(in, "%s\n", spec); err != nil {
			return nil, start, end, fmt.Errorf("producer process %d: %w", p, err)
		}
	}
	read := func(p int) (producerResult, error) {
		var r producerResult
		line, err := procs[p].out.ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &r)
		}
		if err == nil && r.Err != "" {
			err = errors.New(r.Err)
		}
		if err != nil {
			return r, fmt.Errorf("producer process %d: %w", p, err)
		}
		return r, nil
	}
	for p := range procs {
		if _, err := read(p); err != nil {
			return nil, start, end, err
		}
	}
	mark()
	start = time.Now()
	for p, pr := range procs {
		if _, err := io.WriteString(pr.in, "go\n"); err != nil {
			return nil, start, end, fmt.Errorf("producer process %d: %w", p, err)
		}
	}
	results = make([]producerResult, producers)
	end = start
	for p := range procs {
		if results[p], err = read(p); err != nil {
			return nil, start, end, err
		}
		if e := time.Unix(0, results[p].End); e.After(end) {
			end = e
		}
	}
	return results, start, end, nil
}

// Produce is a producer process of Config.Procs: it reads what to do on
// stdin, answers {"ready":true} once set up, waits for a line, produces,
// and prints what it did, as JSON on stdout.
func Produce(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewReader(stdin)
	enc := json.NewEncoder(stdout)
	var s spec
	line, err := in.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &s)
	}
	if err != nil {
		return fmt.Errorf("bench producer: read its spec: %w", err)
	}
	w, err := NewProducer(ctx, s.Contender, s.Workload, s.Dir, s.Producer)
	if err != nil {
		_ = enc.Encode(producerResult{Err: err.Error()})
		return err
	}
	defer w.Close()
	if err := enc.Encode(producerResult{Ready: true}); err != nil {
		return err
	}
	if _, err := in.ReadString('\n'); err != nil {
		return nil // the bench gave up
	}
	cpu0, io0 := rusageSelf(), readProcIO("self")
	start := time.Now()
	r := produce(ctx, w, start.Add(s.Duration), s.Jobs)
	r.End = time.Now().UnixNano()
	r.CPUNS = int64(rusageSelf() - cpu0)
	dio := readProcIO("self").minus(io0)
	r.WriteBytes, r.WChar = dio.writeBytes, dio.wchar
	return enc.Encode(r)
}

// produce does jobs 1, 2, … until the count is done (jobs > 0) or the
// time is up, and times each.
func produce(ctx context.Context, w Producer, until time.Time, jobs int) producerResult {
	var r producerResult
	for seq := 1; ; seq++ {
		if jobs > 0 && seq > jobs || jobs == 0 && !time.Now().Before(until) {
			break
		}
		t0 := time.Now()
		retries, ok, err := w.Do(ctx, seq)
		lat := time.Since(t0)
		r.Seqs = seq
		r.Retries += retries
		if err != nil {
			r.Err = fmt.Sprintf("job %d: %v", seq, err)
			break
		}
		if ok {
			r.Done++
			r.LastSeq = seq
			r.Latencies = append(r.Latencies, int64(lat))
		} else {
			r.GaveUp = append(r.GaveUp, seq)
		}
	}
	r.Syncs, r.LastID = w.stats()
	return r
}

// producerErr is the first producer's error, if any.
func producerErr(results []producerResult) error {
	for p, r := range results {
		if r.Err != "" {
			return fmt.Errorf("producer %d: %s", p, r.Err)
		}
	}
	return nil
}
