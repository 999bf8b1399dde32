package server

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client/bench"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/daemon"
)

// The figures bench reads come from the daemon's own registry: a renamed
// metric fails here.
func TestBenchReadsDaemonMetrics(t *testing.T) {
	m, handler := daemon.NewPrometheus()
	scrape := func() bench.Metrics {
		t.Helper()
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		dm, err := bench.ReadMetrics(rec.Body)
		require.NoError(t, err)
		return dm
	}
	for _, size := range []int{1, 3} {
		m.BatchApplied(size, time.Millisecond)
		for range size {
			m.Outcome(&queue.Outcome{Status: queue.StatusApplied, At: time.Now()}, time.Time{}, false)
		}
	}
	m.Outcome(&queue.Outcome{Status: queue.StatusRejected, Reason: queue.ReasonBadInput, At: time.Now()}, time.Time{}, false)
	got := scrape()
	assert.Equal(t, 4.0, got.Applied, "applied jobs only")
	assert.Equal(t, 2.0, got.BatchCount)
	assert.Equal(t, 4.0, got.BatchSum)
	assert.Equal(t, 1.0, got.Buckets[1], "the batch of 1")
	assert.Equal(t, 2.0, got.Buckets[4], "both, by the bucket up to 4")
}
