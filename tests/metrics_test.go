package tests

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// logLines decodes a daemon's --log-format json output: every line must
// be one JSON object.
func logLines(t testing.TB, d *daemon) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(d.log.String()), "\n") {
		var line map[string]any
		require.NoError(t, json.Unmarshal([]byte(s), &line), "not a JSON log line: %q", s)
		lines = append(lines, line)
	}
	return lines
}

// metricsURL is where a daemon started with --log-format json serves its
// metrics, as its log says (it may have been given port 0). The daemon
// logs it before it serves, but the line reaches the test's copy of the
// log through a pipe: it is waited for.
func metricsURL(t testing.TB, d *daemon) string {
	t.Helper()
	var url string
	found := func() bool {
		for _, s := range strings.SplitAfter(d.log.String(), "\n") {
			var l map[string]any
			if strings.HasSuffix(s, "\n") && json.Unmarshal([]byte(s), &l) == nil && l["msg"] == "serving metrics" {
				url = fmt.Sprint(l["url"])
				return true
			}
		}
		return false
	}
	if !assert.Eventually(t, found, 10*time.Second, 10*time.Millisecond) {
		require.FailNow(t, "the daemon did not log where it serves metrics", d.log.String())
	}
	return url
}

// scrape reads the metrics in Prometheus' text format.
func scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// value is a counter's or gauge's value in the series of name with these
// labels exactly; -1 if there is no such series.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	m := find(fams, name, labels...)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return -1
}

// histogram is the histogram series of name with these labels, nil if
// there is none.
func histogram(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Histogram {
	if m := find(fams, name, labels...); m != nil {
		return m.GetHistogram()
	}
	return nil
}

// find is the series of name whose labels are exactly labels (name,
// value pairs).
func find(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		if labels[i+1] != "" {
			want[labels[i]] = labels[i+1]
		}
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			if l.GetValue() != "" { // a label "" is no label, as in PromQL
				got[l.GetName()] = l.GetValue()
			}
		}
		if assert.ObjectsAreEqual(want, got) {
			return m
		}
	}
	return nil
}

