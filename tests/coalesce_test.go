package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// echoargsTable is an [exec.echoargs] table whose command appends
// "JOB ARGS..." to log, allows arguments of lower-case letters only, and
// takes lockFile as its own lock (so that holding it defers the job).
func echoargsTable(log, lockFile string) string {
	return fmt.Sprintf("[exec.echoargs]\nprogram = \"/bin/sh\"\nargs = [\"-c\", %s, \"echoargs\"]\nallow_args = ['[a-z]+']\ntimeout = \"10s\"\nlock_file = %s\nenv = { LOG = %s }\n",
		tomlString(`echo "$SCRIBE_JOB_ID $*" >> "$LOG"`), tomlString(lockFile), tomlString(log))
}

// coalesceJob writes the job file of an exec job of echoargs with key k
// and the op's extra fields (JSON members, such as "dir":"x").
func coalesceJob(t *testing.T, key string, args []string, extra string) string {
	t.Helper()
	op := `{"op":"exec","name":"echoargs","args":` + tomlStrings(args)
	if extra != "" {
		op += "," + extra
	}
	p := filepath.Join(t.TempDir(), "job.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"coalesce":`+tomlString(key)+`,"ops":[`+op+`}]}`), 0o644))
	return p
}

// A job that joins a coalesced run is decided as it would be alone: one
// the allowlist refuses (an argument it does not allow, a dir through a
// symlink to /etc, a 27-hour timeout, a dir that is not there) is
// rejected, for the reason it gets alone, and is never told it was
// applied with a run that did not do what it asked; one whose arguments
// differ runs on its own. Jobs that ask for exactly the lead's run still
// join it: one run for many.
func TestCoalescedJoinerDecidedAsAlone(t *testing.T) {
	t.Parallel()
	store, err := filepath.EvalSymlinks(newStore(t))
	require.NoError(t, err)
	out := t.TempDir()
	log, toolLock := filepath.Join(out, "runs.log"), filepath.Join(out, "tool.lock")
	require.NoError(t, os.Symlink("/etc", filepath.Join(store, "etc")))
	writeConfig(t, store, echoargsTable(log, toolLock), 0o600)
	startDaemon(t, store)

	bad := []struct {
		name, id string
		args     []string
		extra    string
		reason   queue.Reason
	}{
		{"an argument the allowlist refuses", "evil", []string{"EVIL; rm -rf /"}, "", queue.ReasonNotAllowed},
		{"a dir through a symlink to /etc", "etc", []string{"abc"}, `"dir":"etc"`, queue.ReasonPathEscapes},
		{"a 27-hour timeout", "long", []string{"abc"}, fmt.Sprintf(`"timeout_ms":%d`, (27 * time.Hour).Milliseconds()), queue.ReasonNotAllowed},
		{"a dir that is not there", "nowhere", []string{"abc"}, `"dir":"nowhere"`, queue.ReasonBadInput},
	}
	submit := func(t *testing.T, id, job string) {
		t.Helper()
		r := scribe(t, "", "submit", "--store", store, "--id", id, "--job", job)
		require.Equal(t, 0, r.code, "%s: %s", id, r.stderr)
	}

	// The lead waits, deferred, while the tool's own lock is held.
	release := holdWithFlock(t, toolLock)
	submit(t, "lead", coalesceJob(t, "k", []string{"abc"}, ""))
	require.Eventually(t, func() bool {
		rep, ok := report(t, store)
		return ok && strings.Contains(rep.Deferred, "lead")
	}, 20*time.Second, 20*time.Millisecond, "the lead is deferred")
	for _, b := range bad {
		submit(t, b.id, coalesceJob(t, "k", b.args, b.extra))
	}
	submit(t, "other-args", coalesceJob(t, "k", []string{"xyz"}, ""))
	same := []string{"same-1", "same-2", "same-3"}
	for _, id := range same {
		submit(t, id, coalesceJob(t, "k", []string{"abc"}, ""))
	}
	// Submitted last, the identical jobs are gathered once all the others
	// are in the writer's hand (delivery is in order): each attempt of the
	// deferred lead gathers again, and the writer's hand holds the lead
	// and the jobs that joined it.
	require.Eventually(t, func() bool {
		rep, ok := report(t, store)
		return ok && rep.InFlight >= 1+len(same)
	}, 20*time.Second, 20*time.Millisecond, "the identical jobs joined the deferred lead")
	assert.Empty(t, readFile(t, log), "nothing ran while the tool's lock was held")
	release()

	lead := outcomeOf(t, store, "lead")
	require.Equal(t, queue.StatusApplied, lead.Status, "%s: %s", lead.Reason, lead.Detail)
	assert.Empty(t, lead.CoalescedInto)
	for _, id := range same {
		o := outcomeOf(t, store, id)
		assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s: %s", id, o.Reason, o.Detail)
		assert.Equal(t, "lead", o.CoalescedInto, "%s asked for exactly the lead's run: it joins", id)
	}
	joined := map[string]*queue.Outcome{}
	for _, b := range bad {
		o := outcomeOf(t, store, b.id)
		joined[b.id] = o
		assert.Equal(t, queue.StatusRejected, o.Status, "%s (%s) is rejected, not told it was applied", b.id, b.name)
		assert.Equal(t, b.reason, o.Reason, "%s: %s", b.id, o.Detail)
		assert.Empty(t, o.CoalescedInto, "%s joined nothing", b.id)
		assert.Nil(t, o.Exec, "%s: nothing ran for it", b.id)
	}
	other := outcomeOf(t, store, "other-args")
	assert.Equal(t, queue.StatusApplied, other.Status, "%s: %s", other.Reason, other.Detail)
	assert.Empty(t, other.CoalescedInto, "other arguments: a run of its own")

	runs := strings.Split(strings.TrimSuffix(readFile(t, log), "\n"), "\n")
	assert.Equal(t, []string{"lead abc", "other-args xyz"}, runs,
		"one run for the lead and the jobs that asked for the same, one for the other arguments, none for what was refused")

	// Alone, with no run to join, each refused job gets the same outcome.
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			id := b.id + "-alone"
			submit(t, id, coalesceJob(t, "alone-"+b.id, b.args, b.extra))
			o := outcomeOf(t, store, id)
			assert.Equal(t, queue.StatusRejected, o.Status)
			assert.Equal(t, o.Reason, joined[b.id].Reason, "the reason it gets alone")
			assert.Equal(t, o.Detail, joined[b.id].Detail, "the detail it gets alone")
		})
	}
	assert.Len(t, strings.Split(strings.TrimSuffix(readFile(t, log), "\n"), "\n"), 2, "the refused jobs alone ran nothing either")
}
