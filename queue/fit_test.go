package queue_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// marker is what Fit puts where it cut n bytes.
func marker(n int64) string { return fmt.Sprintf("\n[... %d bytes cut to fit the outcome ...]\n", n) }

// execOutcome is an applied exec outcome with the given output.
func execOutcome(stdout, stderr string) *queue.Outcome {
	return &queue.Outcome{
		V: queue.Version, ID: "colour-1", Status: queue.StatusApplied, Epoch: 3, Seq: 9, Mode: queue.ModeDaemon,
		At: time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC), Digest: "sha256:" + strings.Repeat("a", 64),
		Exec: &queue.ExecResult{Command: "colour", Stdout: stdout, Stderr: stderr, StdoutCut: 7, Started: time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC), DurationMS: 12},
	}
}

func encoded(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// checkCut checks that got is orig with its middle cut out (added bytes
// counted in delta) behind a marker, or orig itself.
func checkCut(t testing.TB, name, orig, got string, delta int64) {
	t.Helper()
	switch {
	case got == orig:
		assert.Zero(t, delta, "%s: uncut, uncounted", name)
	case got == "":
		assert.EqualValues(t, len(orig), delta, "%s: all of it cut, and counted", name)
	default:
		m := marker(delta)
		i := strings.Index(got, m)
		require.GreaterOrEqual(t, i, 0, "%s: the marker names the %d bytes cut", name, delta)
		head, tail := got[:i], got[i+len(m):]
		assert.True(t, strings.HasPrefix(orig, head), "%s keeps its start", name)
		assert.True(t, strings.HasSuffix(orig, tail), "%s keeps its end", name)
		assert.EqualValues(t, len(orig)-len(head)-len(tail), delta, "%s: what went is counted", name)
	}
}

// A command's 240 KiB of colour escapes on each stream, within a
// max_output of 256 KiB, encode to about 2.8 MiB: Fit cuts both streams
// in the middle until the outcome fits, marking and counting the cut; the
// original is left alone.
func TestOutcomeFitControlBytes(t *testing.T) {
	esc := strings.Repeat("\x1b", 240<<10)
	o := execOutcome("BEGIN"+esc+"END", "EBEGIN"+esc+"EEND")
	before := string(encoded(t, o))
	require.Greater(t, len(before), 2<<20, "the premise: over the NATS payload")

	f := o.Fit(queue.MaxOutcomeBytes)
	b := encoded(t, f)
	assert.LessOrEqual(t, len(b), queue.MaxOutcomeBytes)
	assert.Greater(t, len(b), queue.MaxOutcomeBytes-4096, "cut no more than needed")
	assert.Equal(t, before, string(encoded(t, o)), "the original is not changed")
	back, err := queue.DecodeOutcome(b)
	require.NoError(t, err)
	assert.Equal(t, f.Exec.Stdout, back.Exec.Stdout)
	assert.True(t, strings.HasPrefix(f.Exec.Stdout, "BEGIN\x1b"))
	assert.True(t, strings.HasSuffix(f.Exec.Stdout, "\x1bEND"))
	assert.True(t, strings.HasPrefix(f.Exec.Stderr, "EBEGIN"))
	assert.True(t, strings.HasSuffix(f.Exec.Stderr, "EEND"))
	checkCut(t, "stdout", o.Exec.Stdout, f.Exec.Stdout, f.Exec.StdoutCut-o.Exec.StdoutCut)
	checkCut(t, "stderr", o.Exec.Stderr, f.Exec.Stderr, f.Exec.StderrCut-o.Exec.StderrCut)
	assert.InDelta(t, len(f.Exec.Stdout), len(f.Exec.Stderr), 64, "the streams share the room")
	assert.Equal(t, o.ID, f.ID)
	assert.Equal(t, o.Digest, f.Digest)
}

// An outcome that fits is returned as it is.
func TestOutcomeFitKeepsWhatFits(t *testing.T) {
	o := execOutcome("hello\n", "")
	assert.Same(t, o, o.Fit(queue.MaxOutcomeBytes))
	small := execOutcome(strings.Repeat("x", 100), strings.Repeat("<", 3000))
	f := small.Fit(2000)
	assert.Equal(t, small.Exec.Stdout, f.Exec.Stdout, "the smaller stream is left whole")
	assert.LessOrEqual(t, len(encoded(t, f)), 2000)
}

// Meta, the caller's, is cut last: the longest values from their middle,
// then whole entries, counted in MetaCut.
func TestOutcomeFitMeta(t *testing.T) {
	o := execOutcome("out", "err")
	o.Detail = strings.Repeat("d", 100)
	o.Meta = map[string]string{"big": strings.Repeat("&", 400<<10), "small": "kept"}
	f := o.Fit(64 << 10)
	assert.LessOrEqual(t, len(encoded(t, f)), 64<<10)
	assert.Empty(t, f.Exec.Stdout, "the output goes first")
	assert.EqualValues(t, 7+3, f.Exec.StdoutCut, "and is counted")
	assert.Equal(t, o.Detail, f.Detail)
	assert.Equal(t, "kept", f.Meta["small"])
	assert.Contains(t, f.Meta["big"], "bytes cut to fit the outcome")
	assert.Zero(t, f.MetaCut)
	assert.Len(t, o.Meta["big"], 400<<10, "the original is not changed")

	many := execOutcome("", "")
	many.Meta = map[string]string{}
	for i := range 100_000 {
		many.Meta["key-"+strconv.Itoa(i)] = "v"
	}
	f = many.Fit(queue.MaxOutcomeBytes)
	b := encoded(t, f)
	assert.LessOrEqual(t, len(b), queue.MaxOutcomeBytes)
	assert.Positive(t, f.MetaCut)
	assert.Equal(t, 100_000, len(f.Meta)+f.MetaCut, "each entry kept or counted")
	assert.Len(t, many.Meta, 100_000)
}

// A look-up of an outcome recorded too large (by a version that did not
// bound it) is cut to fit a reply.
func TestLookupFit(t *testing.T) {
	o := execOutcome(strings.Repeat("\x00", 1<<20), "")
	l := queue.Lookup{Found: true, Outcome: o, State: queue.StateApplied}
	l.Fit(queue.MaxReplyBytes)
	assert.LessOrEqual(t, len(encoded(t, &l)), queue.MaxReplyBytes)
	assert.Positive(t, l.Outcome.Exec.StdoutCut-o.Exec.StdoutCut)
	assert.Len(t, o.Exec.Stdout, 1<<20)
}

// A listing of many large outcomes shares the room among them; one of
// more outcomes than fit leaves the oldest out and says how many.
func TestJobListFit(t *testing.T) {
	big := strings.Repeat("\x1b", 240<<10)
	list := queue.JobList{QueuedTotal: 1, Queued: []queue.QueuedJob{{ID: "q1", Seq: 60, Position: 1, State: queue.StateQueued, Ops: []string{"exec colour"}}}}
	for i := range 50 {
		o := execOutcome(big, big)
		o.ID = fmt.Sprintf("colour-%d", i)
		list.Outcomes = append(list.Outcomes, o)
	}
	list.Fit(queue.MaxReplyBytes)
	assert.LessOrEqual(t, len(encoded(t, &list)), queue.MaxReplyBytes)
	assert.Len(t, list.Outcomes, 50, "every outcome listed, cut to its share")
	assert.Zero(t, list.OutcomesCut)
	assert.Len(t, list.Queued, 1)
	for _, o := range list.Outcomes {
		assert.Positive(t, o.Exec.StdoutCut)
	}

	list = queue.JobList{QueuedTotal: 20_000}
	for i := range 10_000 {
		list.Outcomes = append(list.Outcomes, &queue.Outcome{V: 1, ID: fmt.Sprintf("job-%05d", i), Status: queue.StatusApplied, Mode: queue.ModeDaemon, Digest: "sha256:" + strings.Repeat("b", 64)})
		list.Queued = append(list.Queued, queue.QueuedJob{ID: fmt.Sprintf("queued-%05d", i), Seq: uint64(i), Position: uint64(i + 1), State: queue.StateQueued, Ops: []string{"append"}})
	}
	list.Fit(queue.MaxReplyBytes)
	assert.LessOrEqual(t, len(encoded(t, &list)), queue.MaxReplyBytes)
	assert.Equal(t, 10_000, len(list.Outcomes)+list.OutcomesCut)
	assert.Equal(t, "job-00000", list.Outcomes[0].ID, "the newest are kept")
	assert.NotEmpty(t, list.Queued)
	assert.Equal(t, "queued-00000", list.Queued[0].ID, "the next are kept")
	assert.EqualValues(t, 20_000, list.QueuedTotal)
}

// A status report whose strings are huge (a holder's command line) fits.
func TestStatusReportFit(t *testing.T) {
	r := queue.StatusReport{V: 1, Store: "/s", Holder: &queue.Holder{PID: 1, Command: "scribe lock -- " + strings.Repeat("arg ", 1<<20)},
		Waiting: "store is busy: " + strings.Repeat("w", 300<<10)}
	r.Fit(queue.MaxReplyBytes)
	assert.LessOrEqual(t, len(encoded(t, &r)), queue.MaxReplyBytes)
	assert.True(t, strings.HasPrefix(r.Holder.Command, "scribe lock -- arg"))
	assert.True(t, strings.HasPrefix(r.Waiting, "store is busy: "), "the start says why")

	d := queue.DeadLetters{Total: 500}
	for i := range 500 {
		d.Letters = append(d.Letters, queue.DeadLetter{Seq: uint64(i), Reason: queue.ReasonBadInput, Detail: "x", Data: []byte(strings.Repeat("\x00", queue.DeadLetterBytes))})
	}
	d.Fit(queue.MaxReplyBytes)
	assert.LessOrEqual(t, len(encoded(t, &d)), queue.MaxReplyBytes)
	assert.NotEmpty(t, d.Letters)
	assert.Equal(t, 500, d.Total)
}

// Any outcome, fitted to any limit from MinFitBytes, encodes within it as
// valid JSON (so valid UTF-8) that decodes; what it keeps of each string
// is its start and its end around a marker that counts the cut.
func FuzzOutcomeFit(f *testing.F) {
	f.Add("hello\n", "", "", "k", "v", uint16(1), uint32(0))
	f.Add(strings.Repeat("\x1b[0m", 3000), strings.Repeat("é<>&\u2028", 2000), "detail", "key", "value", uint16(3), uint32(10_000))
	f.Add("\xff\xfe\x00", "\"\\\n", strings.Repeat("d", 5000), strings.Repeat("k", 300), strings.Repeat("\x01", 3000), uint16(200), uint32(1))
	f.Fuzz(func(t *testing.T, stdout, stderr, detail, key, value string, entries uint16, limit uint32) {
		// Bound what Fit relies on, as it is in every outcome a writer
		// makes; reach past MinFitBytes by repeating the rest.
		stdout, stderr = strings.Repeat(stdout, 1+int(limit%7)*8), strings.Repeat(stderr, 1+int(limit%5)*8)
		o := execOutcome(stdout, stderr)
		o.Status, o.Reason, o.Detail = queue.StatusRejected, queue.ReasonExecFailed, detail
		if len(key) > 0 {
			o.Meta = map[string]string{}
			for i := range int(entries % 500) {
				o.Meta[key+strconv.Itoa(i)] = value
			}
		}
		lim := queue.MinFitBytes + int(limit%(256<<10))
		before := string(encoded(t, o))
		got := o.Fit(lim)
		b := encoded(t, got)
		require.LessOrEqual(t, len(b), lim, "fits")
		require.True(t, json.Valid(b))
		require.True(t, utf8.Valid(b))
		_, err := queue.DecodeOutcome(b)
		require.NoError(t, err)
		assert.Equal(t, before, string(encoded(t, o)), "the original is not changed")
		if len(before) <= lim {
			assert.Same(t, o, got)
			return
		}
		checkCut(t, "stdout", o.Exec.Stdout, got.Exec.Stdout, got.Exec.StdoutCut-o.Exec.StdoutCut)
		checkCut(t, "stderr", o.Exec.Stderr, got.Exec.Stderr, got.Exec.StderrCut-o.Exec.StderrCut)
		assert.Equal(t, len(o.Meta), len(got.Meta)+got.MetaCut, "each meta entry kept or counted")
		for k, v := range got.Meta {
			if v != o.Meta[k] {
				assert.Contains(t, v, "bytes cut to fit the outcome", "meta %q: cut, and says so", k)
			}
		}
	})
}
