package tests

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `scribe bench` end to end, with tiny counts: it runs every contender
// and reports what it saw. Its figures are never asserted (DESIGN.md,
// "Performance"); that scribe lost and doubled nothing is.

// benchJSON is the part of `scribe bench --json` the tests read.
type benchJSON struct {
	Settings struct {
		Producers []int  `json:"producers"`
		Rounds    int    `json:"rounds"`
		Strace    bool   `json:"strace"`
		Procs     bool   `json:"procs"`
		Dir       string `json:"dir"`
	} `json:"settings"`
	Contenders []struct {
		Name   string `json:"name"`
		Scribe bool   `json:"scribe"`
	} `json:"contenders"`
	Hooks []struct {
		Measure   string `json:"measure"`
		Contender string `json:"contender"`
		Processes int    `json:"processes"`
		Median    struct {
			P50MS      float64  `json:"p50_ms"`
			MaxMS      float64  `json:"max_ms"`
			CPUTotalUS *float64 `json:"cpu_total_us"`
			Lost       float64  `json:"lost"`
			Doubled    float64  `json:"doubled"`
		} `json:"median"`
	} `json:"hooks"`
	Targets []struct {
		Figure string                    `json:"figure"`
		Ratio  *struct{ Median float64 } `json:"ratio"`
	} `json:"targets"`
	Results []struct {
		Workload  string          `json:"workload"`
		Producers int             `json:"producers"`
		Contender string          `json:"contender"`
		Median    benchFigsJSON   `json:"median"`
		VsFlock   *float64        `json:"vs_flock"`
		Rounds    []benchFigsJSON `json:"rounds"`
	} `json:"results"`
}

type benchFigsJSON struct {
	Jobs        float64  `json:"jobs"`
	JobsPerSec  float64  `json:"jobs_per_sec"`
	P99MS       float64  `json:"p99_ms"`
	Lost        float64  `json:"lost"`
	Doubled     float64  `json:"doubled"`
	SyncsPerJob *float64 `json:"syncs_per_job"`
	CPUTotalUS  *float64 `json:"cpu_total_us_per_job"`
	BytesPerJob *float64 `json:"bytes_per_job"`
	BatchMean   *float64 `json:"batch_mean"`
}

// runBench runs scribe bench --json with args and checks what every
// report must hold.
func runBench(t *testing.T, workloads []string, producers []int, args ...string) benchJSON {
	t.Helper()
	r := scribe(t, "", append([]string{"bench", "--json", "--rounds", "1", "--dir", t.TempDir(),
		"--workload", strings.Join(workloads, ",")}, args...)...)
	require.Equal(t, 0, r.code, "bench: %s", r.stderr)
	for line := range strings.Lines(r.stderr) {
		assert.Contains(t, line, "tmpfs", "stderr holds nothing but errors and warnings when it is no terminal")
	}
	var rep benchJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), "stdout is one JSON document:\n%s", r.stdout)
	require.NotEmpty(t, rep.Contenders)
	_, err := os.Stat(rep.Settings.Dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "the stores are removed")

	type cell struct {
		workload, contender string
		producers           int
	}
	seen := map[cell]bool{}
	for _, res := range rep.Results {
		seen[cell{res.Workload, res.Contender, res.Producers}] = true
		m := res.Median
		assert.Len(t, res.Rounds, 1, "%s", res.Contender)
		assert.Positive(t, m.Jobs, "%s %s at %d: jobs done", res.Contender, res.Workload, res.Producers)
		assert.Positive(t, m.JobsPerSec)
		assert.NotNil(t, res.VsFlock, "flock ran: every contender has its ratio")
		assert.NotNil(t, m.CPUTotalUS)
		assert.NotNil(t, m.BytesPerJob)
		scribe := strings.HasPrefix(res.Contender, "scribe-")
		if scribe {
			assert.Zero(t, m.Lost, "%s %s at %d lost writes", res.Contender, res.Workload, res.Producers)
			assert.Zero(t, m.Doubled, "%s %s at %d doubled writes", res.Contender, res.Workload, res.Producers)
			assert.NotNil(t, m.BatchMean, "%s: batch sizes from the daemon's metrics", res.Contender)
		}
		if !scribe || rep.Settings.Strace {
			assert.NotNil(t, m.SyncsPerJob, "%s: syncs counted", res.Contender)
		}
	}
	for _, w := range workloads {
		for _, p := range producers {
			for _, ct := range rep.Contenders {
				assert.True(t, seen[cell{w, ct.Name, p}], "%s %s at %d producers reported", ct.Name, w, p)
			}
		}
	}
	return rep
}

