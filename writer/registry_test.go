package writer

import (
	"go/ast"
	"go/parser"
	"go/token"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// registryEntry returns the session registry's entry of hold l, or nil.
func registryEntry(l *Hold) *holdState {
	opened.Lock()
	defer opened.Unlock()
	return opened.m[weak.Make(l.h)]
}

// TestSessionRegistry: what Sessions under one hold share (journal, tree,
// epoch) lives in the Session code's registry. Nested Sessions share it;
// the epoch outlives them for as long as the hold stands; a new hold
// starts afresh; and the entry goes once nothing refers to its hold.
func TestSessionRegistry(t *testing.T) {
	store := tempStore(t, nil)
	l, err := tryLock(store, lockOptions{Command: "test"})
	require.NoError(t, err)
	assert.Nil(t, registryEntry(l), "a bare hold has no entry")
	assert.Zero(t, l.Epoch(), "nothing raised an epoch yet")

	s1, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	s2, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	assert.Same(t, s1.held, s2.held, "nested sessions share one entry")
	assert.Same(t, s1.st, s2.st, "and one journal and tree")
	assert.Equal(t, s1.Epoch(), s2.Epoch())
	assert.Equal(t, s1.Epoch(), l.Epoch())
	epoch := s1.Epoch()
	require.NoError(t, s1.Close())
	assert.NotNil(t, registryEntry(l).st, "the journal stays open while a session is")
	require.NoError(t, s2.Close())
	assert.Nil(t, registryEntry(l).st, "the last session closes the journal")
	assert.Equal(t, epoch, l.Epoch(), "the epoch outlives the sessions while the hold stands")

	s3, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, epoch, s3.Epoch(), "a later session under the same hold keeps its epoch")
	require.NoError(t, s3.Close())
	require.NoError(t, l.Unlock())
	assert.Equal(t, epoch, l.Epoch(), "a released hold still names its epoch")

	s4, err := OpenSession(store, SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, epoch+1, s4.Epoch(), "a new hold raises a new epoch")
	require.NoError(t, s4.Close())

	// Once no Hold refers to the first hold, its entry goes.
	key := weak.Make(l.h)
	l = nil // the sessions were emptied by Close
	require.Eventually(t, func() bool {
		runtime.GC() // the entry goes when the hold is collected
		opened.Lock()
		defer opened.Unlock()
		_, ok := opened.m[key]
		return !ok
	}, 10*time.Second, 10*time.Millisecond, "the registry still has the entry of a hold nothing refers to")
}

// TestLockCodeKnowsNoSessions keeps lock.go as small and single-purpose as
// gofrs/flock's: it names nothing of sessions, journals or their registry.
func TestLockCodeKnowsNoSessions(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "lock.go", nil, 0)
	require.NoError(t, err)
	banned := map[string]bool{
		"Session": true, "OpenSession": true, "SessionOptions": true, "shared": true,
		"Journal": true, "openJournal": true, "nextEpoch": true, "holdState": true, "opened": true, "heldState": true,
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && banned[id.Name] {
			t.Errorf("lock.go refers to %s", id.Name)
		}
		return true
	})
}
