package tests

// Benchmarks: scribe and the alternatives side by side, in one run, on the
// same workload, measured and never asserted in a timed test. They run
// only with -bench:
//
//	go test -run '^$' -bench Compare -benchtime 3s -count 3 -timeout 30m ./tests
//
// Workload: every job appends a distinct 100-byte line to one file,
// log.txt, and counts only once it is durable. The producers are scribe
// bench's (client/bench.NewProducer), so that both measure the same
// contenders:
//
//   - scribe: a real `scribe serve` process; each producer goroutine has its
//     own client.Client and calls Apply, so a counted job is applied, its
//     file and the journal fsynced. Default --sync always (JetStream fsyncs
//     each stored job); scribe-sync1s is the same with `serve --sync 1s`.
//     Each run starts a fresh store and daemon and applies 64 untimed
//     warm-up jobs (to another file) first: a starting writer applies its
//     first 16 jobs one at a time, and the steady state is what is timed.
//   - flock-blocking: each producer has its own open file description of a
//     lock file (as a separate process would), takes LOCK_EX (blocking),
//     appends with O_APPEND, fsyncs the file, unlocks.
//   - flock-failfast: the same with LOCK_EX|LOCK_NB, retrying with
//     exponential backoff (bench.FailFastFirst doubling to
//     bench.FailFastMax); after bench.FailFastRetries retries the write is
//     given up: lost.
//
// Results are also collected here, and the parent benchmark prints a
// summary with medians across -count and the ratios after its runs.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/client/bench"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
)

// benchProducers are the concurrent producer counts compared.
var benchProducers = []int{1, 8, 32, 64}

const (
	benchLineBytes = 100
	benchWarmup    = 64 // untimed jobs a daemon applies first
)

// benchSystems are the throughput contenders, in the order they run for
// each producer count (adjacent in time, so drift on a noisy machine hits
// them alike).
var benchSystems = []struct {
	name string
	run  func(b *testing.B, producers int)
}{
	{"scribe", func(b *testing.B, p int) { benchScribe(b, p) }},
	{"scribe-sync1s", func(b *testing.B, p int) { benchScribe(b, p, "--sync", "1s") }},
	{"flock-blocking", func(b *testing.B, p int) { benchFlock(b, p, "flock") }},
	{"flock-failfast", func(b *testing.B, p int) { benchFlock(b, p, "flock-failfast") }},
}

// benchColdStarts are process timings, exec to exit, one process at a time.
var benchColdStarts = []struct {
	name string
	run  func(b *testing.B)
}{
	{"submit-wait", func(b *testing.B) { benchColdSubmit(b, true) }},
	{"submit-wait-nodaemon", func(b *testing.B) { benchColdSubmit(b, false) }},
	{"lock-refused", benchLockRefused},
	{"exec-floor", benchExecFloor},
}

// BenchmarkCompare runs every contender and cold start, then prints the
// summary of what it ran.
func BenchmarkCompare(b *testing.B) {
	for _, p := range benchProducers {
		for _, s := range benchSystems {
			b.Run(fmt.Sprintf("%s/producers=%d", s.name, p), func(b *testing.B) { s.run(b, p) })
		}
	}
	for _, c := range benchColdStarts {
		b.Run("coldstart/"+c.name, c.run)
	}
	printBenchSummary(os.Stdout, b.Name())
}

// benchSample is what one measured run reported.
type benchSample struct {
	n                    int
	jobsPerSec           float64
	p50, p99             time.Duration
	lostPct, retriesPerJ float64 // fail-fast: lost writes in % of jobs, retries per job
}

// benchResults keeps, per benchmark name, the sample of each -count
// repetition. A repetition calls the function several times (b.N = 1, then
// growing); each repetition has its own *testing.B, and its last call is
// the one the framework reports, so it replaces the earlier ones.
var benchResults = struct {
	sync.Mutex
	m map[string][]benchEntry
}{m: map[string][]benchEntry{}}

type benchEntry struct {
	b *testing.B
	s benchSample
}

func recordBench(b *testing.B, s benchSample) {
	benchResults.Lock()
	defer benchResults.Unlock()
	l := benchResults.m[b.Name()]
	if n := len(l); n > 0 && l[n-1].b == b {
		l[n-1].s = s
	} else {
		l = append(l, benchEntry{b, s})
	}
	benchResults.m[b.Name()] = l
}