func TestBenchCLI(t *testing.T) {
	t.Parallel()
	heavy(t)
	svg := filepath.Join(t.TempDir(), "bench.svg")
	// The daemon's syncs are counted in TestBenchCLIProcs: each count is
	// one more run.
	all := "scribe-apply-always,scribe-apply-1s,scribe-submit-always,scribe-submit-1s,flock,flock-failfast"
	rep := runBench(t, []string{"append", "put4k"}, []int{1, 2},
		"--producers", "1,2", "--jobs", "10", "--svg", svg, "--strace=false", "--procs=false", "--hooks", "0", "--submits", "0",
		"--contenders", all)
	assert.False(t, rep.Settings.Strace)
	var names []string
	for _, ct := range rep.Contenders {
		names = append(names, ct.Name)
	}
	assert.Equal(t, strings.Split(all, ","), names)
	assert.Empty(t, rep.Hooks, "no process measures asked for")

	// The chart is XML and names every contender.
	f, err := os.Open(svg)
	require.NoError(t, err)
	defer f.Close()
	dec := xml.NewDecoder(f)
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the chart is well-formed XML")
		if cd, ok := tok.(xml.CharData); ok {
			text.Write(cd)
		}
	}
	for _, n := range names {
		assert.Contains(t, text.String(), n)
	}
}

// By default each producer is a process of its own, and each round adds
// the process measures: `scribe submit --wait` one after another and all
// at once, against flock(1). The daemon's syncs are counted when strace
// is there.
func TestBenchCLIProcs(t *testing.T) {
	t.Parallel()
	heavy(t)
	rep := runBench(t, []string{"merge"}, []int{2},
		"--producers", "2", "--jobs", "5", "--contenders", "scribe-submit-always,flock,flock-failfast", "--hooks", "3", "--submits", "2")
	assert.True(t, rep.Settings.Procs)
	_, err := exec.LookPath("strace")
	assert.Equal(t, err == nil, rep.Settings.Strace, "the daemon's syncs are counted when strace is there")

	_, err = exec.LookPath("flock")
	want := 2
	if err == nil {
		want = 4 // and flock(1)'s
	}
	require.Len(t, rep.Hooks, want)
	for _, h := range rep.Hooks {
		assert.Equal(t, map[string]int{"submit": 2, "burst": 3}[h.Measure], h.Processes, "%s %s", h.Measure, h.Contender)
		assert.Positive(t, h.Median.P50MS, "%s %s", h.Measure, h.Contender)
		assert.GreaterOrEqual(t, h.Median.MaxMS, h.Median.P50MS)
		assert.NotNil(t, h.Median.CPUTotalUS)
		assert.Zero(t, h.Median.Lost, "%s %s lost writes", h.Measure, h.Contender)
		assert.Zero(t, h.Median.Doubled, "%s %s doubled writes", h.Measure, h.Contender)
	}
	var figures []string
	for _, tg := range rep.Targets {
		figures = append(figures, tg.Figure)
		if err == nil {
			assert.NotNil(t, tg.Ratio, "%s: flock(1) ran, the ratio is there", tg.Figure)
		}
	}
	assert.Contains(t, figures, "submit --wait, warm daemon: wall p50 ms")
	assert.Contains(t, figures, "3 hooks at once: wall p90 ms")
}

// Without --json: the table, one row per contender.
func TestBenchCLITable(t *testing.T) {
	t.Parallel()
	heavy(t)
	r := scribe(t, "", "bench", "--rounds", "1", "--dir", t.TempDir(), "--workload", "append", "--producers", "2",
		"--jobs", "5", "--contenders", "scribe-apply-always,flock", "--procs=false", "--hooks", "0", "--submits", "0")
	require.Equal(t, 0, r.code, "bench: %s", r.stderr)
	assert.Contains(t, r.stdout, "append: ")
	assert.Contains(t, r.stdout, "vs flock")
	assert.Contains(t, r.stdout, "targets: ")
	target := false
	for line := range strings.Lines(r.stdout) {
		target = target || strings.HasPrefix(line, "2 producers, append: jobs/s ") && strings.Contains(line, " scribe-apply-always ")
	}
	assert.True(t, target, "the targets hold scribe's jobs/s against flock's:\n%s", r.stdout)
	for _, n := range []string{"scribe-apply-always", "flock"} {
		assert.Contains(t, r.stdout, "  "+n+" ")
	}
}

func TestBenchCLIUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--producers", "0"},
		{"--workload", "nope"},
		{"--rounds", "0"},
		{"--hooks", "-1"},
	} {
		r := scribe(t, "", append([]string{"bench"}, args...)...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		assert.Empty(t, r.stdout)
		assert.NotEmpty(t, r.stderr)
	}
}
