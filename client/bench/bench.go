package bench

import (
	"context"
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

// Defaults of a Config, and of `scribe bench`, whose default run (with
// DefaultHooks and DefaultSubmits, producers as processes) takes about
// three minutes on a 2-core machine.
const (
	DefaultRounds   = 5
	DefaultDuration = 500 * time.Millisecond
	DefaultRelaxed  = time.Second
	DefaultHooks    = 30
	DefaultSubmits  = 20
)

// DefaultProducers are the producer counts a Config compares by default.
var DefaultProducers = []int{1, 32}

// DefaultWorkloads are the workloads a Config runs by default: those of
// the targets (Report.Targets).
var DefaultWorkloads = []string{"append", "put1m"}

// DefaultContenders are the contenders a Config runs by default, for the
// relaxed sync interval given (0: DefaultRelaxed): those of the targets.
func DefaultContenders(relaxed time.Duration) []string {
	if relaxed <= 0 {
		relaxed = DefaultRelaxed
	}
	r := relaxed.String()
	return []string{"scribe-apply-always", "scribe-apply-" + r, "scribe-submit-" + r, "flock"}
}

const (
	// benchWarmup untimed jobs go through a fresh daemon first: a starting
	// writer applies its first jobs one at a time.
	benchWarmup = 64
	// put1mJobsDivisor: with Jobs, the 1 MiB workload does this many
	// times fewer jobs.
	put1mJobsDivisor = 10
	// maxProducers bounds a producer count, and the processes of a hook
	// measure.
	maxProducers = 4096
)

// Fail-fast flock (the flock-failfast contender): the retries a caller
// makes before it gives a write up, the backoff doubling from the first
// pause up to the last.
const (
	FailFastRetries = 3
	FailFastFirst   = time.Millisecond
	FailFastMax     = 8 * time.Millisecond
)

// Contender is one way of getting jobs onto the disk.
type Contender struct {
	Name     string `json:"name"`
	About    string `json:"about"`
	Scribe   bool   `json:"scribe"`              // through a `scribe serve` process
	Submit   bool   `json:"submit,omitempty"`    // scribe: Submit only, the run ends when the queue is drained
	Sync     string `json:"sync,omitempty"`      // scribe: serve --sync
	FailFast bool   `json:"fail_fast,omitempty"` // flock: LOCK_NB with retries, then the write is lost
}

// Contenders are the contenders, in the order each round runs them:
// scribe through a client's Apply or Submit with the daemon's queue synced
// always or every relaxed, then blocking flock and fail-fast flock.
func Contenders(relaxed time.Duration) []Contender {
	r := relaxed.String()
	return []Contender{
		{Name: "scribe-apply-always", Scribe: true, Sync: "always", About: "client Apply (waits for the outcome), serve --sync always"},
		{Name: "scribe-apply-" + r, Scribe: true, Sync: r, About: "client Apply, serve --sync " + r},
		{Name: "scribe-submit-always", Scribe: true, Submit: true, Sync: "always", About: "client Submit (returns once queued), serve --sync always; timed until the queue is drained"},
		{Name: "scribe-submit-" + r, Scribe: true, Submit: true, Sync: r, About: "client Submit, serve --sync " + r + "; timed until the queue is drained"},
		{Name: "flock", About: "blocking flock(LOCK_EX), the op, fsync, unlock"},
		{Name: "flock-failfast", FailFast: true, About: fmt.Sprintf("flock(LOCK_EX|LOCK_NB), %d retries with backoff %s..%s, then the write is lost", FailFastRetries, FailFastFirst, FailFastMax)},
	}
}

// Workload is what every job of a run does.
type Workload struct {
	Name  string `json:"name"`
	About string `json:"about"`
	Bytes int    `json:"bytes"` // the payload of one job
}

// workloads are the workloads, in the order each round runs them.
// put1m is 1 MiB, or the largest data a job may carry if that is less.
var workloads = []Workload{
	{Name: "append", Bytes: 100, About: "a distinct 100-byte line appended to one file"},
	{Name: "merge", Bytes: 100, About: "a JSON merge patch of about 100 bytes on one JSON file (flock: read, merge, atomic replace)"},
	{Name: "put4k", Bytes: 4 << 10, About: "a 4 KiB file replaced, one file per producer (flock: temp file, fsync, rename, fsync folder)"},
	{Name: "put1m", Bytes: min(1<<20, queue.MaxJobBytes-4<<10), About: "a 1 MiB file replaced, one file per producer (flock: as put4k)"},
}

// Settings are the bench's settings, as the JSON report shows them.
type Settings struct {
	Producers  []int    `json:"producers"`
	Workloads  []string `json:"workloads"`
	Contenders []string `json:"contenders"`
	Rounds     int      `json:"rounds"`
	DurationMS float64  `json:"duration_ms,omitempty"` // per run, when sized by time
	Jobs       int      `json:"jobs,omitempty"`        // per producer and run, when sized by count
	Procs      bool     `json:"procs"`
	Hooks      int      `json:"hooks"`   // processes of the hook burst; 0: not run
	Submits    int      `json:"submits"` // cold submits per round; 0: not run
	Relaxed    string   `json:"relaxed_sync"`
	Strace     bool     `json:"strace"` // the daemon's syncs counted
	Dir        string   `json:"dir"`
	CPUs       int      `json:"cpus"`
	OS         string   `json:"os"`
}

// Config is one bench: what it compares, and how. The zero value of a
// field is its default (Procs, Hooks and Submits: off); only Scribe is
// required.
type Config struct {
	// Scribe is the scribe binary: the scribe contenders' daemon is its
	// `scribe serve`, and with Procs each producer is a `scribe bench`
	// process of it in producer mode (Produce).
	Scribe string
	// Client is the binary the hook burst and the cold submits run as
	// `scribe submit --wait`: what a hook runs, the lean scribe beside
	// scribed. Default Scribe.
	Client string
	// Producers are the concurrent producer counts (default
	// DefaultProducers), each from 1 to 4096.
	Producers []int
	// Workloads and Contenders are the names of those to run (default
	// DefaultWorkloads, DefaultContenders; all: WorkloadNames,
	// ContenderNames), run in the bench's order.
	Workloads  []string
	Contenders []string
	// Rounds are the interleaved rounds; figures are medians over them,
	// ratios the median of each round's (default DefaultRounds).
	Rounds int
	// Duration is how long each run's producers produce (default
	// DefaultDuration); Jobs, if positive, sizes runs by count instead:
	// jobs per producer and run (put1m: a tenth, at least 1).
	Duration time.Duration
	Jobs     int
	// Procs makes the producers processes (Scribe's), not goroutines.
	Procs bool
	// Hooks, if positive, adds the hook burst to each round: that many
	// `scribe submit --wait` processes at once through a warm daemon,
	// then as many flock(1) writers. Submits, if positive, adds the cold
	// submit: that many of each, one after another.
	Hooks   int
	Submits int
	// Relaxed is the relaxed contenders' serve --sync interval (default
	// DefaultRelaxed).
	Relaxed time.Duration
	// Strace is strace's path, to count the daemon's syncs in an extra,
	// untimed run of each scribe contender in the first round; "" counts
	// none.
	Strace string
	// Dir is where the bench makes its temporary folder of stores
	// (default: the system's); put it on the disk to measure.
	Dir string
	// Keep keeps the stores and the daemons' logs.
	Keep bool
	// Stderr gets the bench's notes (stores kept, a memory filesystem),
	// the producer processes' stderr, and with Progress a line of
	// progress, kept to the terminal's width; nil discards them.
	Stderr   io.Writer
	Progress bool
	// Version is the scribe version the report names.
	Version string
}

// ErrConfig means a Config cannot run: an unknown workload or contender,
// a count out of range.
var ErrConfig = errors.New("bench settings")

// bench is one invocation's settings and state.
type bench struct {
	Settings
	cfg        Config
	duration   time.Duration
	contenders []Contender
	workloads  []Workload
	failed     bool // a run failed: its folder is kept
	runs       int  // runs started, for folder names
	progress   *progress
	// The process measures: their contenders (flock(1) needs flock and
	// dd on PATH), and those two programs.
	hookContenders []string
	flock, dd      string
}

// ContenderNames are the names of the contenders, for the relaxed sync
// interval given (0: DefaultRelaxed).
func ContenderNames(relaxed time.Duration) []string {
	if relaxed <= 0 {
		relaxed = DefaultRelaxed
	}
	return contenderNames(Contenders(relaxed))
}

// WorkloadNames are the names of the workloads.
func WorkloadNames() []string { return names(workloads, func(w Workload) string { return w.Name }) }

// Workloads are the workloads, in the order each round runs them.
func Workloads() []Workload { return slices.Clone(workloads) }

// Run runs every round of the bench and returns its report. It fails if
// a run fails (its folder is then kept, and named), and with ctx's error
// if ctx ends first. A report of writes scribe lost or doubled is no
// failure of Run: Report.Broken says so.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = DefaultRounds
	}
	if cfg.Client == "" {
		cfg.Client = cfg.Scribe
	}
	if cfg.Duration == 0 {
		cfg.Duration = DefaultDuration
	}
	if cfg.Relaxed == 0 {
		cfg.Relaxed = DefaultRelaxed
	}
	if len(cfg.Producers) == 0 {
		cfg.Producers = DefaultProducers
	}
	switch {
	case cfg.Scribe == "":
		return nil, fmt.Errorf("%w: no scribe binary", ErrConfig)
	case cfg.Rounds < 0, cfg.Duration < 0, cfg.Jobs < 0, cfg.Relaxed < 0, cfg.Hooks < 0, cfg.Submits < 0:
		return nil, fmt.Errorf("%w: rounds, duration, jobs, relaxed sync, hooks and submits may not be negative", ErrConfig)
	case cfg.Hooks > maxProducers, cfg.Submits > maxProducers:
		return nil, fmt.Errorf("%w: hooks and submits: want at most %d", ErrConfig, maxProducers)
	}
	if len(cfg.Workloads) == 0 {
		cfg.Workloads = DefaultWorkloads
	}
	if len(cfg.Contenders) == 0 {
		cfg.Contenders = DefaultContenders(cfg.Relaxed)
	}
	b := &bench{cfg: cfg}
	for _, p := range cfg.Producers {
		if p < 1 || p > maxProducers {
			return nil, fmt.Errorf("%w: %d producers: want 1 to %d", ErrConfig, p, maxProducers)
		}
		if !slices.Contains(b.Producers, p) {
			b.Producers = append(b.Producers, p)
		}
	}
	var err error
	if b.workloads, err = pick("workload", cfg.Workloads, workloads, func(w Workload) string { return w.Name }); err != nil {
		return nil, err
	}
	if b.contenders, err = pick("contender", cfg.Contenders, Contenders(cfg.Relaxed), func(c Contender) string { return c.Name }); err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp(cfg.Dir, "scribe-bench-")
	if err != nil {
		return nil, fmt.Errorf("make the bench folder: %w", err)
	}
	if cfg.Keep {
		fmt.Fprintf(cfg.Stderr, "scribe bench: stores kept in %s\n", base)
	}
	defer func() {
		if !cfg.Keep && !b.failed {
			os.RemoveAll(base)
		}
	}()
	if onTmpfs(base) {
		fmt.Fprintf(cfg.Stderr, "scribe bench: warning: %s is on tmpfs, where fsync costs nothing; use --dir on a disk\n", base)
	}
	b.Settings = Settings{
		Producers: b.Producers, Workloads: names(b.workloads, func(w Workload) string { return w.Name }),
		Contenders: contenderNames(b.contenders), Rounds: cfg.Rounds, Jobs: cfg.Jobs, Procs: cfg.Procs,
		Hooks: cfg.Hooks, Submits: cfg.Submits,
		Relaxed: cfg.Relaxed.String(), Strace: cfg.Strace != "", Dir: base, CPUs: runtime.NumCPU(), OS: runtime.GOOS,
	}
	if cfg.Hooks > 0 || cfg.Submits > 0 {
		b.hookContenders = hookContenders[:1]
		flock, err1 := exec.LookPath("flock")
		dd, err2 := exec.LookPath("dd")
		if err := errors.Join(err1, err2); err != nil {
			fmt.Fprintf(cfg.Stderr, "scribe bench: warning: the process measures run without flock(1): %v\n", err)
		} else {
			b.hookContenders, b.flock, b.dd = hookContenders, flock, dd
		}
	}
	if cfg.Jobs == 0 {
		b.duration = cfg.Duration
		b.DurationMS = float64(cfg.Duration.Microseconds()) / 1000
	}

	b.progress = newProgress(cfg.Stderr, cfg.Progress)
	start := time.Now()
	results, hooks, err := b.runAll(ctx)
	b.progress.clear()
	if err != nil {
		return nil, err
	}
	return b.report(start, results, hooks), nil
}