// benchMedian returns the median sample (by the field f) of a benchmark
// and how many repetitions it had.
func benchMedian(name string, f func(benchSample) float64) (float64, int) {
	benchResults.Lock()
	defer benchResults.Unlock()
	l := benchResults.m[name]
	if len(l) == 0 {
		return math.NaN(), 0
	}
	v := make([]float64, len(l))
	for i, e := range l {
		v[i] = f(e.s)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], len(v)
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, len(v)
}

// benchLine is a distinct line of exactly benchLineBytes bytes.
func benchLine(producer, seq int) []byte {
	s := fmt.Sprintf("producer %02d job %09d ", producer, seq)
	return []byte(s + strings.Repeat("x", benchLineBytes-len(s)-1) + "\n")
}

// jobFunc does job seq for one producer: it reports the retries it made
// and whether the write happened (false with a nil error: given up).
type jobFunc func(seq int) (retries int, written bool, err error)

// loadResult is a finished load.
type loadResult struct {
	elapsed   time.Duration
	written   int
	lost      int
	retries   int
	latencies []time.Duration // of written jobs
}

// drive runs b.N jobs spread over the producers (each takes the next job
// number when it is free) and times them; only this part is timed.
func drive(b *testing.B, do []jobFunc) loadResult {
	b.Helper()
	var next atomic.Int64
	var lost, retries atomic.Int64
	lat := make([][]time.Duration, len(do))
	var errMu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for p, job := range do {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				t0 := time.Now()
				r, ok, err := job(int(i))
				d := time.Since(t0)
				if err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("producer %d job %d: %w", p, i, err)
					}
					errMu.Unlock()
					next.Store(math.MaxInt32) // stop everyone
					return
				}
				retries.Add(int64(r))
				if ok {
					lat[p] = append(lat[p], d)
				} else {
					lost.Add(1)
				}
			}
		})
	}
	wg.Wait()
	r := loadResult{elapsed: time.Since(start), lost: int(lost.Load()), retries: int(retries.Load())}
	b.StopTimer()
	require.NoError(b, firstErr)
	for _, l := range lat {
		r.latencies = append(r.latencies, l...)
	}
	r.written = len(r.latencies)
	return r
}

// report reports and records a load's figures.
func (r loadResult) report(b *testing.B, failFast bool) {
	b.Helper()
	s := benchSample{n: b.N, jobsPerSec: float64(r.written) / r.elapsed.Seconds()}
	slices.Sort(r.latencies)
	s.p50, s.p99 = percentile(r.latencies, 0.50), percentile(r.latencies, 0.99)
	b.ReportMetric(s.jobsPerSec, "jobs/s")
	b.ReportMetric(ms(s.p50), "p50-ms")
	b.ReportMetric(ms(s.p99), "p99-ms")
	if failFast {
		s.lostPct = 100 * float64(r.lost) / float64(b.N)
		s.retriesPerJ = float64(r.retries) / float64(b.N)
		b.ReportMetric(float64(r.lost), "lost")
		b.ReportMetric(s.lostPct, "lost-%")
		b.ReportMetric(s.retriesPerJ, "retries/job")
	}
	recordBench(b, s)
}

// percentile of sorted durations (nearest rank); 0 if there are none.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// countLines counts the lines of a store file: the check that every
// counted write is there (outside the timed part).
func countLines(b *testing.B, path string) int {
	b.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	require.NoError(b, err)
	return bytes.Count(data, []byte("\n"))
}

// benchContender is the contender of scribe bench named name, and the
// workload every job here does: an append of a distinct 100-byte line to
// log.txt.
func benchContender(b *testing.B, name string) (bench.Contender, bench.Workload) {
	b.Helper()
	i := slices.IndexFunc(bench.Contenders(time.Second), func(c bench.Contender) bool { return c.Name == name })
	require.GreaterOrEqual(b, i, 0, "scribe bench has no contender %s", name)
	w := slices.IndexFunc(bench.Workloads(), func(w bench.Workload) bool { return w.Name == "append" })
	require.GreaterOrEqual(b, w, 0, "scribe bench has no append workload")
	require.Equal(b, benchLineBytes, bench.Workloads()[w].Bytes)
	return bench.Contenders(time.Second)[i], bench.Workloads()[w]
}

