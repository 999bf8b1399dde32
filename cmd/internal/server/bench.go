package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/scribehq/scribe/client/bench"
	"github.com/scribehq/scribe/cmd/internal/cli"
)

// Bench is `scribe bench`: scribe measured against the locks it replaces,
// side by side. It turns its flags into a bench.Config.
func Bench() cli.Command {
	return cli.Command{
		Name:  "bench",
		Forms: []cli.Form{{Args: "[--producers 1,8,32] [--svg FILE]", Summary: "measure scribe against flock, side by side"}},
		Help: "Measures scribe against the locks it replaces, side by side: for each round, producer\n" +
			"count and workload, every contender runs in turn (so that drift on a busy machine hits\n" +
			"all alike), each on a fresh store; the table shows the medians over the rounds, with the\n" +
			"lowest and highest, and each ratio is paired within its round. Each round then times\n" +
			"processes, exec to exit: --submits `scribe submit --wait` one after another through a\n" +
			"warm daemon, and --hooks of them at once, each against as many flock(1) writers (flock\n" +
			"LOCK dd ... conv=fsync). A targets table sums up the headline figures.\n\n" +
			"Contenders: scribe-apply-{always,RELAXED} and scribe-submit-{always,RELAXED} (a real\n" +
			"`scribe serve --sync always|RELAXED` process, a client per producer), flock (blocking)\n" +
			fmt.Sprintf("and flock-failfast (LOCK_NB, %d retries, then the write is lost, as callers do today).\n", bench.FailFastRetries) +
			"Workloads: " + strings.Join(bench.WorkloadNames(), ", ") + ".\n\n" +
			"Figures: jobs/s counts durable jobs (Apply: applied; Submit: queued, timed until the\n" +
			"queue is drained; flock: written and fsynced). Latency: Apply, call to outcome; Submit,\n" +
			"call to queued; flock, call to fsync done. lost: jobs counted but not in the files\n" +
			"afterwards, plus fail-fast writes given up. syncs/job: fsync, fdatasync,\n" +
			"sync_file_range and msync calls. flock counts its own; the daemon's are counted in the\n" +
			"first round, by an extra, untimed run of each scribe contender with the daemon under\n" +
			"strace -f --seccomp-bpf, which slows it by 10-20%: the timed runs go without strace.\n" +
			"CPU: the producers' (getrusage, or each --procs process's own) and the daemon's\n" +
			"(/proc/PID/stat). Bytes: /proc/PID/io write_bytes of the daemon and the producers\n" +
			"(wchar where the filesystem does not account write_bytes). batch: jobs per batch, from\n" +
			"the daemon's metrics. vs flock: jobs/s ÷ blocking flock's at the same load and round",
		Heavy: true,
		Setup: func(m *cli.Main, fs *cli.FlagSet) func(context.Context, []string) error {
			producers := fs.String("producers", "1,32", "concurrent producer `COUNTS`, comma-separated")
			workloads := fs.String("workload", strings.Join(bench.DefaultWorkloads, ","), "`WORKLOADS`, comma-separated: "+strings.Join(bench.WorkloadNames(), ", "))
			contenders := fs.String("contenders", "", "`CONTENDERS`, comma-separated (default "+strings.Join(bench.DefaultContenders(0), ",")+"; all: "+strings.Join(bench.ContenderNames(0), ", ")+"; 1s there is --relaxed-sync)")
			rounds := fs.Int("rounds", bench.DefaultRounds, "interleaved rounds, `N`; figures are medians over them, ratios paired within each")
			duration := fs.Duration("duration", bench.DefaultDuration, "how long each run's producers produce, `DUR` (Submit: then the queue is drained)")
			jobs := fs.Int("jobs", 0, "size runs by count instead: `N` jobs per producer and run (put1m: a tenth, at least 1)")
			procs := fs.Bool("procs", true, "producers are processes (this binary re-run), as hooks are, each on one processor as the lean scribe runs (GOMAXPROCS=1 unless set); --procs=false: goroutines")
			hooks := fs.Int("hooks", bench.DefaultHooks, "the hook burst: `N` `scribe submit --wait` processes at once, then N flock(1) writers, each round; 0: none")
			submits := fs.Int("submits", bench.DefaultSubmits, "the cold submit: `N` `scribe submit --wait` processes one after another through a warm daemon, then N flock(1) writers, each round; 0: none")
			relaxed := fs.Duration("relaxed-sync", bench.DefaultRelaxed, "the relaxed contenders' serve --sync interval, `DUR`")
			useStrace := fs.Bool("strace", true, "count the daemon's syncs in an extra, untimed run under strace (if on PATH) in the first round")
			dir := fs.String("dir", "", "make the stores in a temporary folder under `DIR` (default: the system's); put it on the disk to measure")
			fs.CompleteDir("dir")
			keep := fs.Bool("keep", false, "keep the stores and the daemons' logs")
			asJSON := fs.JSON("the report (every round, the medians, the ratios)")
			svg := fs.String("svg", "", "also draw throughput and p99 latency against producers into SVG `FILE`")
			fs.CompleteFile("svg")
			return func(ctx context.Context, args []string) error {
				if os.Getenv(bench.ProducerEnv) == "1" {
					return bench.Produce(ctx, m.Stdin, m.Stdout)
				}
				if len(args) > 0 {
					return cli.Usagef("bench takes no arguments, got %q", args)
				}
				cfg := bench.Config{Jobs: *jobs, Procs: *procs, Hooks: *hooks, Submits: *submits, Relaxed: *relaxed, Dir: *dir, Keep: *keep,
					Stderr: m.Stderr, Progress: cli.IsTerminal(m.Stderr), Version: m.Version}
				var err error
				if cfg.Producers, err = parseProducers(*producers); err != nil {
					return err
				}
				switch {
				case *rounds < 1:
					return cli.Usagef("--rounds %d: want at least 1", *rounds)
				case *duration <= 0:
					return cli.Usagef("--duration %s: want a positive duration", *duration)
				case *jobs < 0:
					return cli.Usagef("--jobs %d: want a count ≥ 1, or 0 to size runs by --duration", *jobs)
				case *relaxed <= 0:
					return cli.Usagef("--relaxed-sync %s: want a positive duration", *relaxed)
				case *hooks < 0 || *hooks > 4096:
					return cli.Usagef("--hooks %d: want 0 to 4096", *hooks)
				case *submits < 0 || *submits > 4096:
					return cli.Usagef("--submits %d: want 0 to 4096", *submits)
				}
				cfg.Rounds, cfg.Duration = *rounds, *duration
				cfg.Workloads = strings.Split(*workloads, ",")
				if *contenders != "" {
					cfg.Contenders = strings.Split(*contenders, ",")
				}
				if cfg.Scribe, err = os.Executable(); err != nil {
					return fmt.Errorf("find this binary: %w", err)
				}
				cfg.Client = leanBeside(cfg.Scribe)
				if *useStrace && runtime.GOOS == "linux" {
					cfg.Strace, _ = exec.LookPath("strace")
				}
				rep, err := bench.Run(ctx, cfg)
				var ne *bench.NameError
				switch {
				case ctx.Err() != nil:
					return cli.Exit(cli.ExitInterrupted, errors.New("bench interrupted"))
				case errors.As(err, &ne) && ne.Kind == "workload":
					return cli.Usagef("--workload: %v", err)
				case errors.As(err, &ne):
					return cli.Usagef("--contenders: %v", err)
				case err != nil:
					return err
				}
				if *svg != "" {
					if err := os.WriteFile(*svg, []byte(rep.SVG()), 0o644); err != nil {
						return fmt.Errorf("write the chart: %w", err)
					}
				}
				if *asJSON {
					if err := cli.WriteJSON(m.Stdout, rep); err != nil {
						return err
					}
				} else {
					rep.WriteTable(m.Stdout)
				}
				return rep.Broken()
			}
		},
	}
}

// parseProducers parses --producers: counts from 1 to 4096,
// comma-separated.
func parseProducers(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return nil, cli.Usagef("--producers %q: want counts from 1 to 4096, comma-separated, such as 1,8,32", s)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// leanBeside is the lean scribe binary beside exe, which the hooks a
// bench times must run, or exe itself if there is none (a go run build,
// whose scribed lives apart).
func leanBeside(exe string) string {
	lean := filepath.Join(filepath.Dir(exe), "scribe")
	if fi, err := os.Stat(lean); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return lean
	}
	return exe
}