// The daemon's /metrics, on the address its config file names (port 0:
// the one it chose is in its JSON log), count what it did: jobs by
// outcome and reason, duplicates, batches, latencies, the queue while the
// store is held, the wait for the store and the holds, exec runs.
func TestMetricsCountJobs(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	real, err := filepath.EvalSymlinks(store)
	require.NoError(t, err)
	writeConfig(t, real, `metrics_addr = "127.0.0.1:0"

[exec.ok]
program = "/bin/sh"
args = ["-c", "true"]
timeout = "30s"

[exec.fail]
program = "/bin/sh"
args = ["-c", "exit 3"]
timeout = "30s"
`, 0o600)
	started := time.Now()
	d := startDaemon(t, store, "--log-format", "json")
	url := metricsURL(t, d)
	assert.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), url)

	fams := scrape(t, url)
	assert.Equal(t, 0.0, value(fams, "scribe_jobs_total", "status", "applied"), "the applied series exists from the start")
	assert.Equal(t, 0.0, value(fams, "scribe_queue_depth"))
	assert.Equal(t, 1.0, value(fams, "scribe_daemon_starts_total"))
	assert.InDelta(t, float64(started.Unix()), value(fams, "scribe_daemon_start_time_seconds"), 60)
	disc, err := queue.ReadDiscovery(real)
	require.NoError(t, err)
	assert.Equal(t, 1.0, value(fams, "scribe_daemon_info", "version", disc.Version, "store", real, "store_id", queue.StoreID(real)))
	assert.Equal(t, 0.0, value(fams, "scribe_exec_deferrals_total", "command", "ok"))
	assert.Positive(t, value(fams, "process_start_time_seconds"), "the process collector is there")

	const applied, rejected, queued = 5, 3, 4
	for i := range applied {
		r := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "--id", fmt.Sprintf("a-%d", i), "append", "log.txt", "x\n")
		require.Equal(t, 0, r.code, r.stderr)
	}
	for i := range rejected {
		r := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "--id", fmt.Sprintf("r-%d", i), "--if-match", "absent", "put", "log.txt", "y")
		require.Equal(t, 1, r.code, r.stderr)
		require.Contains(t, r.stderr, "precondition_failed")
	}
	// A retried submit is answered from the journal, counted nowhere.
	r := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "--id", "a-0", "append", "log.txt", "x\n")
	require.Equal(t, 0, r.code, "a retried submit: %s", r.stderr)
	// A job published twice without Nats-Msg-Id, which JetStream does not
	// dedupe, and without a submitted time: the second is a duplicate.
	nc, err := nats.Connect(disc.URL, pinned(t, disc), nats.UserInfo(disc.User, disc.Password))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	raw := `{"v":1,"id":"raw-dup","store":"` + disc.StoreID + `","ops":[{"op":"append","path":"raw.txt","data":"r\n"}]}`
	for range 2 {
		_, err := js.Publish(t.Context(), queue.JobsSubject(disc.StoreID), []byte(raw))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return value(scrape(t, url), "scribe_duplicate_jobs_total") == 1 }, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, "r\n", readFile(t, filepath.Join(real, "raw.txt")), "applied once")
	r = scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "exec", "ok")
	require.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "exec", "fail")
	require.Equal(t, 1, r.code, r.stderr)

	// The store held by another process: jobs queue up, and the writer
	// waits.
	release := holdWithFlock(t, filepath.Join(real, ".scribe", "lock"))
	for i := range queued {
		r := scribe(t, "", "submit", "--store", store, "--route", "require", "--id", fmt.Sprintf("q-%d", i), "append", "log.txt", "q\n")
		require.Equal(t, 0, r.code, r.stderr)
	}
	require.Eventually(t, func() bool { rep, ok := report(t, store); return ok && rep.Waiting != "" }, 10*time.Second, 20*time.Millisecond)
	waitSeen := time.Now()
	require.Eventually(t, func() bool { return value(scrape(t, url), "scribe_queue_depth") == queued }, 10*time.Second, 20*time.Millisecond)
	heldAfterWait := time.Since(waitSeen) // the writer waited at least this long
	release()
	require.Eventually(t, func() bool {
		return readFile(t, filepath.Join(real, "log.txt")) == strings.Repeat("x\n", applied)+strings.Repeat("q\n", queued)
	}, 10*time.Second, 20*time.Millisecond)
	// Holds are observed when the idle writer lets the store go.
	require.Eventually(t, func() bool {
		h := histogram(scrape(t, url), "scribe_lock_hold_seconds")
		return h != nil && h.GetSampleCount() >= 2
	}, 10*time.Second, 20*time.Millisecond)

	fams = scrape(t, url)
	const fileJobs = applied + rejected + 2 + queued // the raw job and its duplicate went through batches
	assert.Equal(t, float64(applied+queued+2), value(fams, "scribe_jobs_total", "status", "applied"), "appends, the raw job and the exec ok")
	assert.Equal(t, float64(rejected), value(fams, "scribe_jobs_total", "status", "rejected", "reason", "precondition_failed"))
	assert.Equal(t, 1.0, value(fams, "scribe_jobs_total", "status", "rejected", "reason", "exec_failed"))
	assert.Equal(t, 1.0, value(fams, "scribe_duplicate_jobs_total"))
	assert.Equal(t, 0.0, value(fams, "scribe_queue_depth"))

	bs := histogram(fams, "scribe_batch_size")
	require.NotNil(t, bs)
	assert.Equal(t, float64(fileJobs), bs.GetSampleSum(), "every file job was in one applied batch")
	assert.LessOrEqual(t, bs.GetSampleCount(), uint64(fileJobs))
	apply := histogram(fams, "scribe_batch_apply_seconds")
	require.NotNil(t, apply)
	assert.Equal(t, bs.GetSampleCount(), apply.GetSampleCount(), "one apply latency per batch")
	assert.Positive(t, apply.GetSampleSum())

	lat := histogram(fams, "scribe_job_latency_seconds", "status", "applied")
	require.NotNil(t, lat)
	assert.Equal(t, uint64(applied+queued+1), lat.GetSampleCount(), "one end-to-end latency per decided job with a submitted time: not the raw one")
	assert.GreaterOrEqual(t, lat.GetSampleSum(), heldAfterWait.Seconds()*queued, "the queued jobs waited for the store")
	latRej := histogram(fams, "scribe_job_latency_seconds", "status", "rejected")
	require.NotNil(t, latRej)
	assert.Equal(t, uint64(rejected+1), latRej.GetSampleCount())

	wait := histogram(fams, "scribe_lock_wait_seconds")
	require.NotNil(t, wait)
	assert.Positive(t, wait.GetSampleCount())
	assert.GreaterOrEqual(t, wait.GetSampleSum(), heldAfterWait.Seconds(), "the wait for the held store is in")

	assert.Equal(t, 1.0, value(fams, "scribe_exec_runs_total", "command", "ok", "result", "ok"))
	assert.Equal(t, 1.0, value(fams, "scribe_exec_runs_total", "command", "fail", "result", "failed"))
	assert.Equal(t, 0.0, value(fams, "scribe_exec_deferrals_total", "command", "fail"))
	runs := histogram(fams, "scribe_exec_duration_seconds", "command", "ok")
	require.NotNil(t, runs)
	assert.Equal(t, uint64(1), runs.GetSampleCount())
}

// A metrics address that cannot be bound stops serve before it takes
// the store: exit 1, naming the flag, no daemon announced.
func TestMetricsPortTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	store := newStore(t)
	r := scribe(t, "", "serve", "--store", store, "--metrics-addr", ln.Addr().String())
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "--metrics-addr")
	assert.NoFileExists(t, queue.Layout{Root: store}.Discovery())

	r = scribe(t, "", "serve", "--store", store, "--metrics-addr", "9464")
	assert.Equal(t, 2, r.code, "a port without its colon is a usage error: %s", r.stderr)
}

// Without --metrics-addr nothing listens but the queue's server.
func TestMetricsOffByDefault(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemon(t, store, "--log-format", "json")
	lines := logLines(t, d)
	require.NotEmpty(t, lines)
	for _, l := range lines {
		assert.NotEqual(t, "serving metrics", l["msg"])
	}
}

// The daemon collects garbage at five times the live heap, its growth on
// that account bounded at 256 MiB, unless GOGC or GOMEMLIMIT say
// otherwise; its metrics show what it runs with.
func TestDaemonGCSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env         []string
		gogc, limit float64
	}{
		{[]string{"GOGC=", "GOMEMLIMIT="}, 400, 256 << 20},
		{[]string{"GOGC=150", "GOMEMLIMIT=1GiB"}, 150, 1 << 30},
		{[]string{"GOGC=off", "GOMEMLIMIT="}, math.MaxUint64, 256 << 20}, // off, as runtime/metrics says it
	} {
		d := startDaemonEnv(t, newStore(t), c.env, "--metrics-addr", "127.0.0.1:0", "--log-format", "json")
		fams := scrape(t, metricsURL(t, d))
		assert.Equal(t, c.gogc, value(fams, "go_gc_gogc_percent"), "%v", c.env)
		assert.Equal(t, c.limit, value(fams, "go_gc_gomemlimit_bytes"), "%v", c.env)
		d.stop(t)
	}
}
