package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/writer/daemon"
)

// demo is `scribe demo`, on the command line's streams.
type demo struct{ *cli.Main }

// Demo is `scribe demo`: the queue at work, many writer processes against
// one store, first through the daemon, then with plain fail-fast locking.
func Demo() cli.Command {
	return cli.Command{
		Name:  "demo",
		Forms: []cli.Form{{Args: "[--workers N] [--jobs N] [--keep]", Summary: "show the queue at work"}},
		Heavy: true,
		Setup: func(m *cli.Main, fs *cli.FlagSet) func(context.Context, []string) error {
			workers := fs.Int("workers", 16, "concurrent writer processes, `N`")
			jobs := fs.Int("jobs", 20, "jobs per writer, `N` (half appends, half merges)")
			keep := fs.Bool("keep", false, "keep the temporary stores")
			c := &demo{m}
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return cli.Usagef("demo takes no arguments, got %q", args)
				}
				return c.run(ctx, *workers, *jobs, *keep)
			}
		},
	}
}

// demoResult is one run of the demo load.
type demoResult struct {
	total, ok, refused, failed int
	elapsed                    time.Duration
	latencies                  []time.Duration
	lost, doubled, disorder    int
	badJSON                    bool
}

// run runs both halves of the demo and verifies every write.
func (c *demo) run(ctx context.Context, workers, jobs int, keep bool) error {
	if workers < 1 || jobs < 1 {
		return cli.Usagef("--workers and --jobs must be at least 1")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	exe = leanBeside(exe) // the writers are hooks: they run what a hook runs
	dir, err := os.MkdirTemp("", "scribe-demo-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Fprintf(c.Stdout, "stores kept in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	n := workers * jobs
	fmt.Fprintf(c.Stdout, "scribe demo: %d writer processes, %d jobs each (%d in all): appends of a line to log.txt and merges of a key into state.json\n\n", workers, jobs, n)

	// 1. Through the queue.
	queued := filepath.Join(dir, "queued")
	if err := os.Mkdir(queued, 0o755); err != nil {
		return err
	}
	stop, err := startDemoDaemon(ctx, queued, c.Version)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "1. through the scribe daemon (each process: scribe submit --wait)\n")
	q := c.load(ctx, exe, queued, workers, jobs, "prefer")
	stop()
	if err := ctx.Err(); err != nil {
		return err
	}
	c.report(q)

	// 2. Plain fail-fast locking: a writer that finds the lock held gives
	// up, as the tools scribe replaces did.
	direct := filepath.Join(dir, "direct")
	if err := os.Mkdir(direct, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "\n2. plain fail-fast locking, no daemon (each process: scribe submit --route direct)\n")
	d := c.load(ctx, exe, direct, workers, jobs, "direct")
	if err := ctx.Err(); err != nil {
		return err
	}
	c.report(d)

	fmt.Fprintf(c.Stdout, "\nsummary: the queue kept %d of %d writes; fail-fast locking lost %d (%.0f%%).\n",
		q.total-q.lost, q.total, d.lost, 100*float64(d.lost)/float64(d.total))
	if q.lost+q.doubled+q.disorder > 0 || q.badJSON || q.failed > 0 {
		return errors.New("demo: the queued run lost, doubled or reordered writes")
	}
	return nil
}

// startDemoDaemon serves a store in this process, as `scribe serve` would.
func startDemoDaemon(ctx context.Context, store, version string) (stop func(), err error) {
	d, err := daemon.Start(ctx, daemon.Config{Stores: []daemon.Store{{Path: store}}, Command: "scribe demo", Version: version})
	if err != nil {
		return nil, err
	}
	return func() { _ = d.Close() }, nil
}

// load runs workers processes, each submitting jobs jobs one process at a
// time, and checks what reached the store.
func (c *demo) load(ctx context.Context, exe, store string, workers, jobs int, route string) demoResult {
	r := demoResult{total: workers * jobs}
	var mu sync.Mutex
	var done atomic.Int64
	progress := c.progress(&done, r.total)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for j := range jobs {
				if ctx.Err() != nil {
					return
				}
				args := []string{"submit", "--store", store, "--route", route, "--wait", "--id", fmt.Sprintf("demo-%d-%d", w, j)}
				if j%2 == 0 {
					args = append(args, "append", "log.txt", fmt.Sprintf("worker %d line %d\n", w, j))
				} else {
					args = append(args, "merge", "state.json", fmt.Sprintf(`{"w%d-%d": %d}`, w, j, j))
				}
				t0 := time.Now()
				cmd := exec.CommandContext(ctx, exe, args...)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				err := cmd.Run()
				lat := time.Since(t0)
				mu.Lock()
				var ee *exec.ExitError
				switch {
				case err == nil:
					r.ok++
					r.latencies = append(r.latencies, lat)
				case errors.As(err, &ee) && ee.ExitCode() == cli.ExitBusy:
					r.refused++
				default:
					r.failed++
					if r.failed == 1 {
						fmt.Fprintf(c.Stderr, "\nwriter failed: %v: %s", err, stderr.String())
					}
				}
				mu.Unlock()
				done.Add(1)
			}
		})
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	progress()
	c.verify(store, workers, jobs, &r)
	return r
}

