package bench

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

func TestPercentile(t *testing.T) {
	ds := func(ms ...int) []time.Duration {
		var out []time.Duration
		for _, m := range ms {
			out = append(out, time.Duration(m)*time.Millisecond)
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", ds(7), 0.99, 7 * time.Millisecond},
		{"median of odd", ds(1, 2, 3), 0.5, 2 * time.Millisecond},
		{"median of even is the lower", ds(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p99 of 100", ds(hundred...), 0.99, 99 * time.Millisecond},
		{"p99 of 3 is the max", ds(1, 2, 3), 0.99, 3 * time.Millisecond},
		{"p0 is the min", ds(1, 2, 3), 0, 1 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, percentile(tc.sorted, tc.q))
		})
	}
}

func TestMedianFigures(t *testing.T) {
	assert.True(t, isNaN(median(nil)))
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))

	rounds := []Figures{
		{Jobs: 10, JobsPerSec: 100, SyncsPerJob: ptr(1.0), BytesSource: "write_bytes"},
		{Jobs: 30, JobsPerSec: 300, SyncsPerJob: nil},
		{Jobs: 20, JobsPerSec: 200, SyncsPerJob: ptr(3.0)},
	}
	m := medianFigures(rounds)
	assert.Equal(t, 20.0, m.Jobs)
	assert.Equal(t, 200.0, m.JobsPerSec)
	require.NotNil(t, m.SyncsPerJob, "the rounds that measured it")
	assert.Equal(t, 2.0, *m.SyncsPerJob)
	assert.Nil(t, m.BatchMean, "measured in no round")
	assert.Equal(t, "write_bytes", m.BytesSource)
}

func isNaN(f float64) bool { return f != f }

// Ratios are paired within each round: a round where both ran slow
// cancels out, and a round one of them did not measure is left out.
func TestPairedSpread(t *testing.T) {
	nan := math.NaN()
	r := paired([]float64{200, 100, 300, nan}, []float64{100, 50, 0, 10})
	assert.Equal(t, []float64{2, 2}, r, "the slow round pairs like the fast; no ratio to a zero or of a NaN")
	s, ok := spread(r)
	require.True(t, ok)
	assert.Equal(t, Spread{Median: 2, Min: 2, Max: 2, N: 2}, s)

	s, ok = spread([]float64{5, nan, 1, 3})
	require.True(t, ok)
	assert.Equal(t, Spread{Median: 3, Min: 1, Max: 5, N: 3}, s)
	_, ok = spread([]float64{nan})
	assert.False(t, ok)

	assert.Equal(t, "1.50× (1.20–2.00)", spreadText(Spread{Median: 1.5, Min: 1.2, Max: 2, N: 3}, ratioText, "×"))
	assert.Equal(t, "1234", spreadText(Spread{Median: 1234, Min: 1233.9, Max: 1234.2, N: 3}, figureText, ""), "rounds that agree")
	assert.Equal(t, "12.5", spreadText(Spread{Median: 12.5, Min: 1, Max: 99, N: 1}, figureText, ""), "one round")
	assert.Equal(t, "0.25", figureText(0.25))
}

