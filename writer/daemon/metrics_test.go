package daemon

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/exec"
)

func TestMetricsAddr(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		exposed bool
		bad     bool
	}{
		{in: ":9464", want: "127.0.0.1:9464"},
		{in: "127.0.0.1:0", want: "127.0.0.1:0"},
		{in: "localhost:9464", want: "localhost:9464"},
		{in: "[::1]:9464", want: "[::1]:9464"},
		{in: "0.0.0.0:9464", want: "0.0.0.0:9464", exposed: true},
		{in: "192.0.2.7:9464", want: "192.0.2.7:9464", exposed: true},
		{in: "metrics.example:9464", want: "metrics.example:9464", exposed: true},
		{in: "9464", bad: true},
		{in: "127.0.0.1", bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, exposed, err := metricsAddr(tc.in)
			if tc.bad {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrConfig)
				assert.Error(t, CheckMetricsAddr(tc.in), "the config file's key takes what the flag takes")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.exposed, exposed)
			assert.NoError(t, CheckMetricsAddr(tc.in))
		})
	}
	assert.NoError(t, CheckMetricsAddr(""), `metrics_addr = "" is no metrics`)
}

// families gathers the registry by metric name.
func families(t *testing.T, m *metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := m.reg.Gather()
	require.NoError(t, err)
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// series finds the metric of a family with exactly these labels.
func series(t *testing.T, f *dto.MetricFamily, labels map[string]string) *dto.Metric {
	t.Helper()
	require.NotNil(t, f)
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) == len(labels) && assert.ObjectsAreEqual(labels, got) {
			return m
		}
	}
	require.Failf(t, "no series", "%s%v", f.GetName(), labels)
	return nil
}

func TestMetricsObserve(t *testing.T) {
	m := newMetrics()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m.started(start, "1.2.3", "/s", []exec.Command{{Name: "reindex"}})
	at := time.Now().UTC()
	applied := &queue.Outcome{ID: "a", Status: queue.StatusApplied, At: at}
	m.Outcome(applied, at.Add(-1500*time.Millisecond), false)
	m.Outcome(applied, time.Time{}, false)       // no submitted time: counted, not timed
	m.Outcome(applied, at.Add(time.Hour), false) // a client clock ahead: not timed
	m.Outcome(applied, at.Add(-time.Hour), true) // a duplicate: neither
	rejected := &queue.Outcome{ID: "r", Status: queue.StatusRejected, Reason: queue.ReasonPathEscapes, At: at}
	m.Outcome(rejected, at.Add(-time.Second), false)
	m.BatchApplied(3, 2*time.Millisecond)
	m.BatchApplied(5, 4*time.Millisecond)
	m.LockWaited(time.Second)
	m.LockHeld(3 * time.Second)
	m.Deferred("reindex")
	m.Deferred("reindex")
	m.ExecRan("reindex", exec.Busy, time.Second)
	m.ExecRan("reindex", exec.OK, 2*time.Second)

	f := families(t, m)
	assert.Equal(t, 3.0, series(t, f["scribe_jobs_total"], map[string]string{"status": "applied", "reason": ""}).GetCounter().GetValue())
	assert.Equal(t, 1.0, series(t, f["scribe_jobs_total"], map[string]string{"status": "rejected", "reason": "path_escapes"}).GetCounter().GetValue())
	assert.Equal(t, 1.0, f["scribe_duplicate_jobs_total"].GetMetric()[0].GetCounter().GetValue())
	lat := series(t, f["scribe_job_latency_seconds"], map[string]string{"status": "applied"}).GetHistogram()
	assert.Equal(t, uint64(1), lat.GetSampleCount())
	assert.InDelta(t, 1.5, lat.GetSampleSum(), 1e-9)
	assert.Equal(t, uint64(1), series(t, f["scribe_job_latency_seconds"], map[string]string{"status": "rejected"}).GetHistogram().GetSampleCount())
	bs := f["scribe_batch_size"].GetMetric()[0].GetHistogram()
	assert.Equal(t, uint64(2), bs.GetSampleCount())
	assert.Equal(t, 8.0, bs.GetSampleSum())
	assert.InDelta(t, 0.006, f["scribe_batch_apply_seconds"].GetMetric()[0].GetHistogram().GetSampleSum(), 1e-9)
	assert.Equal(t, 1.0, f["scribe_lock_wait_seconds"].GetMetric()[0].GetHistogram().GetSampleSum())
	assert.Equal(t, 3.0, f["scribe_lock_hold_seconds"].GetMetric()[0].GetHistogram().GetSampleSum())
	assert.Equal(t, 2.0, series(t, f["scribe_exec_deferrals_total"], map[string]string{"command": "reindex"}).GetCounter().GetValue())
	assert.Equal(t, 1.0, series(t, f["scribe_exec_runs_total"], map[string]string{"command": "reindex", "result": "busy"}).GetCounter().GetValue())
	assert.Equal(t, 1.0, series(t, f["scribe_exec_runs_total"], map[string]string{"command": "reindex", "result": "ok"}).GetCounter().GetValue())
	assert.Equal(t, 3.0, series(t, f["scribe_exec_duration_seconds"], map[string]string{"command": "reindex"}).GetHistogram().GetSampleSum())
	assert.Equal(t, 1.0, f["scribe_daemon_starts_total"].GetMetric()[0].GetCounter().GetValue())
	assert.Equal(t, float64(start.Unix()), f["scribe_daemon_start_time_seconds"].GetMetric()[0].GetGauge().GetValue())
	assert.Equal(t, 1.0, series(t, f["scribe_daemon_info"], map[string]string{"version": "1.2.3", "store": "/s", "store_id": queue.StoreID("/s")}).GetGauge().GetValue())
	assert.Contains(t, f, "go_goroutines")
	assert.Contains(t, f, "process_start_time_seconds")
}