// benchKey names one cell of the comparison.
type benchKey struct {
	workload  string
	producers int
	contender string
}

// runAll runs every round: in each, every producer count, workload and
// contender in turn, then the process measures.
func (b *bench) runAll(ctx context.Context) (map[benchKey][]Figures, map[hookKey][]HookFigures, error) {
	results := map[benchKey][]Figures{}
	hooks := map[hookKey][]HookFigures{}
	for round := 1; round <= b.Rounds; round++ {
		for _, p := range b.Producers {
			for _, w := range b.workloads {
				for _, ct := range b.contenders {
					b.progress.show("round %d/%d  %s  %d producers  %s", round, b.Rounds, w.Name, p, ct.Name)
					f, err := b.run(ctx, ct, w, p, round == 1)
					if err := ctx.Err(); err != nil {
						return nil, nil, fmt.Errorf("bench interrupted: %w", err)
					}
					if err != nil {
						return nil, nil, fmt.Errorf("round %d, %s, %d producers, %s: %w", round, w.Name, p, ct.Name, err)
					}
					k := benchKey{w.Name, p, ct.Name}
					results[k] = append(results[k], f)
				}
			}
		}
		for _, h := range b.hookContenders {
			b.progress.show("round %d/%d  hooks  %s", round, b.Rounds, h)
			f, err := b.hookRound(ctx, h)
			if err := ctx.Err(); err != nil {
				return nil, nil, fmt.Errorf("bench interrupted: %w", err)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("round %d, hooks, %s: %w", round, h, err)
			}
			for measure, fig := range f {
				k := hookKey{measure, h}
				hooks[k] = append(hooks[k], fig)
			}
		}
	}
	return results, hooks, nil
}

