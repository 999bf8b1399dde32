package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/daemon"
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

	rounds := []benchFigures{
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

// The figures bench reads come from the daemon's own registry: a renamed
// metric fails here.
func TestParseDaemonMetrics(t *testing.T) {
	m, handler := daemon.NewPrometheus()
	scrape := func(daemon.Observer) daemonMetrics {
		t.Helper()
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		dm, err := parseDaemonMetrics(rec.Body)
		require.NoError(t, err)
		return dm
	}
	applied := func(n int) {
		for range n {
			m.Outcome(&queue.Outcome{Status: queue.StatusApplied, At: time.Now()}, time.Time{}, false)
		}
	}
	m.BatchApplied(1, time.Millisecond)
	applied(1)
	before := scrape(m)
	assert.Equal(t, 1.0, before.applied)

	for _, size := range []int{1, 3, 3, 6, 30} {
		m.BatchApplied(size, time.Millisecond)
		applied(size)
	}
	m.Outcome(&queue.Outcome{Status: queue.StatusRejected, Reason: queue.ReasonBadInput, At: time.Now()}, time.Time{}, false)
	after := scrape(m)
	assert.Equal(t, 44.0, after.applied, "applied jobs only")
	mean, p50 := batchStats(before, after)
	require.NotNil(t, mean)
	assert.InDelta(t, 43.0/5, *mean, 1e-9)
	require.NotNil(t, p50)
	assert.Equal(t, 4.0, *p50, "the median batch, 3, is in the bucket up to 4")

	mean, p50 = batchStats(after, after)
	assert.Nil(t, mean, "no batch between the scrapes")
	assert.Nil(t, p50)
}

func TestParseProducers(t *testing.T) {
	got, err := parseProducers("1, 8,32,8")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 8, 32}, got)
	for _, bad := range []string{"", "0", "1,,2", "x", "-1", "5000"} {
		_, err := parseProducers(bad)
		assert.Equal(t, exitUsage, exitCode(err), "%q", bad)
	}
}

func TestPick(t *testing.T) {
	got, err := pick("--workload", "put4k,append", benchWorkloads, func(w workload) string { return w.Name })
	require.NoError(t, err)
	assert.Equal(t, []string{"append", "put4k"}, names(got, func(w workload) string { return w.Name }), "in the bench's order")
	_, err = pick("--workload", "append,nope", benchWorkloads, func(w workload) string { return w.Name })
	assert.Equal(t, exitUsage, exitCode(err))
	assert.ErrorContains(t, err, `unknown "nope"`)
}

func TestBenchJob(t *testing.T) {
	for _, w := range benchWorkloads {
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
func flockWorkers(t *testing.T, dir string, w workload, producers, jobs int, failFast bool) []producerResult {
	t.Helper()
	results := make([]producerResult, producers)
	for p := range producers {
		fw, err := openFlockWorker(dir, w, p, failFast)
		require.NoError(t, err)
		results[p] = produce(context.Background(), fw, time.Time{}, jobs)
		require.NoError(t, fw.close())
		require.Empty(t, results[p].Err)
	}
	return results
}

func TestFlockWorkerAndVerify(t *testing.T) {
	for _, w := range benchWorkloads[:3] {
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
	w := benchWorkloads[0]
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
	holder, err := openFlockWorker(dir, benchWorkloads[0], 0, false)
	require.NoError(t, err)
	defer holder.close()
	_, ok, err := holder.take(context.Background())
	require.True(t, ok)
	require.NoError(t, err)

	fw, err := openFlockWorker(dir, benchWorkloads[0], 1, true)
	require.NoError(t, err)
	defer fw.close()
	r := produce(context.Background(), fw, time.Time{}, 2)
	assert.Empty(t, r.Err)
	assert.Zero(t, r.Done)
	assert.Equal(t, []int{1, 2}, r.GaveUp)
	assert.Equal(t, 2*failFastRetries, r.Retries)
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
	all := benchContenders(time.Second)
	rep := &benchReport{Settings: benchSettings{Rounds: 3}, Workloads: benchWorkloads[:2], Contenders: all}
	for i, ct := range all {
		for _, p := range []int{1, 8, 32} {
			rep.Results = append(rep.Results, benchResult{Workload: "append", Producers: p, Contender: ct.Name,
				Median: benchFigures{JobsPerSec: float64(100 * (i + 1) * p), P99MS: float64(i+1) / 3}})
		}
	}
	// merge has one contender with a zero rate (nothing on a log scale)
	// and the others none: a panel with no data.
	rep.Results = append(rep.Results, benchResult{Workload: "merge", Producers: 1, Contender: "flock"})
	svg := benchSVG(rep)
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

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--rounds", "0"},
		{"--duration", "0s"},
		{"--jobs", "-1"},
		{"--producers", "0"},
		{"--workload", "append,bogus"},
		{"--contenders", "flock,nfs"},
		{"--relaxed-sync", "-1s"},
		{"extra"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			m := &Main{Stdout: &stdout, Stderr: &stderr}
			err := m.Run(context.Background(), append([]string{"bench"}, args...))
			assert.Equal(t, exitUsage, exitCode(err), "%v", err)
			assert.Empty(t, stdout.String())
		})
	}
	var stdout bytes.Buffer
	m := &Main{Stdout: &stdout, Stderr: io.Discard}
	assert.Equal(t, exitOK, exitCode(m.Run(context.Background(), []string{"bench", "-h"})))
	assert.Contains(t, stdout.String(), "Usage: scribe bench")
	assert.Contains(t, stdout.String(), fmt.Sprintf("%d retries", failFastRetries))
}
