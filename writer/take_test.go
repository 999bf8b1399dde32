package writer

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// interruptBatch leaves store as a holder killed in the middle of a batch
// does: the intent of recoverChanges recorded, no file changed yet, the
// outcomes never committed. It returns the epoch of that holder.
func interruptBatch(tb testing.TB, store string) uint64 {
	tb.Helper()
	s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon})
	require.NoError(tb, err)
	in := &journal.Intent{Epoch: s.Epoch(), Changes: recoverChanges, LastSeq: 1, Outcomes: []*queue.Outcome{
		{V: queue.Version, ID: "j1", Status: queue.StatusApplied, Epoch: s.Epoch(), Seq: 1, Mode: queue.ModeDaemon, At: time.Now().UTC()},
	}}
	require.NoError(tb, writeIntent(s.st.journal, in))
	epoch := s.Epoch()
	require.NoError(tb, s.Close())
	return epoch
}

// A library user who takes the store through Take after an interrupted
// batch and changes files the batch touches keeps its bytes: the batch was
// redone before Take returned, so no later holder redoes it over them.
// The lock alone (lock.Acquire, which Take is built on) is the control: without
// the redo, the next holder's redo clobbers the user's write.
func TestTakeFinishesInterruptedBatch(t *testing.T) {
	tests := []struct {
		name string
		take func(tb testing.TB, store string) (*lock.Hold, error)
		// kept says whether the user's bytes survive the next session.
		kept bool
	}{
		{"Take", func(tb testing.TB, store string) (*lock.Hold, error) {
			return Take(context.Background(), store, Options{Command: "library user"})
		}, true},
		{"Take waiting", func(tb testing.TB, store string) (*lock.Hold, error) {
			return Take(context.Background(), store, Options{Command: "library user", Wait: time.Minute})
		}, true},
		{"the bare lock (lock.Acquire)", func(tb testing.TB, store string) (*lock.Hold, error) {
			return lock.Acquire(context.Background(), store, lock.Options{Command: "library user"})
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := tempStore(t, recoverBefore)
			crashEpoch := interruptBatch(t, store)

			h, err := tt.take(t, store)
			require.NoError(t, err)
			// The user's own edits, as another tool would make them: an
			// append to the file the batch appends to and a replacement
			// of the file it replaces.
			appendAsShell(t, filepath.Join(store, "log"), "|user")
			require.NoError(t, os.WriteFile(filepath.Join(store, "w.txt"), []byte("user's"), 0o644))
			userLog := readStoreFile(t, store, "log")
			require.NoError(t, h.Unlock())

			s, err := Open(context.Background(), store, Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			pending, err := s.st.journal.Pending()
			require.NoError(t, err)
			assert.Nil(t, pending, "the batch is finished")
			if !tt.kept {
				assert.NotEqual(t, "user's", readStoreFile(t, store, "w.txt"), "without the redo first, the user's file is replaced")
				return
			}
			assert.Equal(t, crashEpoch+1, h.Epoch(), "Take raised the epoch")
			assert.Equal(t, "base+more|user", userLog, "the batch was finished before the user wrote")
			assert.Equal(t, "base+more|user", readStoreFile(t, store, "log"), "the user's append stays")
			assert.Equal(t, "user's", readStoreFile(t, store, "w.txt"), "the user's replacement stays")
			o, err := s.Journal().Outcome("j1")
			require.NoError(t, err)
			require.NotNil(t, o)
			assert.Equal(t, crashEpoch, o.Epoch, "recorded by the redo, under the interrupted holder's epoch")
		})
	}
}

func readStoreFile(tb testing.TB, store, p string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(store, p))
	require.NoError(tb, err)
	return string(b)
}

// Take holds the store with the journal closed, so that processes it hands
// the hold to can open it; its identity names a direct writer and the
// hold's epoch.
func TestTakeClosesJournal(t *testing.T) {
	store := tempStore(t, nil)
	h, err := Take(context.Background(), store, Options{Command: "library user"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Unlock() })
	j, err := journal.Open(journal.Path(store))
	require.NoError(t, err, "the journal is free")
	epoch, _, err := j.Meta()
	require.NoError(t, err)
	require.NoError(t, j.Close())
	assert.Equal(t, epoch, h.Epoch())
	id, err := lock.ReadHolder(h.Path())
	require.NoError(t, err)
	assert.Equal(t, queue.ModeDirect, id.Mode)
	assert.Equal(t, "library user", id.Command)
	assert.Equal(t, epoch, id.Epoch)
}

// A batch that cannot be finished keeps Take out, and Take then holds
// nothing.
func TestTakeStuck(t *testing.T) {
	store := tempStore(t, nil)
	s, err := Open(context.Background(), store, Options{})
	require.NoError(t, err)
	// A change whose parent is a file: the redo cannot create it.
	putFiles(t, store, map[string]string{"f": "a file"})
	bad := &journal.Intent{Epoch: s.Epoch(), Changes: []journal.Change{{Path: "f/x", Kind: journal.ChangeWrite, Data: []byte("x")}},
		Outcomes: []*queue.Outcome{{V: queue.Version, ID: "j", Status: queue.StatusApplied}}}
	require.NoError(t, writeIntent(s.st.journal, bad))
	require.NoError(t, s.Close())

	h, err := Take(context.Background(), store, Options{})
	assert.Nil(t, h)
	assert.ErrorIs(t, err, ErrStuck)
	fl := flock.New(lock.DefaultPath(store))
	ok, err := fl.TryLock()
	require.NoError(t, err)
	assert.True(t, ok, "the failed Take released the store lock")
	assert.False(t, registered(store))
	require.NoError(t, fl.Unlock())
}
