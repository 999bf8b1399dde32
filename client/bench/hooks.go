package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/scribehq/scribe/client"
)

// The process measures of `scribe bench`. A hook is a process, so what a
// hook costs is measured with processes, each timed from exec to exit:
// the cold submit, `scribe submit --wait` processes one after another
// through a warm daemon, and the hook burst, many of them at once. Each
// runs against as many flock(1) writers, which run dd to append the line
// and fsync the file: a shell hook's durable append under a lock.

// The process measures, in the order each round runs them.
const (
	MeasureSubmit = "submit" // Config.Submits processes, one after another
	MeasureBurst  = "burst"  // Config.Hooks processes, all at once
)

// The contenders of the process measures, in the order each round runs
// them.
const (
	// HookScribe is `scribe submit --wait` through a daemon that has
	// applied jobs already, its queue synced always (serve's default).
	HookScribe = "scribe"
	// HookFlock is `flock LOCK dd if=LINE of=FILE oflag=append
	// conv=notrunc,fsync`.
	HookFlock = "flock(1)"
)

var (
	hookMeasures   = []string{MeasureSubmit, MeasureBurst}
	hookContenders = []string{HookScribe, HookFlock}
)

// hookKey names one process measure of one contender.
type hookKey struct{ measure, contender string }

// HookResult is one process measure of one contender: its rounds and
// their medians.
type HookResult struct {
	Measure   string        `json:"measure"`   // MeasureSubmit or MeasureBurst
	Contender string        `json:"contender"` // HookScribe or HookFlock
	Processes int           `json:"processes"` // per round
	Median    HookFigures   `json:"median"`
	Rounds    []HookFigures `json:"rounds"`
}

// HookFigures are what one round of a process measure measured (or, in
// Median, the medians over the rounds): each process's wall time, exec
// to exit, and the CPU time per process. Null means not measured.
type HookFigures struct {
	P50MS       float64  `json:"p50_ms"`
	P90MS       float64  `json:"p90_ms"`
	MaxMS       float64  `json:"max_ms"`
	CPUProcUS   *float64 `json:"cpu_process_us"` // the process's own and its children's (rusage)
	CPUDaemonUS *float64 `json:"cpu_daemon_us"`  // scribe: the daemon's, per process
	CPUTotalUS  *float64 `json:"cpu_total_us"`
	Lost        float64  `json:"lost"`
	Doubled     float64  `json:"doubled"`
}

// hookProcs is the count of processes of measure m in each round.
func (b *bench) hookProcs(m string) int {
	if m == MeasureBurst {
		return b.Hooks
	}
	return b.Submits
}

