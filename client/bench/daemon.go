package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/scribehq/scribe/queue"
)

// The daemon of a scribe contender's run, and the counters read around
// the run.

// benchDaemon is a `scribe serve` process, under strace when syncs are
// counted.
type benchDaemon struct {
	cmd       *exec.Cmd
	pid       int    // scribe serve's (strace's child when traced)
	metrics   string // its metrics listener, host:port
	logPath   string
	tracePath string // strace's output; empty when not traced
	exited    chan struct{}
	waitErr   error
	stopped   bool
	stopErr   error
}

// startBenchDaemon starts `scribe serve` on store and waits until it
// serves. Its log and trace go in dir.
func startBenchDaemon(ctx context.Context, exe, strace, dir, store, sync string) (*benchDaemon, error) {
	d := &benchDaemon{logPath: filepath.Join(dir, "daemon.log"), exited: make(chan struct{})}
	log, err := os.Create(d.logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	name, args := exe, []string{"serve", "--store", store, "--sync", sync,
		"--metrics-addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "info"}
	if strace != "" {
		// --seccomp-bpf: the daemon stops only at the calls traced.
		d.tracePath = filepath.Join(dir, "syncs.trace")
		name, args = strace, append([]string{"-f", "--seccomp-bpf", "-qq", "-ttt", "-e", "trace=" + syncCalls,
			"-e", "signal=none", "-o", d.tracePath, exe}, args...)
	}
	d.cmd = exec.Command(name, args...)
	d.cmd.Stdout, d.cmd.Stderr = log, log
	// Its own process group: a terminal's ^C reaches the bench, which
	// stops the daemon after its clients.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start scribe serve: %w", err)
	}
	go func() { d.waitErr = d.cmd.Wait(); close(d.exited) }()
	if err := d.ready(ctx, store); err != nil {
		_ = d.stop()
		return nil, err
	}
	return d, nil
}

// ready waits until the daemon announces itself and its metrics address
// is in its log.
func (d *benchDaemon) ready(ctx context.Context, store string) error {
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if disc, err := queue.ReadDiscovery(store); err == nil && disc.PID > 0 {
			d.pid = disc.PID
		}
		if d.metrics == "" {
			d.metrics = logMetricsAddr(d.logPath)
		}
		if d.pid > 0 && d.metrics != "" {
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("scribe serve exited at start: %v%s", d.waitErr, d.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			return fmt.Errorf("scribe serve not serving after 30s%s", d.logTail())
		case <-tick.C:
		}
	}
}

// logMetricsAddr finds the metrics address in a JSON daemon log.
func logMetricsAddr(path string) string {
	data, _ := os.ReadFile(path)
	for line := range bytes.Lines(data) {
		var l struct{ Msg, Addr string }
		if json.Unmarshal(line, &l) == nil && l.Msg == "serving metrics" {
			return l.Addr
		}
	}
	return ""
}

// logTail is the end of the daemon's log, for an error message.
func (d *benchDaemon) logTail() string {
	data, _ := os.ReadFile(d.logPath)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	if len(data) == 0 {
		return ""
	}
	return "; its log ends:\n" + string(data)
}

// stop sends SIGTERM and waits for a clean exit; a second stop returns
// the first's result.
func (d *benchDaemon) stop() error {
	if d.stopped {
		return d.stopErr
	}
	d.stopped = true
	pid := d.pid
	if pid == 0 {
		pid = d.cmd.Process.Pid
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-d.exited:
		if d.waitErr != nil {
			d.stopErr = fmt.Errorf("scribe serve: %w%s", d.waitErr, d.logTail())
		}
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = d.cmd.Process.Kill()
		<-d.exited
		d.stopErr = fmt.Errorf("scribe serve did not stop within 30s of SIGTERM%s", d.logTail())
	}
	return d.stopErr
}

// scrape reads the daemon's metrics.
func (d *benchDaemon) scrape(ctx context.Context) (Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metrics+"/metrics", nil)
	if err != nil {
		return Metrics{}, err
	}
	req.Close = true // the daemon goes away after the run
	resp, err := http.DefaultClient.Do(req)
	if err == nil && resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		err = errors.New(resp.Status)
	}
	if err != nil {
		return Metrics{}, fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	return ReadMetrics(resp.Body)
}

// settle scrapes the daemon's metrics again, for 5 s at most, until they
// count applied jobs: the daemon counts a job as it answers it, a moment
// after the journal has its outcome, which is what drain's Wait reads.
// m is the last scrape.
func (d *benchDaemon) settle(ctx context.Context, m Metrics, applied float64) (Metrics, error) {
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for m.Applied < applied && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return m, nil
		case <-tick.C:
		}
		var err error
		if m, err = d.scrape(ctx); err != nil {
			return m, err
		}
	}
	return m, nil
}

// benchSnapshot is what the counters read at the start or the end of a
// run's timed part.
type benchSnapshot struct {
	selfCPU    time.Duration
	selfIO     procIO
	daemonCPU  time.Duration
	daemonIO   procIO
	daemonOK   bool
	metrics    Metrics
	metricsErr error
}

// snapshot reads the counters, the scrape outside the daemon's CPU
// window and everything outside this process's.
func snapshot(ctx context.Context, d *benchDaemon, before bool) benchSnapshot {
	var s benchSnapshot
	self := func() { s.selfCPU, s.selfIO = rusageSelf(), readProcIO("self") }
	daemon := func() {
		if d != nil {
			var ok bool
			s.daemonCPU, ok = procCPU(d.pid)
			s.daemonIO = readProcIO(strconv.Itoa(d.pid))
			s.daemonOK = ok && s.daemonIO.ok
		}
	}
	scrape := func() {
		if d != nil {
			s.metrics, s.metricsErr = d.scrape(ctx)
		}
	}
	if before {
		scrape()
		daemon()
		self()
	} else {
		self()
		daemon()
		scrape()
	}
	return s
}
