//go:build linux

package client_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// BenchmarkApply measures the client's side of Apply against a real
// daemon in a process of its own: 100-byte appends to one file by 1 and
// 32 goroutines sharing one client. Besides Go's ns/op, B/op and
// allocs/op (the client's alone: the daemon is another process), it
// reports jobs/s, the client's and the daemon's CPU microseconds per job,
// and the p50 and p99 of one Apply. The daemon's queue syncs every write
// unless SCRIBE_BENCH_SYNC sets an interval (such as 1s).
//
//	go test -run '^$' -bench Apply -benchtime 2000x ./client/
func BenchmarkApply(b *testing.B) {
	benchRoute(b, func(c *client.Client, job *queue.Job) error {
		out, err := c.Apply(b.Context(), job)
		if err == nil && !out.Applied() {
			err = fmt.Errorf("job %s %w", out.ID, out.Err())
		}
		return err
	})
}

// BenchmarkSubmit is BenchmarkApply for Submit: until the queue has the
// job, not its outcome.
func BenchmarkSubmit(b *testing.B) {
	benchRoute(b, func(c *client.Client, job *queue.Job) error {
		return c.Submit(b.Context(), job)
	})
}

func benchRoute(b *testing.B, do func(*client.Client, *queue.Job) error) {
	store := newStore(b)
	pid := spawnDaemon(b, store, os.Getenv("SCRIBE_BENCH_SYNC"))
	c, err := client.Open(b.Context(), store, client.WithRoute(client.RouteRequire))
	require.NoError(b, err)
	b.Cleanup(func() { _ = c.Close() })
	data := []byte(strings.Repeat("x", 99) + "\n")
	for _, producers := range []int{1, 32} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			b.ReportAllocs()
			var next atomic.Int64
			lat := make([][]time.Duration, producers)
			for p := range lat {
				lat[p] = make([]time.Duration, 0, b.N/producers+1)
			}
			var failed atomic.Pointer[error]
			var wg sync.WaitGroup
			self0, daemon0, sw0 := cpuSelf(), cpuOf(pid), switchesSelf()
			b.ResetTimer()
			start := time.Now()
			for p := range producers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						job := &queue.Job{Ops: []queue.Op{{Kind: queue.OpAppend, Path: "bench.txt", Data: data}}}
						t := time.Now()
						if err := do(c, job); err != nil {
							failed.CompareAndSwap(nil, &err)
							return
						}
						lat[p] = append(lat[p], time.Since(t))
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if err := failed.Load(); err != nil {
				b.Fatal(*err)
			}
			all := slices.Concat(lat...)
			slices.Sort(all)
			n := float64(b.N)
			b.ReportMetric(n/elapsed.Seconds(), "jobs/s")
			b.ReportMetric(float64((cpuSelf()-self0).Microseconds())/n, "client-cpu-µs/job")
			b.ReportMetric(float64(switchesSelf()-sw0)/n, "client-ctxsw/job")
			if d := cpuOf(pid) - daemon0; d >= 0 {
				b.ReportMetric(float64(d.Microseconds())/n, "daemon-cpu-µs/job")
			}
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// cpuSelf is this process's user and system time.
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// switchesSelf is how many times this process's threads gave up the CPU
// (waiting: a goroutine wake-up that needed a thread) or were made to.
func switchesSelf() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}

// cpuOf is process pid's user and system time (clock ticks of 10 ms), or
// -1 if unknown.
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command (which may hold spaces): state is the 3rd
	// field, utime the 14th, stime the 15th.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}
