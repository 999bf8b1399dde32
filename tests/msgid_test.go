package tests

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// A message whose Nats-Msg-Id header and job ID disagree
// is rejected and kept as a dead letter, recorded under neither ID (either
// may be someone else's); a message without the header is accepted.
func TestMsgIDMismatchIsDeadLettered(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	s := connectSubmitter(t, store)
	sid := s.disc.StoreID
	op := func(data string) queue.Op { return queue.Op{Kind: queue.OpAppend, Path: "log.txt", Data: []byte(data)} }

	mismatched := rawJob(t, sid, "body-id", op("mismatched\n"))
	s.publish(t, "header-id", mismatched) // queue.Publish sends its id argument as Nats-Msg-Id
	// Without the header (as another language's client may send it).
	_, err := s.js.Publish(t.Context(), queue.JobsSubject(sid), rawJob(t, sid, "no-header", op("no header\n")))
	require.NoError(t, err)
	s.publish(t, "last", rawJob(t, sid, "last", op("last\n")))

	assert.Equal(t, queue.StatusApplied, s.outcome(t, "last").Status)
	assert.Equal(t, queue.StatusApplied, s.outcome(t, "no-header").Status, "a job without Nats-Msg-Id is accepted")
	assert.Equal(t, "no header\nlast\n", readFile(t, filepath.Join(store, "log.txt")), "the mismatched job changed nothing")
	for _, id := range []string{"body-id", "header-id"} {
		r := scribe(t, "", "status", "--store", store, "--json", id)
		assert.NotEqual(t, 0, r.code, "no outcome may be recorded under %s: %s", id, r.stdout)
	}
	var dead queue.DeadLetters
	require.Eventually(t, func() bool {
		r := scribe(t, "", "status", "--store", store, "--dead", "--json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &dead) == nil && dead.Total > 0
	}, 10*time.Second, 20*time.Millisecond)
	require.Len(t, dead.Letters, 1)
	l := dead.Letters[0]
	assert.Equal(t, queue.ReasonBadInput, l.Reason)
	assert.Contains(t, l.Detail, `"header-id"`)
	assert.Contains(t, l.Detail, `"body-id"`)
	assert.Equal(t, string(mismatched), string(l.Data))
	r := scribe(t, "", "status", "--store", store, "--dead")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "does not match job id")
}