// The targets pair each scribe figure with the alternative's of the same
// round, and leave out what did not run.
func TestTargets(t *testing.T) {
	fig := func(rate, p50 float64) Figures {
		return Figures{JobsPerSec: rate, P50MS: p50, CPUTotalUS: ptr(rate / 10)}
	}
	rep := &Report{Settings: Settings{Producers: []int{1, 4}, Relaxed: "1s", Hooks: 3, Submits: 2, Rounds: 2}}
	rep.Results = []Result{
		{Workload: "append", Producers: 4, Contender: "scribe-apply-1s", Rounds: []Figures{fig(100, 1), fig(50, 1)}},
		{Workload: "append", Producers: 4, Contender: "flock", Rounds: []Figures{fig(200, 1), fig(50, 1)}},
		{Workload: "append", Producers: 1, Contender: "scribe-apply-1s", Rounds: []Figures{fig(10, 3), fig(10, 5)}},
	}
	rep.Hooks = []HookResult{
		{Measure: MeasureSubmit, Contender: HookScribe, Rounds: []HookFigures{{P50MS: 10, CPUTotalUS: ptr(100.0)}, {P50MS: 30, CPUTotalUS: ptr(300.0)}}},
		{Measure: MeasureSubmit, Contender: HookFlock, Rounds: []HookFigures{{P50MS: 5, CPUTotalUS: ptr(10.0)}, {P50MS: 10, CPUTotalUS: ptr(10.0)}}},
	}
	byFigure := map[string]Target{}
	for _, tg := range targets(rep) {
		byFigure[tg.Figure+" "+tg.Scribe] = tg
	}
	tg := byFigure["submit --wait, warm daemon: wall p50 ms scribe submit --wait"]
	require.NotNil(t, tg.Ratio)
	assert.Equal(t, Spread{Median: 2.5, Min: 2, Max: 3, N: 2}, *tg.Ratio, "10/5 and 30/10, not 20/7.5")
	assert.Equal(t, Spread{Median: 20, Min: 10, Max: 30, N: 2}, tg.Value)

	tg = byFigure["4 producers, append: jobs/s scribe-apply-1s"]
	require.NotNil(t, tg.Ratio)
	assert.Equal(t, Spread{Median: 0.75, Min: 0.5, Max: 1, N: 2}, *tg.Ratio)

	tg = byFigure["1 producer, append: p50 ms scribe-apply-1s"]
	assert.Equal(t, 4.0, tg.Value.Median)
	assert.Nil(t, tg.AltValue, "flock did not run at 1 producer")
	assert.Nil(t, tg.Ratio)

	for f := range byFigure {
		assert.NotContains(t, f, "hooks at once", "the burst did not run")
		assert.NotContains(t, f, "put1m", "put1m did not run")
		assert.NotContains(t, f, "always", "scribe-apply-always did not run")
	}

	var out bytes.Buffer
	writeTargets(&out, targets(rep), 2)
	assert.Contains(t, out.String(), "2.50× (2.00–3.00)")
	assert.Contains(t, out.String(), "n/a")
}

// The progress line never outgrows the terminal, whose width is unknown
// here: a buffer is no terminal.
func TestProgressFits(t *testing.T) {
	assert.Equal(t, "abc", fit("abc", 3))
	assert.Equal(t, "ab…", fit("abcd", 3))
	assert.Equal(t, "µ…", fit("µµµ", 2), "columns are runes, not bytes")
	assert.Empty(t, fit("abc", 0))

	var buf bytes.Buffer
	p := newProgress(&buf, true)
	p.show("round %d/%d  %s", 1, 5, strings.Repeat("x", 200))
	p.add(", again")
	for line := range strings.SplitSeq(buf.String(), "\r\033[K") {
		assert.LessOrEqual(t, len([]rune(line)), 79)
	}
	assert.Equal(t, 2, strings.Count(buf.String(), "\r\033[K"))
	buf.Reset()
	newProgress(&buf, false).show("hidden")
	assert.Empty(t, buf.String())
}

func TestCountSyncs(t *testing.T) {
	const trace = `1234 1700000000.100000 fsync(5)        = 0
1234 1700000001.000000 fdatasync(7)    = 0
1235 1700000001.500000 fsync(9 <unfinished ...>
1234 1700000001.600000 fdatasync(7 <unfinished ...>
1235 1700000001.700000 <... fsync resumed>) = 0
1234 1700000001.800000 <... fdatasync resumed>) = 0
1236 1700000001.900000 sync_file_range(3, 0, 0, SYNC_FILE_RANGE_WRITE) = 0
1236 1700000001.950000 msync(0x7f0000000000, 4096, MS_SYNC) = 0
1236 1700000001.960000 write(3, "x", 1) = 1
[pid  1237] 1700000001.970000 fsync(3) = 0
1700000001.980000 fsync(4) = 0
1234 1700000002.000000 +++ exited with 0 +++
garbage line
1234 1700000003.000000 fsync(5)        = 0
`
	from, to := time.Unix(1700000001, 0), time.Unix(1700000002, 0)
	n, err := countSyncs(strings.NewReader(trace), from, to)
	require.NoError(t, err)
	// In the window: fdatasync at 1.0, the two unfinished calls (once
	// each), sync_file_range, msync, and the fsyncs written as on a
	// terminal ([pid N]) and without a pid.
	assert.Equal(t, 7, n)

	n, err = countSyncs(strings.NewReader(""), from, to)
	require.NoError(t, err)
	assert.Zero(t, n)

	_, ok := straceTime("1700000001.5")
	assert.False(t, ok, "-ttt has microseconds")
	at, ok := straceTime("1700000001.000250")
	require.True(t, ok)
	assert.Equal(t, time.Unix(1700000001, 250_000), at)
}