// Report is a bench's figures, as `scribe bench --json` prints them: what
// the table (WriteTable) and the chart (SVG) are drawn from.
type Report struct {
	Command    string       `json:"command"`
	Version    string       `json:"version"`
	Started    time.Time    `json:"started"`
	Seconds    float64      `json:"seconds"` // wall time of the whole bench
	Settings   Settings     `json:"settings"`
	Workloads  []Workload   `json:"workloads"`
	Contenders []Contender  `json:"contenders"`
	Results    []Result     `json:"results"`
	Hooks      []HookResult `json:"hooks"`
	Targets    []Target     `json:"targets"` // the headline figures, from Results and Hooks
}

// Result is one workload, producer count and contender: its rounds,
// their medians, and its throughput against blocking flock's, paired
// within each round (the contender's jobs/s ÷ the flock run's of the same
// round), so that a machine's drift between rounds cancels out.
type Result struct {
	Workload      string    `json:"workload"`
	Producers     int       `json:"producers"`
	Contender     string    `json:"contender"`
	Median        Figures   `json:"median"`
	Spread        Spread    `json:"jobs_per_sec_spread"` // jobs/s over the rounds
	VsFlock       *float64  `json:"vs_flock"`            // the median of VsFlockRounds; null without flock
	VsFlockRounds []float64 `json:"vs_flock_rounds"`
	Rounds        []Figures `json:"rounds"`
}