// newBenchProducers sets up producers of contender name in dir, and their
// jobs.
func newBenchProducers(b *testing.B, name, dir string, producers int) []jobFunc {
	b.Helper()
	ct, w := benchContender(b, name)
	ctx := context.Background()
	do := make([]jobFunc, producers)
	for p := range producers {
		pr, err := bench.NewProducer(ctx, ct, w, dir, p)
		require.NoError(b, err)
		b.Cleanup(func() { _ = pr.Close() }) // before the daemon stops (LIFO)
		do[p] = func(seq int) (int, bool, error) { return pr.Do(ctx, seq) }
	}
	return do
}

// benchScribe: producers goroutines, each with its own client, Apply
// against a `scribe serve` process.
func benchScribe(b *testing.B, producers int, serveArgs ...string) {
	store := newStore(b)
	// startDaemon logs at debug; the product's default is info.
	startDaemon(b, store, append([]string{"--log-level", "info"}, serveArgs...)...)
	ctx := context.Background()
	c, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire))
	require.NoError(b, err)
	b.Cleanup(func() { c.Close() })
	do := newBenchProducers(b, "scribe-apply-always", store, producers)
	// A starting writer applies its first 16 jobs one at a time (its
	// poison guard); measure the steady state after it, untimed.
	warm := make(chan error, benchWarmup)
	for i := range benchWarmup {
		go func() {
			job := &queue.Job{V: queue.Version, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "warmup.txt", Data: benchLine(0, i)}}}
			out, err := c.Apply(ctx, job)
			if err == nil && !out.Applied() {
				err = fmt.Errorf("job %s not applied: %w", out.ID, out.Err())
			}
			warm <- err
		}()
	}
	for range benchWarmup {
		require.NoError(b, <-warm, "warm-up")
	}
	r := drive(b, do)
	require.Equal(b, b.N, countLines(b, filepath.Join(store, "log.txt")), "applied lines in log.txt")
	r.report(b, false)
}

// benchFlock: producers goroutines, each with its own open file
// descriptions of the lock file and the data file, as separate processes
// would have: lock, append, fsync, unlock; blocking, or fail-fast
// (contender name).
func benchFlock(b *testing.B, producers int, name string) {
	dir := b.TempDir()
	r := drive(b, newBenchProducers(b, name, dir, producers))
	require.Equal(b, b.N-r.lost, countLines(b, filepath.Join(dir, "log.txt")), "written lines in log.txt")
	r.report(b, name == "flock-failfast")
}

// benchColdSubmit times `scribe submit --wait` processes, exec to exit,
// against a running daemon (or, without one, writing directly).
func benchColdSubmit(b *testing.B, withDaemon bool) {
	store := newStore(b)
	if withDaemon {
		startDaemon(b, store, "--log-level", "info")
	}
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		r := scribe(b, "", "submit", "--store", store, "--wait", "append", "log.txt", string(benchLine(0, i)))
		require.Equal(b, 0, r.code, "submit: %s", r.stderr)
		durs = append(durs, r.duration)
	}
	b.StopTimer()
	require.Equal(b, b.N, countLines(b, filepath.Join(store, "log.txt")))
	reportProcesses(b, durs)
}

// benchLockRefused times `scribe lock -- true` refused (exit 75) because
// this process holds the store lock.
func benchLockRefused(b *testing.B) {
	store := newStore(b)
	h, err := writer.Take(context.Background(), store, writer.Options{Command: "benchmark holder"})
	require.NoError(b, err)
	b.Cleanup(func() { _ = h.Unlock() })
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		r := scribe(b, "", "lock", "--store", store, "--", "true")
		require.Equal(b, 75, r.code, "lock: %s", r.stderr)
		durs = append(durs, r.duration)
	}
	b.StopTimer()
	reportProcesses(b, durs)
}

// benchExecFloor times `scribe version`: the cost of starting the binary
// at all, for scale.
func benchExecFloor(b *testing.B) {
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		r := scribe(b, "", "version")
		require.Equal(b, 0, r.code)
		durs = append(durs, r.duration)
	}
	b.StopTimer()
	reportProcesses(b, durs)
}