// ReadMetrics sums a daemon's series over their labels, and batchStats
// reads the batch histogram between two scrapes. (The daemon's own tests
// hold its metric names to what ReadMetrics reads.)
func TestReadMetrics(t *testing.T) {
	read := func(text string) Metrics {
		t.Helper()
		m, err := ReadMetrics(strings.NewReader(text))
		require.NoError(t, err)
		return m
	}
	before := read(`# HELP scribe_jobs_total Jobs decided.
# TYPE scribe_jobs_total counter
scribe_jobs_total{reason="",status="applied"} 1
scribe_batch_size_bucket{le="1"} 1
scribe_batch_size_bucket{le="2"} 1
scribe_batch_size_bucket{le="4"} 1
scribe_batch_size_bucket{le="+Inf"} 1
scribe_batch_size_sum 1
scribe_batch_size_count 1
`)
	assert.Equal(t, 1.0, before.Applied)
	after := read(`scribe_jobs_total{reason="",status="applied"} 40
scribe_jobs_total{reason="",status="applied",store="b"} 4
scribe_jobs_total{reason="bad_input",status="rejected"} 1
scribe_batch_size_bucket{le="1"} 2
scribe_batch_size_bucket{le="2"} 2
scribe_batch_size_bucket{le="4"} 4
scribe_batch_size_bucket{le="8"} 5
scribe_batch_size_bucket{le="32"} 6
scribe_batch_size_bucket{le="+Inf"} 6
scribe_batch_size_sum 44
scribe_batch_size_count 6
go_goroutines 12
`)
	assert.Equal(t, 44.0, after.Applied, "applied jobs only, over every store")
	mean, p50 := batchStats(before, after)
	require.NotNil(t, mean)
	assert.InDelta(t, 43.0/5, *mean, 1e-9)
	require.NotNil(t, p50)
	assert.Equal(t, 4.0, *p50, "the median batch, 3, is in the bucket up to 4")

	mean, p50 = batchStats(after, after)
	assert.Nil(t, mean, "no batch between the scrapes")
	assert.Nil(t, p50)
}

func TestPick(t *testing.T) {
	got, err := pick("workload", []string{"put4k", "append"}, workloads, func(w Workload) string { return w.Name })
	require.NoError(t, err)
	assert.Equal(t, []string{"append", "put4k"}, names(got, func(w Workload) string { return w.Name }), "in the bench's order")
	_, err = pick("workload", []string{"append", "nope"}, workloads, func(w Workload) string { return w.Name })
	require.ErrorIs(t, err, ErrConfig)
	assert.EqualError(t, err, `unknown workload "nope"; want some of append, merge, put4k, put1m`)
}

func TestBenchJob(t *testing.T) {
	for _, w := range workloads {
		t.Run(w.Name, func(t *testing.T) {
			kind, path, data := benchJob(w, 12, 345)
			assert.Len(t, data, w.Bytes, "the payload is the workload's size")
			assert.NotEmpty(t, path)
			job := &queue.Job{V: queue.Version, ID: queue.NewID(), Store: queue.StoreID("/s"), Ops: []queue.Op{{Kind: kind, Path: path, Data: data}}}
			_, err := queue.Encode(job)
			require.NoError(t, err, "the job fits the queue")
			if w.Name != "merge" {
				p, seq, ok := parseHead(data)
				require.True(t, ok)
				assert.Equal(t, [2]int{12, 345}, [2]int{p, seq})
			}
		})
	}
	_, _, ok := parseHead([]byte("warm-up 3\n"))
	assert.False(t, ok)
}

// flockWorkers runs producers' jobs through flock workers on dir, one
// after the other, and returns their results.
func flockWorkers(t *testing.T, dir string, w Workload, producers, jobs int, failFast bool) []producerResult {
	t.Helper()
	results := make([]producerResult, producers)
	for p := range producers {
		fw, err := openFlockWorker(dir, w, p, failFast)
		require.NoError(t, err)
		results[p] = produce(context.Background(), fw, time.Time{}, jobs)
		require.NoError(t, fw.Close())
		require.Empty(t, results[p].Err)
	}
	return results
}

