package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// A command prints 240 KiB of colour escapes on each stream, within
// max_output = 262144 bytes: as JSON, where an ESC byte takes six, the
// outcome would be about 1.3 MiB, over what one NATS message carries. The
// outcome is cut to fit (the middle of each stream, marked and counted),
// so every way of asking learns it: submit --wait, a retry with the same
// ID, status ID, jobs (with several such outcomes) and status.
func TestExecOutcomeOfControlBytesIsDelivered(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	const perStream = 240 << 10
	// Resets, "\033[m", one after the other: 3 bytes, 8 as JSON.
	script := fmt.Sprintf(`gen() { yes "$(printf '\033[m')" | tr -d '\n' | head -c %d; }; gen; gen >&2`, perStream)
	writeConfig(t, store, fmt.Sprintf("[exec.colour]\nprogram = \"/bin/sh\"\nargs = [\"-c\", %s]\ntimeout = \"60s\"\nmax_output = 262144\n", tomlString(script)), 0o600)
	startDaemon(t, store)

	check := func(t *testing.T, what string, o *queue.Outcome) {
		t.Helper()
		require.NotNil(t, o, "%s: an outcome", what)
		assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s: %s", what, o.Reason, o.Detail)
		require.NotNil(t, o.Exec, what)
		b, err := json.Marshal(o)
		require.NoError(t, err)
		assert.LessOrEqual(t, len(b), queue.MaxOutcomeBytes, "%s: the outcome fits one message", what)
		assert.True(t, strings.HasPrefix(o.Exec.Stdout, "\x1b[m\x1b[m"), "%s: stdout keeps its start", what)
		assert.True(t, strings.HasSuffix(o.Exec.Stdout, "\x1b[m\x1b[m"), "%s: and its end", what)
		assert.Contains(t, o.Exec.Stdout, "bytes cut to fit the outcome", "%s: the cut is marked", what)
		assert.Contains(t, o.Exec.Stderr, "bytes cut to fit the outcome", what)
		assert.Greater(t, o.Exec.StdoutCut, int64(perStream/4), "%s: the cut is counted", what)
		assert.Greater(t, o.Exec.StderrCut, int64(perStream/4), what)
	}

	r, o := submitWait(t, store, "--id", "colour-1", "exec", "colour")
	require.Equal(t, 0, r.code, "submit --wait gets the outcome: %s", r.stderr)
	check(t, "submit --wait", o)
	t.Logf("encoded outcome: %d bytes, %d + %d bytes cut", len(r.stdout), o.Exec.StdoutCut, o.Exec.StderrCut)

	r, again := submitWait(t, store, "--id", "colour-1", "exec", "colour")
	require.Equal(t, 0, r.code, "a retry with the same ID gets it: %s", r.stderr)
	check(t, "retry", again)
	assert.Equal(t, o.Exec.Stdout, again.Exec.Stdout, "the recorded outcome")

	r = scribe(t, "", "submit", "--store", store, "--wait=60s", "--id", "colour-1", "exec", "colour")
	require.Equal(t, 0, r.code, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, "\x1b[m\x1b[m"), "without --json, the kept stdout is written out")

	st := scribe(t, "", "status", "--store", store, "--json", "colour-1")
	require.Equal(t, 0, st.code, "status ID: %s", st.stderr)
	var so queue.Outcome
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &so))
	check(t, "status ID", &so)

	for _, id := range []string{"colour-2", "colour-3"} {
		r, o := submitWait(t, store, "--id", id, "exec", "colour")
		require.Equal(t, 0, r.code, "%s: %s", id, r.stderr)
		check(t, id, o)
	}
	jr := scribe(t, "", "jobs", "--store", store, "--json")
	require.Equal(t, 0, jr.code, "jobs --json with three such outcomes: %s", jr.stderr)
	var list struct {
		Outcomes []*queue.Outcome `json:"outcomes"`
	}
	require.NoError(t, json.Unmarshal([]byte(jr.stdout), &list))
	var ids []string
	for _, o := range list.Outcomes {
		ids = append(ids, o.ID)
	}
	assert.Equal(t, []string{"colour-3", "colour-2", "colour-1"}, ids, "every outcome listed")
	jr = scribe(t, "", "jobs", "--store", store)
	require.Equal(t, 0, jr.code, "jobs: %s", jr.stderr)
	assert.Contains(t, jr.stdout, "colour-1")

	sr := scribe(t, "", "status", "--store", store)
	assert.Equal(t, 0, sr.code, "status: %s", sr.stderr)
	_, ok := report(t, store)
	assert.True(t, ok, "status --json")
}