// progress redraws a counter on a terminal until the returned func is
// called.
func (c *demo) progress(done *atomic.Int64, total int) func() {
	if !cli.IsTerminal(c.Stdout) {
		return func() {}
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			fmt.Fprintf(c.Stdout, "\r   %d/%d writer processes finished", done.Load(), total)
			select {
			case <-stop:
				fmt.Fprint(c.Stdout, "\r\033[K")
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(stop); <-finished }
}

// verify counts, for every write a process reported done, whether it is in
// the store exactly once and in its worker's order.
func (c *demo) verify(store string, workers, jobs int, r *demoResult) {
	lines := map[string]int{}
	lastLine := map[int]int{}
	if f, err := os.Open(filepath.Join(store, "log.txt")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lines[sc.Text()]++
			var w, j int
			if _, err := fmt.Sscanf(sc.Text(), "worker %d line %d", &w, &j); err == nil {
				if prev, ok := lastLine[w]; ok && j < prev {
					r.disorder++
				}
				lastLine[w] = j
			}
		}
		f.Close()
	}
	keys := map[string]json.RawMessage{}
	if b, err := os.ReadFile(filepath.Join(store, "state.json")); err == nil {
		r.badJSON = json.Unmarshal(b, &keys) != nil
	}
	for w := range workers {
		for j := range jobs {
			var present int
			if j%2 == 0 {
				present = lines[fmt.Sprintf("worker %d line %d", w, j)]
			} else if _, ok := keys[fmt.Sprintf("w%d-%d", w, j)]; ok {
				present = 1
			}
			switch {
			case present == 0:
				r.lost++
			case present > 1:
				r.doubled += present - 1
			}
		}
	}
}

func (c *demo) report(r demoResult) {
	out := c.Stdout
	fmt.Fprintf(out, "   %d/%d writes present exactly once; lost %d, doubled %d, out of order %d", r.total-r.lost-r.doubled, r.total, r.lost, r.doubled, r.disorder)
	if r.badJSON {
		fmt.Fprint(out, "; state.json is NOT valid JSON")
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "   processes: %d done, %d refused (store busy, exit 75), %d failed otherwise\n", r.ok, r.refused, r.failed)
	fmt.Fprintf(out, "   %.1f s, %.0f applied writes/s", r.elapsed.Seconds(), float64(r.ok)/r.elapsed.Seconds())
	if len(r.latencies) > 0 {
		slices.Sort(r.latencies)
		fmt.Fprintf(out, ", per process p50 %s, p99 %s",
			r.latencies[len(r.latencies)/2].Round(time.Millisecond), r.latencies[len(r.latencies)*99/100].Round(time.Millisecond))
	}
	fmt.Fprintln(out)
}
