package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/scribehq/scribe/queue"
)

// BenchCommand measures scribe against the alternatives it replaces, side
// by side in one invocation, on the same workloads (DESIGN.md,
// "Performance"). Its figures are for people and scripts, never asserted.
type BenchCommand struct{ *Main }

// Bench defaults: `scribe bench --producers 1,8,32` takes a few minutes on
// a 2-core machine.
const (
	defaultBenchRounds   = 3
	defaultBenchDuration = 500 * time.Millisecond
	defaultBenchRelaxed  = time.Second
	// benchWarmup untimed jobs go through a fresh daemon first: a starting
	// writer applies its first jobs one at a time.
	benchWarmup = 64
	// put1mJobsDivisor: with --jobs, the 1 MiB workload does this many
	// times fewer jobs.
	put1mJobsDivisor = 10
)

// Fail-fast flock: the retries a caller makes before it gives a write up,
// the backoff doubling from the first pause up to the last.
const (
	failFastRetries = 3
	failFastFirst   = time.Millisecond
	failFastMax     = 8 * time.Millisecond
)

// contender is one way of getting jobs onto the disk.
type contender struct {
	Name     string `json:"name"`
	About    string `json:"about"`
	Scribe   bool   `json:"scribe"`              // through a `scribe serve` process
	Submit   bool   `json:"submit,omitempty"`    // scribe: Submit only, the run ends when the queue is drained
	Sync     string `json:"sync,omitempty"`      // scribe: serve --sync
	FailFast bool   `json:"fail_fast,omitempty"` // flock: LOCK_NB with retries, then the write is lost
}

// benchContenders are the contenders, in the order each round runs them;
// relaxed is the relaxed --sync interval.
func benchContenders(relaxed time.Duration) []contender {
	r := relaxed.String()
	return []contender{
		{Name: "scribe-apply-always", Scribe: true, Sync: "always", About: "client Apply (waits for the outcome), serve --sync always"},
		{Name: "scribe-apply-" + r, Scribe: true, Sync: r, About: "client Apply, serve --sync " + r},
		{Name: "scribe-submit-always", Scribe: true, Submit: true, Sync: "always", About: "client Submit (returns once queued), serve --sync always; timed until the queue is drained"},
		{Name: "scribe-submit-" + r, Scribe: true, Submit: true, Sync: r, About: "client Submit, serve --sync " + r + "; timed until the queue is drained"},
		{Name: "flock", About: "blocking flock(LOCK_EX), the op, fsync, unlock"},
		{Name: "flock-failfast", FailFast: true, About: fmt.Sprintf("flock(LOCK_EX|LOCK_NB), %d retries with backoff %s..%s, then the write is lost", failFastRetries, failFastFirst, failFastMax)},
	}
}

// workload is what every job of a run does.
type workload struct {
	Name  string `json:"name"`
	About string `json:"about"`
	Bytes int    `json:"bytes"` // the payload of one job
}

// benchWorkloads are the workloads, in the order each round runs them.
// put1m is 1 MiB, or the largest data a job may carry if that is less.
var benchWorkloads = []workload{
	{Name: "append", Bytes: 100, About: "a distinct 100-byte line appended to one file"},
	{Name: "merge", Bytes: 100, About: "a JSON merge patch of about 100 bytes on one JSON file (flock: read, merge, atomic replace)"},
	{Name: "put4k", Bytes: 4 << 10, About: "a 4 KiB file replaced, one file per producer (flock: temp file, fsync, rename, fsync folder)"},
	{Name: "put1m", Bytes: min(1<<20, queue.MaxJobBytes-4<<10), About: "a 1 MiB file replaced, one file per producer (flock: as put4k)"},
}

// benchSettings are the bench's flags, as the JSON report shows them.
type benchSettings struct {
	Producers  []int    `json:"producers"`
	Workloads  []string `json:"workloads"`
	Contenders []string `json:"contenders"`
	Rounds     int      `json:"rounds"`
	DurationMS float64  `json:"duration_ms,omitempty"` // per run, when sized by time
	Jobs       int      `json:"jobs,omitempty"`        // per producer and run, when sized by count
	Procs      bool     `json:"procs"`
	Relaxed    string   `json:"relaxed_sync"`
	Strace     bool     `json:"strace"` // the daemon's syncs counted
	Dir        string   `json:"dir"`
	CPUs       int      `json:"cpus"`
	OS         string   `json:"os"`
}

