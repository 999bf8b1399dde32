package daemon_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// Outcomes that an older version recorded without a bound, larger than a
// message, are still told: the status service cuts them when it answers
// a look-up or a listing, and a retry's published outcome is cut too.
func TestStatusAnswersFitOutcomesRecordedTooLarge(t *testing.T) {
	nc, js := startJetStream(t)
	store, id := writerStore(t)
	w := startWriter(t, store, nc, nil)
	publishJob(t, js, id, "first", wireJob(t, id, "first", "x")) // makes the journal
	outcomeOf(t, w, "first")

	at := time.Now().UTC()
	for _, jid := range []string{"old-1", "old-2", "old-3"} {
		o := &queue.Outcome{V: queue.Version, ID: jid, Status: queue.StatusApplied, Epoch: 1, Seq: 1, Mode: queue.ModeDaemon, At: at,
			Exec: &queue.ExecResult{Command: "colour", Stdout: strings.Repeat("\x1b", 256<<10), Stderr: strings.Repeat("\x1b", 256<<10)}}
		require.Eventually(t, func() bool { return recordUnfitted(store, o) == nil }, 10*time.Second, 10*time.Millisecond, "the writer lets the store go when idle")
		at = at.Add(time.Millisecond)
	}

	limit := int(nc.MaxPayload())
	msg, err := nc.Request(queue.StatusSubject(id), []byte("old-1"), 5*time.Second)
	require.NoError(t, err, "a look-up is answered")
	assert.LessOrEqual(t, len(msg.Data), limit)
	var l queue.Lookup
	require.NoError(t, json.Unmarshal(msg.Data, &l))
	require.True(t, l.Found)
	assert.Equal(t, "old-1", l.Outcome.ID)
	assert.Positive(t, l.Outcome.Exec.StdoutCut, "cut, and counted")
	assert.Contains(t, l.Outcome.Exec.Stdout, "bytes cut to fit the outcome")

	msg, err = nc.Request(queue.StatusSubject(id), []byte(queue.JobsRequest), 30*time.Second) // fitting 3 MB outcomes is slow under -race on a busy machine
	require.NoError(t, err, "a listing is answered")
	assert.LessOrEqual(t, len(msg.Data), limit)
	var list queue.JobList
	require.NoError(t, json.Unmarshal(msg.Data, &list))
	var ids []string
	for _, o := range list.Outcomes {
		ids = append(ids, o.ID)
	}
	assert.Equal(t, []string{"old-3", "old-2", "old-1", "first"}, ids)

	msg, err = nc.Request(queue.StatusSubject(id), nil, 5*time.Second)
	require.NoError(t, err, "the report is answered")
	assert.LessOrEqual(t, len(msg.Data), limit)

	// A retry of old-2 is a duplicate: its recorded outcome is published.
	sub, err := nc.SubscribeSync(queue.OutcomeSubject(id, "old-2"))
	require.NoError(t, err)
	publishJob(t, js, id, "old-2", wireJob(t, id, "old-2", "again"))
	m, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err, "the duplicate's outcome is published")
	o, err := queue.DecodeOutcome(m.Data)
	require.NoError(t, err)
	assert.Equal(t, "old-2", o.ID)
	assert.LessOrEqual(t, len(m.Data), queue.MaxOutcomeBytes)
}
