package writer

import (
	"context"
	"testing"

	"github.com/scribehq/scribe/writer/lock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// registryEntry returns the session registry's entry of hold l, or nil.
func registryEntry(l *lock.Hold) *holdState {
	opened.Lock()
	defer opened.Unlock()
	return opened.m[l.Token()]
}

// TestSessionRegistry: what Sessions under one hold share (journal, tree)
// lives in the Session code's registry while they are open; the epoch is
// the hold's. Nested Sessions share the entry; the epoch outlives them
// for as long as the hold stands; a new hold starts afresh; and the entry
// goes with the last Session.
func TestSessionRegistry(t *testing.T) {
	store := tempStore(t, nil)
	l, err := lock.Acquire(context.Background(), store, lock.Options{Command: "test"})
	require.NoError(t, err)
	assert.Nil(t, registryEntry(l), "a bare hold has no entry")
	assert.Zero(t, l.Epoch(), "nothing raised an epoch yet")

	s1, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	s2, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	assert.Same(t, s1.held, s2.held, "nested sessions share one entry")
	assert.Same(t, s1.st, s2.st, "and one journal and tree")
	assert.Equal(t, s1.Epoch(), s2.Epoch())
	assert.Equal(t, s1.Epoch(), l.Epoch())
	epoch := s1.Epoch()
	require.NoError(t, s1.Close())
	require.NotNil(t, registryEntry(l))
	assert.NotNil(t, registryEntry(l).st, "the journal stays open while a session is")
	require.NoError(t, s2.Close())
	assert.Nil(t, registryEntry(l), "the last session closes the journal, and the entry goes")
	assert.Equal(t, epoch, l.Epoch(), "the epoch outlives the sessions while the hold stands")

	s3, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	assert.Equal(t, epoch, s3.Epoch(), "a later session under the same hold keeps its epoch")
	require.NoError(t, s3.Close())
	require.NoError(t, l.Unlock())
	assert.Equal(t, epoch, l.Epoch(), "a released hold still names its epoch")

	s4, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	assert.Equal(t, epoch+1, s4.Epoch(), "a new hold raises a new epoch")
	require.NoError(t, s4.Close())
	opened.Lock()
	defer opened.Unlock()
	assert.Empty(t, opened.m, "no session is open, and the registry is empty")
}