// bench is one invocation's settings and state.
type bench struct {
	*Main
	benchSettings
	duration   time.Duration
	contenders []contender
	workloads  []workload
	exe        string // this binary: the daemon and --procs producers
	strace     string // strace's path; empty: syncs of the daemon not counted
	keep       bool
	failed     bool // a run failed: its folder is kept
	runs       int  // runs started, for folder names
	progress   bool
}

// Run parses flags, runs every round and prints the report.
func (c *BenchCommand) Run(ctx context.Context, args []string) error {
	if os.Getenv(benchProducerEnv) == "1" {
		return runBenchProducer(ctx, c.Stdin, c.Stdout)
	}
	all := benchContenders(defaultBenchRelaxed)
	fs := c.newFlagSet("bench", "[flags]\n\n"+
		"Measures scribe against the locks it replaces, side by side: for each round, producer\n"+
		"count and workload, every contender runs in turn (so that drift on a busy machine hits\n"+
		"all alike), each on a fresh store; the table shows the medians over the rounds.\n\n"+
		"Contenders: scribe-apply-{always,RELAXED} and scribe-submit-{always,RELAXED} (a real\n"+
		"`scribe serve --sync always|RELAXED` process, a client per producer), flock (blocking)\n"+
		fmt.Sprintf("and flock-failfast (LOCK_NB, %d retries, then the write is lost, as callers do today).\n", failFastRetries)+
		"Workloads: append, merge, put4k, put1m.\n\n"+
		"Figures: jobs/s counts durable jobs (Apply: applied; Submit: queued, timed until the\n"+
		"queue is drained; flock: written and fsynced). Latency: Apply, call to outcome; Submit,\n"+
		"call to queued; flock, call to fsync done. lost: jobs counted but not in the files\n"+
		"afterwards, plus fail-fast writes given up. syncs/job: fsync, fdatasync,\n"+
		"sync_file_range and msync calls. flock counts its own; the daemon's are counted in the\n"+
		"first round, by an extra, untimed run of each scribe contender with the daemon under\n"+
		"strace -f --seccomp-bpf, which slows it by 10-20%: the timed runs go without strace.\n"+
		"CPU: the producers' (getrusage, or each --procs process's own) and the daemon's\n"+
		"(/proc/PID/stat). Bytes: /proc/PID/io write_bytes of the daemon and the producers\n"+
		"(wchar where the filesystem does not account write_bytes). batch: jobs per batch, from\n"+
		"the daemon's metrics. vs flock: jobs/s ÷ blocking flock's at the same load")
	producers := fs.String("producers", "1,8,32,64", "concurrent producer `counts`, comma-separated")
	workloads := fs.String("workload", "append,merge,put4k,put1m", "`workloads`, comma-separated: append, merge, put4k, put1m")
	conts := fs.String("contenders", "", "`contenders`, comma-separated (default all: "+strings.Join(contenderNames(all), ", ")+"; 1s there is --relaxed-sync)")
	rounds := fs.Int("rounds", defaultBenchRounds, "interleaved `rounds`; figures are medians over them")
	duration := fs.Duration("duration", defaultBenchDuration, "how long (`DUR`) each run's producers produce (Submit: then the queue is drained)")
	jobs := fs.Int("jobs", 0, "size runs by count instead: `N` jobs per producer and run (put1m: a tenth, at least 1)")
	procs := fs.Bool("procs", false, "producers are processes (this binary re-run), not goroutines")
	relaxed := fs.Duration("relaxed-sync", defaultBenchRelaxed, "the relaxed contenders' serve --sync `interval`")
	useStrace := fs.Bool("strace", true, "count the daemon's syncs in an extra, untimed run under strace (if on PATH) in the first round")
	dir := fs.String("dir", "", "make the stores in a temporary folder under `DIR` (default: the system's); put it on the disk to measure")
	keep := fs.Bool("keep", false, "keep the stores and the daemons' logs")
	jsonOut := fs.Bool("json", false, "print one JSON document (every round, the medians, the ratios) instead of the table")
	svgOut := fs.String("svg", "", "also draw throughput and p99 latency against producers into SVG `file`")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("bench takes no arguments, got %q", fs.Args())
	}
	b := &bench{Main: c.Main, keep: *keep, progress: isTerminal(c.Stderr)}
	var err error
	if b.Producers, err = parseProducers(*producers); err != nil {
		return err
	}
	if *rounds < 1 {
		return usageError("--rounds %d: want at least 1", *rounds)
	}
	if *duration <= 0 {
		return usageError("--duration %s: want a positive duration", *duration)
	}
	if *jobs < 0 {
		return usageError("--jobs %d: want a count ≥ 1, or 0 to size runs by --duration", *jobs)
	}
	if *relaxed <= 0 {
		return usageError("--relaxed-sync %s: want a positive duration", *relaxed)
	}
	if b.workloads, err = pick("--workload", *workloads, benchWorkloads, func(w workload) string { return w.Name }); err != nil {
		return err
	}
	all = benchContenders(*relaxed)
	b.contenders = all
	if *conts != "" {
		if b.contenders, err = pick("--contenders", *conts, all, func(c contender) string { return c.Name }); err != nil {
			return err
		}
	}
	if b.exe, err = os.Executable(); err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	if *useStrace && runtime.GOOS == "linux" {
		b.strace, _ = exec.LookPath("strace")
	}
	base, err := os.MkdirTemp(*dir, "scribe-bench-")
	if err != nil {
		return fmt.Errorf("make the bench folder: %w", err)
	}
	if b.keep {
		fmt.Fprintf(c.Stderr, "scribe bench: stores kept in %s\n", base)
	}
	defer func() {
		if !b.keep && !b.failed {
			os.RemoveAll(base)
		}
	}()
	if onTmpfs(base) {
		fmt.Fprintf(c.Stderr, "scribe bench: warning: %s is on tmpfs, where fsync costs nothing; use --dir on a disk\n", base)
	}
	b.benchSettings = benchSettings{
		Producers: b.Producers, Workloads: names(b.workloads, func(w workload) string { return w.Name }),
		Contenders: contenderNames(b.contenders), Rounds: *rounds, Jobs: *jobs, Procs: *procs,
		Relaxed: relaxed.String(), Strace: b.strace != "", Dir: base, CPUs: runtime.NumCPU(), OS: runtime.GOOS,
	}
	if *jobs == 0 {
		b.duration = *duration
		b.DurationMS = float64(duration.Microseconds()) / 1000
	}

	start := time.Now()
	results, err := b.runAll(ctx)
	if b.progress {
		fmt.Fprint(c.Stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	rep := b.report(start, results)
	if *svgOut != "" {
		if err := os.WriteFile(*svgOut, []byte(benchSVG(rep)), 0o644); err != nil {
			return fmt.Errorf("write the chart: %w", err)
		}
	}
	if *jsonOut {
		enc := json.NewEncoder(c.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printBenchTable(c.Stdout, rep)
	}
	return benchBroken(rep)
}

// benchKey names one cell of the comparison.
type benchKey struct {
	workload  string
	producers int
	contender string
}

// runAll runs every round: in each, every producer count, workload and
// contender in turn.
func (b *bench) runAll(ctx context.Context) (map[benchKey][]benchFigures, error) {
	results := map[benchKey][]benchFigures{}
	for round := 1; round <= b.Rounds; round++ {
		for _, p := range b.Producers {
			for _, w := range b.workloads {
				for _, ct := range b.contenders {
					if b.progress {
						fmt.Fprintf(b.Stderr, "\r\033[Kround %d/%d  %s  %d producers  %s", round, b.Rounds, w.Name, p, ct.Name)
					}
					f, err := b.run(ctx, ct, w, p, round == 1)
					if ctx.Err() != nil {
						return nil, &exitError{code: exitInterrupted, err: errors.New("bench interrupted")}
					}
					if err != nil {
						return nil, fmt.Errorf("round %d, %s, %d producers, %s: %w", round, w.Name, p, ct.Name, err)
					}
					k := benchKey{w.Name, p, ct.Name}
					results[k] = append(results[k], f)
				}
			}
		}
	}
	return results, nil
}

// benchReport is the JSON document of --json, and what the table and the
// chart are drawn from.
type benchReport struct {
	Command    string        `json:"command"`
	Version    string        `json:"version"`
	Started    time.Time     `json:"started"`
	Seconds    float64       `json:"seconds"` // wall time of the whole bench
	Settings   benchSettings `json:"settings"`
	Workloads  []workload    `json:"workloads"`
	Contenders []contender   `json:"contenders"`
	Results    []benchResult `json:"results"`
}

// benchResult is one workload, producer count and contender: its rounds,
// their medians, and its throughput against blocking flock's.
type benchResult struct {
	Workload  string         `json:"workload"`
	Producers int            `json:"producers"`
	Contender string         `json:"contender"`
	Median    benchFigures   `json:"median"`
	VsFlock   *float64       `json:"vs_flock"` // median jobs/s ÷ flock's; null without flock
	Rounds    []benchFigures `json:"rounds"`
}

// benchFigures are what one run measured (or, in Median, the medians of
// each figure over the rounds). Per-job figures divide by Jobs; null
// means not measured.
type benchFigures struct {
	Jobs          float64  `json:"jobs"` // durable jobs counted
	Seconds       float64  `json:"seconds"`
	JobsPerSec    float64  `json:"jobs_per_sec"`
	P50MS         float64  `json:"p50_ms"`
	P99MS         float64  `json:"p99_ms"`
	Lost          float64  `json:"lost"`
	Doubled       float64  `json:"doubled"`
	Retries       float64  `json:"retries"` // fail-fast lock retries; Submit: queue-full retries
	RetriesPerJob float64  `json:"retries_per_job"`
	SyncsPerJob   *float64 `json:"syncs_per_job"`
	CPUClientUS   *float64 `json:"cpu_client_us_per_job"`
	CPUDaemonUS   *float64 `json:"cpu_daemon_us_per_job"`
	CPUTotalUS    *float64 `json:"cpu_total_us_per_job"`
	BytesPerJob   *float64 `json:"bytes_per_job"`
	BytesSource   string   `json:"bytes_source,omitempty"` // write_bytes, or wchar
	BatchMean     *float64 `json:"batch_mean"`
	BatchP50      *float64 `json:"batch_p50_le"` // upper bound of the histogram bucket holding the median batch
}

// report gathers the medians and ratios.
func (b *bench) report(start time.Time, results map[benchKey][]benchFigures) *benchReport {
	rep := &benchReport{
		Command: "scribe bench", Version: Version, Started: start.UTC(),
		Seconds:  time.Since(start).Seconds(),
		Settings: b.benchSettings, Workloads: b.workloads, Contenders: b.contenders,
	}
	for _, w := range b.workloads {
		for _, p := range b.Producers {
			flock := -1.0
			if f, ok := results[benchKey{w.Name, p, "flock"}]; ok {
				flock = medianFigures(f).JobsPerSec
			}
			for _, ct := range b.contenders {
				rounds := results[benchKey{w.Name, p, ct.Name}]
				r := benchResult{Workload: w.Name, Producers: p, Contender: ct.Name, Median: medianFigures(rounds), Rounds: rounds}
				if flock > 0 {
					r.VsFlock = ptr(r.Median.JobsPerSec / flock)
				}
				rep.Results = append(rep.Results, r)
			}
		}
	}
	return rep
}

// benchBroken is an error if scribe lost or doubled a write: a broken
// promise, reported after the figures.
func benchBroken(rep *benchReport) error {
	var bad []string
	for _, r := range rep.Results {
		for _, ct := range rep.Contenders {
			if ct.Name != r.Contender || !ct.Scribe {
				continue
			}
			for i, f := range r.Rounds {
				if f.Lost > 0 || f.Doubled > 0 {
					bad = append(bad, fmt.Sprintf("%s %s at %d producers, round %d: %.0f lost, %.0f doubled",
						r.Contender, r.Workload, r.Producers, i+1, f.Lost, f.Doubled))
				}
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("scribe lost or doubled writes: %s", strings.Join(bad, "; "))
	}
	return nil
}

// medianFigures is each figure's median over rounds.
func medianFigures(rounds []benchFigures) benchFigures {
	val := func(f func(benchFigures) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = f(r)
		}
		return median(v)
	}
	opt := func(f func(benchFigures) *float64) *float64 {
		var v []float64
		for _, r := range rounds {
			if p := f(r); p != nil {
				v = append(v, *p)
			}
		}
		if len(v) == 0 {
			return nil
		}
		return ptr(median(v))
	}
	m := benchFigures{
		Jobs:          val(func(f benchFigures) float64 { return f.Jobs }),
		Seconds:       val(func(f benchFigures) float64 { return f.Seconds }),
		JobsPerSec:    val(func(f benchFigures) float64 { return f.JobsPerSec }),
		P50MS:         val(func(f benchFigures) float64 { return f.P50MS }),
		P99MS:         val(func(f benchFigures) float64 { return f.P99MS }),
		Lost:          val(func(f benchFigures) float64 { return f.Lost }),
		Doubled:       val(func(f benchFigures) float64 { return f.Doubled }),
		Retries:       val(func(f benchFigures) float64 { return f.Retries }),
		RetriesPerJob: val(func(f benchFigures) float64 { return f.RetriesPerJob }),
		SyncsPerJob:   opt(func(f benchFigures) *float64 { return f.SyncsPerJob }),
		CPUClientUS:   opt(func(f benchFigures) *float64 { return f.CPUClientUS }),
		CPUDaemonUS:   opt(func(f benchFigures) *float64 { return f.CPUDaemonUS }),
		CPUTotalUS:    opt(func(f benchFigures) *float64 { return f.CPUTotalUS }),
		BytesPerJob:   opt(func(f benchFigures) *float64 { return f.BytesPerJob }),
		BatchMean:     opt(func(f benchFigures) *float64 { return f.BatchMean }),
		BatchP50:      opt(func(f benchFigures) *float64 { return f.BatchP50 }),
	}
	if len(rounds) > 0 {
		m.BytesSource = rounds[0].BytesSource
	}
	return m
}

// median of v (the mean of the middle two for an even count); NaN if
// empty. It sorts v.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// percentile of sorted durations (nearest rank); 0 if there are none.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// parseProducers parses --producers: positive counts, comma-separated.
func parseProducers(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return nil, usageError("--producers %q: want counts from 1 to 4096, comma-separated, such as 1,8,32", s)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// pick selects the named items of all, in all's order, for a
// comma-separated flag value.
func pick[T any](flag, list string, all []T, name func(T) string) ([]T, error) {
	want := map[string]bool{}
	for f := range strings.SplitSeq(list, ",") {
		f = strings.TrimSpace(f)
		if !slices.ContainsFunc(all, func(t T) bool { return name(t) == f }) {
			return nil, usageError("%s: unknown %q; want some of %s", flag, f, strings.Join(names(all, name), ", "))
		}
		want[f] = true
	}
	var out []T
	for _, t := range all {
		if want[name(t)] {
			out = append(out, t)
		}
	}
	return out, nil
}

func names[T any](all []T, name func(T) string) []string {
	out := make([]string, len(all))
	for i, t := range all {
		out[i] = name(t)
	}
	return out
}

func contenderNames(cs []contender) []string {
	return names(cs, func(c contender) string { return c.Name })
}

// printBenchTable prints the medians: one table per workload.
func printBenchTable(w io.Writer, rep *benchReport) {
	s := rep.Settings
	size := fmt.Sprintf("%s per run", time.Duration(s.DurationMS*float64(time.Millisecond)))
	if s.Jobs > 0 {
		size = fmt.Sprintf("%d jobs per producer and run", s.Jobs)
	}
	who := "goroutines"
	if s.Procs {
		who = "processes"
	}
	rounds := fmt.Sprintf("medians of %d interleaved rounds", s.Rounds)
	if s.Rounds == 1 {
		rounds = "1 round"
	}
	fmt.Fprintf(w, "scribe bench %s: %s, %s, producers are %s, %d CPUs; %.0f s in all\n",
		rep.Version, rounds, size, who, s.CPUs, rep.Seconds)
	if !s.Strace {
		fmt.Fprintln(w, "the daemon's syncs were not counted (no strace on PATH, or --strace=false)")
	}
	for _, wl := range rep.Workloads {
		fmt.Fprintf(w, "\n%s: %s\n", wl.Name, wl.About)
		rows := [][]string{{"producers", "contender", "jobs/s", "p50 ms", "p99 ms", "lost", "retries/job",
			"syncs/job", "CPU µs/job (client+daemon)", "bytes/job", "batch mean/p50", "vs flock"}}
		for _, r := range rep.Results {
			if r.Workload != wl.Name {
				continue
			}
			m := r.Median
			cpu := num(m.CPUTotalUS, 0)
			if m.CPUDaemonUS != nil {
				cpu += " (" + num(m.CPUClientUS, 0) + "+" + num(m.CPUDaemonUS, 0) + ")"
			}
			bytes := num(m.BytesPerJob, 0)
			if m.BytesSource == "wchar" {
				bytes += " (wchar)"
			}
			batch := "-"
			if m.BatchMean != nil {
				batch = num(m.BatchMean, 1) + "/" + num(m.BatchP50, 0)
			}
			retries := "-"
			if m.Retries > 0 {
				retries = fmt.Sprintf("%.2f", m.RetriesPerJob)
			}
			vs := "-"
			if r.VsFlock != nil {
				vs = fmt.Sprintf("%.2f×", *r.VsFlock)
			}
			rows = append(rows, []string{strconv.Itoa(r.Producers), r.Contender, fmt.Sprintf("%.0f", m.JobsPerSec),
				fmt.Sprintf("%.2f", m.P50MS), fmt.Sprintf("%.2f", m.P99MS), lost(m), retries,
				num(m.SyncsPerJob, 2), cpu, bytes, batch, vs})
		}
		writeTable(w, rows, 2)
	}
	fmt.Fprintln(w, "\nlost: counted jobs missing from the files afterwards, and fail-fast writes given up (share of the jobs attempted);")
	fmt.Fprintln(w, "retries/job: fail-fast lock retries (Submit: queue-full retries); syncs/job: scribe's counted in an untimed run")
	fmt.Fprintln(w, "under strace in the first round; batch p50: its histogram bucket's upper bound; vs flock: jobs/s ÷ blocking flock's")
}

// lost is the lost writes, and their share of the jobs attempted.
func lost(m benchFigures) string {
	if m.Lost == 0 {
		return "0"
	}
	return fmt.Sprintf("%.0f (%.0f%%)", m.Lost, 100*m.Lost/(m.Jobs+m.Lost))
}

// num formats an optional figure; "n/a" when it was not measured.
func num(f *float64, prec int) string {
	if f == nil || math.IsNaN(*f) {
		return "n/a"
	}
	return strconv.FormatFloat(*f, 'f', prec, 64)
}

// writeTable writes rows in columns, the first left ones left-aligned,
// the others right-aligned.
func writeTable(w io.Writer, rows [][]string, left int) {
	width := map[int]int{}
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, r := range rows {
		var sb strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if i > 0 {
				sb.WriteString("  ")
			}
			if i < left {
				sb.WriteString(c + pad)
			} else {
				sb.WriteString(pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(sb.String(), " "))
	}
}

// runDir makes the folder of one run, under the bench's.
func (b *bench) runDir() (string, error) {
	b.runs++
	d := filepath.Join(b.Dir, fmt.Sprintf("run-%04d", b.runs))
	if err := os.Mkdir(d, 0o755); err != nil {
		return "", fmt.Errorf("make run folder: %w", err)
	}
	return d, nil
}
