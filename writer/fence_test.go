package writer_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/claim"
	"github.com/scribehq/scribe/writer/journal"
)

// fakeFence is a Fence whose token and validity the test sets.
type fakeFence struct {
	token uint64
	err   error
}

func (f *fakeFence) Token() uint64 { return f.token }
func (f *fakeFence) Check() error  { return f.err }

// The journal commits nothing under a fence that fails its check, or
// whose token is older than one it already committed under; direct
// writers have no fence and are not affected.
func TestJournalFence(t *testing.T) {
	store := t.TempDir()
	old, newer := &fakeFence{token: 5}, &fakeFence{token: 9}
	require.NoError(t, writer.CommitUnder(store, old, "a1"))
	require.NoError(t, writer.CommitUnder(store, newer, "b1"))
	err := writer.CommitUnder(store, old, "a2")
	require.ErrorIs(t, err, journal.ErrFenced)
	newer.err = fmt.Errorf("%w: paused", claim.ErrExpired)
	require.ErrorIs(t, writer.CommitUnder(store, newer, "b2"), claim.ErrExpired)
	require.NoError(t, writer.CommitUnder(store, nil, "direct"))
	newer.err = nil
	require.NoError(t, writer.CommitUnder(store, newer, "b3"))
	b, err := os.ReadFile(filepath.Join(store, "log"))
	require.NoError(t, err)
	assert.Equal(t, "a1\nb1\ndirect\nb3\n", string(b), "the fenced batches changed nothing")
}