// Spread is a figure over rounds: its median, lowest and highest, and
// how many rounds measured it.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"rounds"`
}

// spread is v's Spread, NaN figures left out; ok false if none is left.
func spread(v []float64) (s Spread, ok bool) {
	v = slices.DeleteFunc(slices.Clone(v), math.IsNaN)
	if len(v) == 0 {
		return Spread{}, false
	}
	return Spread{Median: median(v), Min: v[0], Max: v[len(v)-1], N: len(v)}, true
}

// paired is a[i] ÷ b[i] for each round measured by both (b[i] positive).
func paired(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 && !math.IsNaN(a[i]) {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// Figures are what one run measured (or, in Median, the medians of
// each figure over the rounds). Per-job figures divide by Jobs; null
// means not measured.
type Figures struct {
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

// report gathers the medians, the paired ratios and the targets.
func (b *bench) report(start time.Time, results map[benchKey][]Figures, hooks map[hookKey][]HookFigures) *Report {
	rep := &Report{
		Command: "scribe bench", Version: b.cfg.Version, Started: start.UTC(),
		Seconds:  time.Since(start).Seconds(),
		Settings: b.Settings, Workloads: b.workloads, Contenders: b.contenders,
	}
	rate := func(f Figures) float64 { return f.JobsPerSec }
	for _, w := range b.workloads {
		for _, p := range b.Producers {
			flock, hasFlock := results[benchKey{w.Name, p, "flock"}]
			for _, ct := range b.contenders {
				rounds := results[benchKey{w.Name, p, ct.Name}]
				r := Result{Workload: w.Name, Producers: p, Contender: ct.Name, Median: medianFigures(rounds), Rounds: rounds}
				r.Spread, _ = spread(column(rounds, rate))
				if hasFlock {
					r.VsFlockRounds = paired(column(rounds, rate), column(flock, rate))
					if s, ok := spread(r.VsFlockRounds); ok {
						r.VsFlock = ptr(s.Median)
					}
				}
				rep.Results = append(rep.Results, r)
			}
		}
	}
	for _, m := range hookMeasures {
		for _, h := range hookContenders {
			if rounds, ok := hooks[hookKey{m, h}]; ok {
				rep.Hooks = append(rep.Hooks, HookResult{Measure: m, Contender: h, Processes: b.hookProcs(m),
					Median: medianHookFigures(rounds), Rounds: rounds})
			}
		}
	}
	rep.Targets = targets(rep)
	return rep
}

// column is figure f of each round.
func column[T any](rounds []T, f func(T) float64) []float64 {
	out := make([]float64, len(rounds))
	for i, r := range rounds {
		out[i] = f(r)
	}
	return out
}

// orNaN reads an optional figure as a column does: NaN when not measured.
func orNaN(f *float64) float64 {
	if f == nil {
		return math.NaN()
	}
	return *f
}

// Broken is an error if scribe lost or doubled a write: a broken
// promise, reported after the figures.
func (rep *Report) Broken() error {
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
	for _, h := range rep.Hooks {
		for i, f := range h.Rounds {
			if h.Contender == HookScribe && (f.Lost > 0 || f.Doubled > 0) {
				bad = append(bad, fmt.Sprintf("submit processes (%s), round %d: %.0f lost, %.0f doubled", h.Measure, i+1, f.Lost, f.Doubled))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("scribe lost or doubled writes: %s", strings.Join(bad, "; "))
	}
	return nil
}

// medianFigures is each figure's median over rounds.
func medianFigures(rounds []Figures) Figures {
	val := func(f func(Figures) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = f(r)
		}
		return median(v)
	}
	opt := func(f func(Figures) *float64) *float64 {
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
	m := Figures{
		Jobs:          val(func(f Figures) float64 { return f.Jobs }),
		Seconds:       val(func(f Figures) float64 { return f.Seconds }),
		JobsPerSec:    val(func(f Figures) float64 { return f.JobsPerSec }),
		P50MS:         val(func(f Figures) float64 { return f.P50MS }),
		P99MS:         val(func(f Figures) float64 { return f.P99MS }),
		Lost:          val(func(f Figures) float64 { return f.Lost }),
		Doubled:       val(func(f Figures) float64 { return f.Doubled }),
		Retries:       val(func(f Figures) float64 { return f.Retries }),
		RetriesPerJob: val(func(f Figures) float64 { return f.RetriesPerJob }),
		SyncsPerJob:   opt(func(f Figures) *float64 { return f.SyncsPerJob }),
		CPUClientUS:   opt(func(f Figures) *float64 { return f.CPUClientUS }),
		CPUDaemonUS:   opt(func(f Figures) *float64 { return f.CPUDaemonUS }),
		CPUTotalUS:    opt(func(f Figures) *float64 { return f.CPUTotalUS }),
		BytesPerJob:   opt(func(f Figures) *float64 { return f.BytesPerJob }),
		BatchMean:     opt(func(f Figures) *float64 { return f.BatchMean }),
		BatchP50:      opt(func(f Figures) *float64 { return f.BatchP50 }),
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

// NameError is a workload or contender a Config names that the bench
// does not have; it is an ErrConfig.
type NameError struct {
	Kind string // "workload" or "contender"
	Name string
	Want []string // the names there are
}

func (e *NameError) Error() string {
	return fmt.Sprintf("unknown %s %q; want some of %s", e.Kind, e.Name, strings.Join(e.Want, ", "))
}

// Is makes a NameError an ErrConfig.
func (e *NameError) Is(target error) bool { return target == ErrConfig }

// pick selects the named items of all, in all's order.
func pick[T any](kind string, list []string, all []T, name func(T) string) ([]T, error) {
	want := map[string]bool{}
	for _, f := range list {
		f = strings.TrimSpace(f)
		if !slices.ContainsFunc(all, func(t T) bool { return name(t) == f }) {
			return nil, &NameError{Kind: kind, Name: f, Want: names(all, name)}
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

func contenderNames(cs []Contender) []string {
	return names(cs, func(c Contender) string { return c.Name })
}

// WriteTable writes the medians for people: one table per workload.
func (rep *Report) WriteTable(w io.Writer) {
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
		rows := [][]string{{"producers", "contender", "jobs/s (lowest–highest)", "p50 ms", "p99 ms", "lost", "retries/job",
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
			if v, ok := spread(r.VsFlockRounds); ok && r.Contender != "flock" {
				vs = spreadText(v, ratioText, "×")
			}
			rows = append(rows, []string{strconv.Itoa(r.Producers), r.Contender, spreadText(r.Spread, figureText, ""),
				fmt.Sprintf("%.2f", m.P50MS), fmt.Sprintf("%.2f", m.P99MS), lost(m), retries,
				num(m.SyncsPerJob, 2), cpu, bytes, batch, vs})
		}
		writeTable(w, rows, 2)
	}
	fmt.Fprintln(w, "\nlost: counted jobs missing from the files afterwards, and fail-fast writes given up (share of the jobs attempted);")
	fmt.Fprintln(w, "retries/job: fail-fast lock retries (Submit: queue-full retries); syncs/job: scribe's counted in an untimed run")
	fmt.Fprintln(w, "under strace in the first round; batch p50: its histogram bucket's upper bound; vs flock: jobs/s ÷ blocking")
	fmt.Fprintln(w, "flock's of the same round, median (lowest–highest) over the rounds")
	rep.writeHooks(w)
	writeTargets(w, rep.Targets, s.Rounds)
}

// writeHooks writes the process measures' table.
func (rep *Report) writeHooks(w io.Writer) {
	if len(rep.Hooks) == 0 {
		return
	}
	fmt.Fprintln(w, "\nprocesses, each timed from exec to exit: scribe is `scribe submit --wait` through a warm daemon")
	fmt.Fprintln(w, "(serve --sync always); flock(1) is `flock LOCK dd if=LINE of=FILE oflag=append conv=notrunc,fsync`")
	rows := [][]string{{"measure", "contender", "processes", "p50 ms", "p90 ms", "max ms", "CPU µs/process (own+daemon)", "lost"}}
	for _, h := range rep.Hooks {
		m := h.Median
		cpu := num(m.CPUTotalUS, 0)
		if m.CPUDaemonUS != nil {
			cpu += " (" + num(m.CPUProcUS, 0) + "+" + num(m.CPUDaemonUS, 0) + ")"
		}
		measure := "one after another"
		if h.Measure == MeasureBurst {
			measure = "all at once"
		}
		rows = append(rows, []string{measure, h.Contender, strconv.Itoa(h.Processes), fmt.Sprintf("%.2f", m.P50MS),
			fmt.Sprintf("%.2f", m.P90MS), fmt.Sprintf("%.2f", m.MaxMS), cpu, fmt.Sprintf("%.0f", m.Lost)})
	}
	writeTable(w, rows, 2)
}

// lost is the lost writes, and their share of the jobs attempted.
func lost(m Figures) string {
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

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }
