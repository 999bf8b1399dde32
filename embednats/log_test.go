package embednats

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// LogBuffer is a debug-level slog.Logger (Logger) into a buffer that is
// safe to read while a server logs. For this package's tests, inside and
// outside it.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger logs into the buffer, at debug level.
func (l *LogBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Permission violations, which any submitter can cause, reach the log at
// WARN at most once per violationEvery, with the count of those left out;
// other server errors are logged each time at ERROR.
func TestViolationsAreRateLimited(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &slogAdapter{
		l:   slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})),
		now: func() time.Time { return clock },
	}
	violation := func() {
		a.Errorf("%s - %s", "127.0.0.1:5555 - cid:7 - \"v1.55.0:go\" - User \"client\"", `Publish Violation - Subject "$JS.API.STREAM.DELETE.x"`)
	}
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }

	for range 50 {
		violation()
	}
	if assert.Len(t, lines(), 1, buf.String()) {
		assert.Contains(t, lines()[0], "level=WARN")
		assert.Contains(t, lines()[0], "Publish Violation")
		assert.Contains(t, lines()[0], "suppressed_since_last=0")
	}

	clock = clock.Add(violationEvery - time.Millisecond)
	a.Errorf("Subscription Violation - Subject %q, SID %s", "scribe.x.jobs", "1")
	assert.Len(t, lines(), 1, "still within the period")

	clock = clock.Add(time.Millisecond)
	violation()
	if assert.Len(t, lines(), 2, buf.String()) {
		assert.Contains(t, lines()[1], "suppressed_since_last=50", "49 publishes and a subscription left out")
	}

	a.Errorf("Error trying to connect to route: %v", "boom")
	a.Errorf("Error trying to connect to route: %v", "boom")
	if assert.Len(t, lines(), 4, buf.String()) {
		assert.Contains(t, lines()[3], "level=ERROR")
	}
}
