package embednats

import (
	"bytes"
	"log/slog"
	"regexp"
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

// nats-server's start-up banner reaches the log as records: its settings
// as attributes, its art not at all; the advice to hash plaintext
// passwords is dropped where scribe made every password, kept elsewhere.
func TestBannerAndPasswordLines(t *testing.T) {
	var buf bytes.Buffer
	a := &slogAdapter{l: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), generated: true}
	for _, l := range []string{
		"Starting nats-server",
		"  Version:  2.15.2",
		"  ID:       NB3W5NOBQS",
		"    _ ___ _____ ___ _____ ___ ___   _   __  __",
		" _ | | __|_   _/ __|_   _| _ \\ __| /_\\ |  \\/  |",
		"| || | _|  | | \\__ \\ | | |   / _| / _ \\| |\\/| |",
		"",
		"         https://docs.nats.io/jetstream",
		"---------------- JETSTREAM ----------------",
		`  Store Directory: "/tmp/s/.scribe/jetstream/jetstream"`,
		"  Max Memory:      17.66 GB",
		"-------------------------------------------",
		"Server is ready",
	} {
		a.Noticef("%s", l)
	}
	a.Warnf("Plaintext passwords detected, use nkeys or bcrypt")
	assert.Equal(t, `{"level":"DEBUG","msg":"Starting nats-server"}
{"level":"DEBUG","msg":"nats-server","version":"2.15.2"}
{"level":"DEBUG","msg":"nats-server","id":"NB3W5NOBQS"}
{"level":"DEBUG","msg":"nats-server","store_directory":"/tmp/s/.scribe/jetstream/jetstream"}
{"level":"DEBUG","msg":"nats-server","max_memory":"17.66 GB"}
{"level":"DEBUG","msg":"Server is ready"}
`, regexp.MustCompile(`"time":"[^"]*",`).ReplaceAllString(buf.String(), ""))

	buf.Reset()
	a.generated = false
	a.Warnf("Plaintext passwords detected, use nkeys or bcrypt")
	assert.Contains(t, buf.String(), `"level":"WARN","msg":"Plaintext passwords detected`, "an operator's own passwords")
}