// hookRound runs the process measures of one contender, on a fresh store
// (scribe: and daemon), and checks the lines they left.
func (b *bench) hookRound(ctx context.Context, contender string) (_ map[string]HookFigures, err error) {
	dir, err := b.runDir()
	if err != nil {
		return nil, err
	}
	defer func() {
		switch {
		case err != nil:
			b.failed = true
			err = fmt.Errorf("%w\n(the run's store and logs are kept in %s)", err, dir)
		case !b.cfg.Keep:
			os.RemoveAll(dir)
		}
	}()
	store := filepath.Join(dir, "store")
	if err := os.Mkdir(store, 0o755); err != nil {
		return nil, fmt.Errorf("make store: %w", err)
	}
	var d *benchDaemon
	if contender == HookScribe {
		if d, err = startBenchDaemon(ctx, b.cfg.Scribe, "", dir, store, "always"); err != nil {
			return nil, err
		}
		defer func() {
			if serr := d.stop(); err == nil {
				err = serr
			}
		}()
		c, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire))
		if err != nil {
			return nil, fmt.Errorf("open client: %w", err)
		}
		err = warmUp(ctx, c)
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	errLog, err := os.OpenFile(filepath.Join(dir, "processes.err"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer errLog.Close()

	w := workloads[0] // append: a 100-byte line
	out := map[string]HookFigures{}
	var expect []producerResult // each process, by producer number: one line
	for _, m := range hookMeasures {
		n := b.hookProcs(m)
		if n == 0 {
			continue
		}
		first := len(expect)
		cmds := make([]*exec.Cmd, n)
		for i := range cmds {
			if cmds[i], err = b.hookCmd(ctx, contender, dir, store, first+i); err != nil {
				return nil, err
			}
			cmds[i].Stderr = errLog
		}
		var cpu0, cpu1 time.Duration
		known := true
		if d != nil {
			cpu0, known = procCPU(d.pid)
		}
		walls, cpu, err := runProcs(cmds, m == MeasureBurst)
		if err != nil {
			return nil, fmt.Errorf("%s: %w%s", m, err, tail(errLog.Name()))
		}
		if d != nil {
			var ok bool
			cpu1, ok = procCPU(d.pid)
			known = known && ok
		}

		slices.Sort(walls)
		f := HookFigures{P50MS: ms(percentile(walls, 0.50)), P90MS: ms(percentile(walls, 0.90)), MaxMS: ms(walls[len(walls)-1])}
		f.CPUProcUS = ptr(us(cpu) / float64(n))
		if d == nil {
			f.CPUTotalUS = f.CPUProcUS
		} else if known {
			f.CPUDaemonUS = ptr(us(cpu1-cpu0) / float64(n))
			f.CPUTotalUS = ptr(*f.CPUProcUS + *f.CPUDaemonUS)
		}

		// Each process wrote one line: this measure's, and none of the
		// others' twice.
		for range n {
			expect = append(expect, producerResult{Seqs: 1, Done: 1, LastSeq: 1})
		}
		mine := make([]producerResult, len(expect))
		copy(mine[first:], expect[first:])
		lost, doubled, err := verifyRun(w, store, mine)
		if err != nil {
			return nil, err
		}
		f.Lost, f.Doubled = float64(lost), float64(doubled)
		out[m] = f
	}
	return out, nil
}

// hookCmd is the process that writes line 1 of producer p, as contender
// does it. flock(1)'s dd reads the line from a file made for it, in dir.
func (b *bench) hookCmd(ctx context.Context, contender, dir, store string, p int) (*exec.Cmd, error) {
	_, path, line := benchJob(workloads[0], p, 1)
	if contender == HookScribe {
		return exec.CommandContext(ctx, b.cfg.Client, "submit", "--store", store, "--route", "require", "--wait",
			"append", path, string(line)), nil
	}
	in := filepath.Join(dir, fmt.Sprintf("line-%d", p))
	if err := os.WriteFile(in, line, 0o644); err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, b.flock, filepath.Join(store, "lock"),
		b.dd, "if="+in, "of="+filepath.Join(store, path), "oflag=append", "conv=notrunc,fsync", "status=none"), nil
}

// runProcs runs cmds, one after another or all at once, and returns each
// one's wall time, exec to exit, and their CPU time in all.
func runProcs(cmds []*exec.Cmd, together bool) ([]time.Duration, time.Duration, error) {
	walls := make([]time.Duration, len(cmds))
	cpus := make([]time.Duration, len(cmds))
	errs := make([]error, len(cmds))
	one := func(i int) {
		t0 := time.Now()
		err := cmds[i].Run()
		walls[i] = time.Since(t0)
		if err != nil {
			errs[i] = fmt.Errorf("%s: %w", cmds[i].Args[0], err)
			return
		}
		ps := cmds[i].ProcessState
		cpus[i] = ps.UserTime() + ps.SystemTime()
	}
	if together {
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := range cmds {
			wg.Go(func() { <-gate; one(i) })
		}
		close(gate)
		wg.Wait()
	} else {
		for i := range cmds {
			if one(i); errs[i] != nil {
				break
			}
		}
	}
	var cpu time.Duration
	for _, c := range cpus {
		cpu += c
	}
	return walls, cpu, errors.Join(errs...)
}

// tail is the end of a log file, for an error message.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	if len(data) == 0 {
		return ""
	}
	return "; " + filepath.Base(path) + " ends:\n" + string(data)
}

// medianHookFigures is each figure's median over rounds.
func medianHookFigures(rounds []HookFigures) HookFigures {
	val := func(f func(HookFigures) float64) float64 { return median(column(rounds, f)) }
	opt := func(f func(HookFigures) *float64) *float64 {
		s, ok := spread(column(rounds, func(h HookFigures) float64 { return orNaN(f(h)) }))
		if !ok {
			return nil
		}
		return ptr(s.Median)
	}
	return HookFigures{
		P50MS:       val(func(f HookFigures) float64 { return f.P50MS }),
		P90MS:       val(func(f HookFigures) float64 { return f.P90MS }),
		MaxMS:       val(func(f HookFigures) float64 { return f.MaxMS }),
		CPUProcUS:   opt(func(f HookFigures) *float64 { return f.CPUProcUS }),
		CPUDaemonUS: opt(func(f HookFigures) *float64 { return f.CPUDaemonUS }),
		CPUTotalUS:  opt(func(f HookFigures) *float64 { return f.CPUTotalUS }),
		Lost:        val(func(f HookFigures) float64 { return f.Lost }),
		Doubled:     val(func(f HookFigures) float64 { return f.Doubled }),
	}
}