// A fresh registry shows the applied count and each command's series
// (deferrals, runs by every ending, durations) at 0, not as missing
// series.
func TestMetricsStartAtZero(t *testing.T) {
	m := newMetrics()
	m.started(time.Now(), "v", "/s", []exec.Command{{Name: "a"}, {Name: "b"}})
	f := families(t, m)
	assert.Equal(t, 0.0, series(t, f["scribe_jobs_total"], map[string]string{"status": "applied", "reason": ""}).GetCounter().GetValue())
	for _, c := range []string{"a", "b"} {
		assert.Equal(t, 0.0, series(t, f["scribe_exec_deferrals_total"], map[string]string{"command": c}).GetCounter().GetValue())
		assert.Equal(t, uint64(0), series(t, f["scribe_exec_duration_seconds"], map[string]string{"command": c}).GetHistogram().GetSampleCount())
		for _, end := range exec.Endings {
			assert.Equal(t, 0.0, series(t, f["scribe_exec_runs_total"], map[string]string{"command": c, "result": end}).GetCounter().GetValue())
		}
	}
	assert.Len(t, f["scribe_exec_runs_total"].GetMetric(), 2*7, "each command, each of the 7 endings")
}

func TestMetricsServer(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ms, err := listenMetrics("127.0.0.1:0", "", log)
	require.NoError(t, err)
	m := newMetrics()
	m.Outcome(&queue.Outcome{Status: queue.StatusApplied, At: time.Now()}, time.Time{}, false)
	ms.Serve(m.reg, log)
	url := "http://" + ms.Addr() + "/metrics"

	resp, err := http.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), `scribe_jobs_total{reason="",status="applied"} 1`)

	resp, err = http.Get("http://" + ms.Addr() + "/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "only /metrics is served")

	ms.Close()
	_, err = http.Get(url)
	assert.Error(t, err, "closed")

	// A taken port fails at once, naming the flag.
	taken, err := listenMetrics("127.0.0.1:0", "", log)
	require.NoError(t, err)
	defer taken.Close()
	_, err = listenMetrics(taken.Addr(), "", log)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--metrics-addr")
}

// A non-loopback address is warned about.
func TestMetricsWarnsExposed(t *testing.T) {
	var buf bytes.Buffer
	ms, err := listenMetrics("0.0.0.0:0", "", slog.New(slog.NewTextHandler(&buf, nil)))
	require.NoError(t, err)
	ms.Close()
	assert.Contains(t, buf.String(), "not on a loopback address")
}