func reportProcesses(b *testing.B, durs []time.Duration) {
	b.Helper()
	slices.Sort(durs)
	s := benchSample{n: b.N, p50: percentile(durs, 0.50), p99: percentile(durs, 0.99)}
	b.ReportMetric(ms(s.p50), "p50-ms")
	b.ReportMetric(ms(s.p99), "p99-ms")
	recordBench(b, s)
}

// printBenchSummary prints, for what ran under parent, the medians across
// repetitions and the ratios of scribe to the alternatives.
func printBenchSummary(w io.Writer, parent string) {
	name := func(sys string, p int) string { return fmt.Sprintf("%s/%s/producers=%d", parent, sys, p) }
	jobs := func(s benchSample) float64 { return s.jobsPerSec }
	p50 := func(s benchSample) float64 { return ms(s.p50) }
	p99 := func(s benchSample) float64 { return ms(s.p99) }
	lost := func(s benchSample) float64 { return s.lostPct }
	retries := func(s benchSample) float64 { return s.retriesPerJ }
	runs := 0
	benchResults.Lock()
	for k, l := range benchResults.m {
		if strings.HasPrefix(k, parent+"/") {
			runs = max(runs, len(l))
		}
	}
	benchResults.Unlock()
	if runs == 0 {
		return
	}
	f := func(v float64, prec int) string {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return "-"
		}
		return fmt.Sprintf("%.*f", prec, v)
	}
	fmt.Fprintf(w, "\nSUMMARY (median of %d repetitions; durable appends of a distinct %d-byte line to one file)\n", runs, benchLineBytes)
	fmt.Fprintln(w, "scribe: `scribe serve` (--sync always) + client.Apply per producer; scribe-sync1s: serve --sync 1s")
	fmt.Fprintf(w, "flock-blocking: LOCK_EX, append, fsync; flock-failfast: LOCK_EX|LOCK_NB, backoff %s..%s, lost after %d retries\n",
		bench.FailFastFirst, bench.FailFastMax, bench.FailFastRetries)
	fmt.Fprintf(w, "%-9s %10s %10s %10s %10s %8s %10s %13s %16s\n",
		"producers", "scribe", "sync1s", "blocking", "failfast", "lost-%", "retries/j", "scribe÷block", "sync1s÷block")
	for _, p := range benchProducers {
		sc, _ := benchMedian(name("scribe", p), jobs)
		s1, _ := benchMedian(name("scribe-sync1s", p), jobs)
		bl, _ := benchMedian(name("flock-blocking", p), jobs)
		ff, _ := benchMedian(name("flock-failfast", p), jobs)
		lo, _ := benchMedian(name("flock-failfast", p), lost)
		re, _ := benchMedian(name("flock-failfast", p), retries)
		fmt.Fprintf(w, "%-9d %10s %10s %10s %10s %8s %10s %13s %16s\n",
			p, f(sc, 0), f(s1, 0), f(bl, 0), f(ff, 0), f(lo, 2), f(re, 2), f(sc/bl, 2), f(s1/bl, 2))
	}
	fmt.Fprintln(w, "jobs/s above; latency per job, p50 / p99 ms (failfast: written jobs only):")
	fmt.Fprintf(w, "%-9s %16s %16s %16s %16s\n", "producers", "scribe", "sync1s", "blocking", "failfast")
	for _, p := range benchProducers {
		fmt.Fprintf(w, "%-9d", p)
		for _, sys := range []string{"scribe", "scribe-sync1s", "flock-blocking", "flock-failfast"} {
			a, _ := benchMedian(name(sys, p), p50)
			z, _ := benchMedian(name(sys, p), p99)
			fmt.Fprintf(w, " %16s", f(a, 1)+" / "+f(z, 1))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "processes, exec to exit, p50 / p99 ms:")
	for _, c := range benchColdStarts {
		n := parent + "/coldstart/" + c.name
		a, _ := benchMedian(n, p50)
		z, _ := benchMedian(n, p99)
		fmt.Fprintf(w, "  %-22s %s / %s\n", c.name, f(a, 1), f(z, 1))
	}
	fmt.Fprintln(w)
}
