package queue_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

func TestParsePriority(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want queue.Priority
		ok   bool
	}{
		{"", queue.PriorityNormal, true},
		{"normal", queue.PriorityNormal, true},
		{"high", queue.PriorityHigh, true},
		{"HIGH", "", false},
		{"low", "", false},
	} {
		p, err := queue.ParsePriority(tc.in)
		if !tc.ok {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, p, tc.in)
	}
	assert.Equal(t, "normal", queue.PriorityNormal.String())
	assert.Equal(t, "high", queue.PriorityHigh.String())
}

// The priority travels on the wire, is validated, and is not part of the
// job's identity: a retry under another priority is the same job.
func TestJobPriorityWire(t *testing.T) {
	job := &queue.Job{ID: "job-1", Store: "0123456789abcdef", Priority: queue.PriorityHigh,
		Ops: []queue.Op{{Kind: queue.OpAppend, Path: "log.txt", Data: []byte("x")}}}
	b, err := queue.Encode(job)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"priority":"high"`)
	back, err := queue.Decode(b)
	require.NoError(t, err)
	assert.True(t, back.High())

	normal := *job
	normal.Priority = queue.PriorityNormal
	assert.Equal(t, job.Digest(), normal.Digest())
	b, err = queue.Encode(&normal)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "priority", "absent means normal")

	bad := *job
	bad.Priority = "urgent"
	var rej *queue.RejectError
	require.ErrorAs(t, bad.Validate(), &rej)
	assert.Equal(t, queue.ReasonBadInput, rej.Reason)
	_, err = queue.Decode([]byte(`{"v":1,"id":"job-1","store":"0123456789abcdef","priority":"urgent","ops":[{"op":"delete","path":"a"}]}`))
	assert.Error(t, err)
}