func TestFlockWorkerAndVerify(t *testing.T) {
	for _, w := range workloads[:3] {
		t.Run(w.Name, func(t *testing.T) {
			dir := t.TempDir()
			results := flockWorkers(t, dir, w, 3, 4, false)
			for _, r := range results {
				assert.Equal(t, 4, r.Done)
				assert.Equal(t, 4, r.LastSeq)
				assert.Len(t, r.Latencies, 4)
				syncs := 2 // temp file and folder
				if w.Name == "append" {
					syncs = 1
				}
				assert.Equal(t, 4*syncs, r.Syncs)
			}
			lost, doubled, err := verifyRun(w, dir, results)
			require.NoError(t, err)
			assert.Zero(t, lost)
			assert.Zero(t, doubled)

			// A producer that claims a write the files do not hold.
			results[1].Seqs, results[1].LastSeq = 5, 5
			lost, _, err = verifyRun(w, dir, results)
			require.NoError(t, err)
			assert.Equal(t, 1, lost)
		})
	}
}

func TestVerifyAppend(t *testing.T) {
	w := workloads[0]
	dir := t.TempDir()
	var log bytes.Buffer
	for _, j := range [][2]int{{0, 1}, {0, 2}, {0, 2}, {1, 1}, {1, 3}} {
		_, _, data := benchJob(w, j[0], j[1])
		log.Write(data)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "log.txt"), log.Bytes(), 0o644))
	results := []producerResult{
		{Seqs: 3},                   // 3 missing, 2 twice
		{Seqs: 3, GaveUp: []int{2}}, // 2 given up: not missing
	}
	lost, doubled, err := verifyRun(w, dir, results)
	require.NoError(t, err)
	assert.Equal(t, 1, lost)
	assert.Equal(t, 1, doubled)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "log.txt"), []byte("producer 0000 job 000000001 torn"), 0o644))
	_, _, err = verifyRun(w, dir, results)
	assert.ErrorContains(t, err, "damaged line")
}

func TestFlockFailFastGivesUp(t *testing.T) {
	dir := t.TempDir()
	holder, err := openFlockWorker(dir, workloads[0], 0, false)
	require.NoError(t, err)
	defer holder.Close()
	_, ok, err := holder.take(context.Background())
	require.True(t, ok)
	require.NoError(t, err)

	fw, err := openFlockWorker(dir, workloads[0], 1, true)
	require.NoError(t, err)
	defer fw.Close()
	r := produce(context.Background(), fw, time.Time{}, 2)
	assert.Empty(t, r.Err)
	assert.Zero(t, r.Done)
	assert.Equal(t, []int{1, 2}, r.GaveUp)
	assert.Equal(t, 2*FailFastRetries, r.Retries)
}

func TestProcCounters(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc")
	}
	cpu, ok := procCPU(os.Getpid())
	require.True(t, ok)
	assert.GreaterOrEqual(t, cpu, time.Duration(0))
	io := readProcIO("self")
	assert.True(t, io.ok)
	_, ok = procCPU(0)
	assert.False(t, ok)
	assert.Greater(t, rusageSelf(), time.Duration(0))
}

func TestBenchSVG(t *testing.T) {
	all := Contenders(time.Second)
	rep := &Report{Settings: Settings{Rounds: 3}, Workloads: workloads[:2], Contenders: all}
	for i, ct := range all {
		for _, p := range []int{1, 8, 32} {
			rep.Results = append(rep.Results, Result{Workload: "append", Producers: p, Contender: ct.Name,
				Median: Figures{JobsPerSec: float64(100 * (i + 1) * p), P99MS: float64(i+1) / 3}})
		}
	}
	// merge has one contender with a zero rate (nothing on a log scale)
	// and the others none: a panel with no data.
	rep.Results = append(rep.Results, Result{Workload: "merge", Producers: 1, Contender: "flock"})
	svg := rep.SVG()
	dec := xml.NewDecoder(strings.NewReader(svg))
	var texts []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the chart is well-formed XML")
		if cd, ok := tok.(xml.CharData); ok {
			texts = append(texts, string(cd))
		}
	}
	text := strings.Join(texts, "\n")
	for _, ct := range all {
		assert.Contains(t, text, ct.Name)
	}
	for _, s := range []string{"producers", "append: ", "merge: ", "no data", "p99 latency", "1k", "32"} {
		assert.Contains(t, text, s)
	}
	assert.Contains(t, svg, "polyline")
}
