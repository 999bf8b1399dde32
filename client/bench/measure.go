package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The counters `scribe bench` reads: this process's and the daemon's CPU
// time and bytes written, the daemon's metrics, and its sync calls.

// rusageSelf is this process's CPU time, user and system.
func rusageSelf() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// userHZ is the unit of /proc/PID/stat's times: USER_HZ, 100 on Linux
// whatever the kernel's own tick.
const userHZ = 100

// procCPU is a process's CPU time, user and system, all its threads, from
// /proc/PID/stat (in 10 ms ticks).
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing one. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * time.Second / userHZ, true
}

// procIO is what /proc/PID/io says a process wrote: write_bytes, the bytes
// it sent to storage (pages it dirtied), and wchar, all it passed to
// write calls, sockets included.
type procIO struct {
	writeBytes, wchar int64
	ok                bool
}

func (a procIO) minus(b procIO) procIO {
	return procIO{writeBytes: a.writeBytes - b.writeBytes, wchar: a.wchar - b.wchar, ok: a.ok && b.ok}
}

// readProcIO reads /proc/PID/io; pid may be "self".
func readProcIO(pid string) procIO {
	b, err := os.ReadFile("/proc/" + pid + "/io")
	if err != nil {
		return procIO{}
	}
	var io procIO
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil:
		case k == "write_bytes":
			io.writeBytes, io.ok = n, true
		case k == "wchar":
			io.wchar = n
		}
	}
	return io
}

// Metrics are the figures bench reads from a daemon's /metrics, summed
// over label sets (a daemon may serve several stores).
type Metrics struct {
	Applied              float64             // scribe_jobs_total{status="applied"}
	BatchCount, BatchSum float64             // scribe_batch_size
	Buckets              map[float64]float64 // scribe_batch_size_bucket: le → cumulative count
}

// ReadMetrics reads the figures bench uses from a daemon's metrics, in
// the Prometheus text format. The daemon's own tests hold its metric
// names to what this reads.
func ReadMetrics(r io.Reader) (Metrics, error) {
	m := Metrics{Buckets: map[float64]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name, labels, _ := strings.Cut(line[:sp], "{")
		switch name {
		case "scribe_jobs_total":
			if strings.Contains(labels, `status="applied"`) {
				m.Applied += v
			}
		case "scribe_batch_size_count":
			m.BatchCount += v
		case "scribe_batch_size_sum":
			m.BatchSum += v
		case "scribe_batch_size_bucket":
			_, le, ok := strings.Cut(labels, `le="`)
			le, _, _ = strings.Cut(le, `"`)
			if f, err := strconv.ParseFloat(le, 64); ok && err == nil {
				m.Buckets[f] += v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("read metrics: %w", err)
	}
	return m, nil
}

// batchStats are the mean batch size between two scrapes, and the upper
// bound of the histogram bucket that holds the median batch; nil without
// batches.
func batchStats(before, after Metrics) (mean, p50 *float64) {
	n := after.BatchCount - before.BatchCount
	if n <= 0 {
		return nil, nil
	}
	mean = ptr((after.BatchSum - before.BatchSum) / n)
	les := slices.Sorted(func(yield func(float64) bool) {
		for le := range after.Buckets {
			if !yield(le) {
				return
			}
		}
	})
	for _, le := range les {
		if after.Buckets[le]-before.Buckets[le] >= n/2 {
			if !math.IsInf(le, 0) {
				p50 = ptr(le)
			}
			break
		}
	}
	return mean, p50
}

// syncCalls are the system calls that make data durable, as strace's
// trace= list.
const syncCalls = "fsync,fdatasync,sync_file_range,msync"

// countSyncsFile counts the sync calls made from one instant to another
// in an strace -f -ttt output file.
func countSyncsFile(path string, from, to time.Time) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read the daemon's trace: %w", err)
	}
	defer f.Close()
	n, err := countSyncs(f, from, to)
	if err != nil {
		return 0, fmt.Errorf("read the daemon's trace %s: %w", path, err)
	}
	return n, nil
}

// countSyncs counts the sync calls made from one instant to another in
// strace -f -ttt output: lines "[PID] SECONDS.MICROS CALL(ARGS...", a call
// that another thread interrupted counted once, at its start (its
// "<... CALL resumed>" line is not).
func countSyncs(r io.Reader, from, to time.Time) (int, error) {
	calls := strings.Split(syncCalls, ",")
	n := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) > 2 && f[0] == "[pid": // "[pid  123] …", on a terminal
			f = f[2:]
		case len(f) > 1 && !strings.Contains(f[0], "."): // "123 …", in a file
			f = f[1:]
		}
		if len(f) < 2 {
			continue
		}
		at, ok := straceTime(f[0])
		name, _, call := strings.Cut(f[1], "(")
		if ok && call && slices.Contains(calls, name) && !at.Before(from) && !at.After(to) {
			n++
		}
	}
	return n, sc.Err()
}

// straceTime parses -ttt's "SECONDS.MICROS".
func straceTime(s string) (time.Time, bool) {
	sec, frac, ok := strings.Cut(s, ".")
	if !ok || len(frac) != 6 {
		return time.Time{}, false
	}
	se, err1 := strconv.ParseInt(sec, 10, 64)
	us, err2 := strconv.ParseInt(frac, 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, false
	}
	return time.Unix(se, us*1000), true
}
