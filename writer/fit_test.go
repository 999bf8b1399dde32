package writer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
)

// A direct writer's outcome is fitted as it is recorded, like the
// daemon's: a job whose meta alone is larger than a message gets an
// outcome that fits, the one recorded, which says what it left out.
func TestRecordedOutcomeFits(t *testing.T) {
	store, id := writerStore(t)
	s, err := writer.Open(context.Background(), store, writer.Options{Mode: queue.ModeDirect})
	require.NoError(t, err)
	defer s.Close()
	meta := map[string]string{}
	for i := range 100_000 {
		meta[fmt.Sprintf("k%06d", i)] = "v"
	}
	job := &queue.Job{V: queue.Version, ID: "meta-1", Store: id, Meta: meta, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "log.txt", Data: []byte("x\n")}}}
	res, err := s.Apply([]writer.Entry{{Job: job}})
	require.NoError(t, err)
	o := res[0].Outcome
	b, err := queue.EncodeOutcome(o)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(b), queue.MaxOutcomeBytes)
	assert.True(t, o.Applied())
	assert.Positive(t, o.MetaCut)
	assert.Equal(t, len(meta), len(o.Meta)+o.MetaCut)
	recorded, err := s.Journal().Outcome("meta-1")
	require.NoError(t, err)
	assert.Equal(t, o.MetaCut, recorded.MetaCut, "the caller was told what was recorded")
	assert.Len(t, job.Meta, 100_000, "the job itself is not changed")
}

// writerStore makes a store folder and returns its real path and ID.
func writerStore(t *testing.T) (string, string) {
	t.Helper()
	store, err := queue.ResolveStore(t.TempDir())
	require.NoError(t, err)
	return store, queue.StoreID(store)
}
