package writer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/journal"
)

// bigData is content of at least stageBytes, told apart by tag.
func bigData(tag string) string {
	return tag + "\n" + strings.Repeat("0123456789abcdef", stageBytes/16)
}

// A big file written whole is staged: the journal's intent names its
// synced temp file instead of holding the data, so that a batch writes
// the megabyte once on the store's disk, not twice.
func TestStagedWriteKeepsDataOutOfJournal(t *testing.T) {
	for _, delay := range []time.Duration{0, time.Hour} {
		t.Run(delay.String(), func(t *testing.T) {
			store := tempStore(t, nil)
			s, err := Open(context.Background(), store, Options{Mode: queue.ModeDirect, SyncDelay: delay})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			const n = 12
			var last string
			for i := range n {
				last = bigData(strings.Repeat("v", i+1)) + strings.Repeat("x", 1<<20)
				res, err := s.Apply([]Entry{{Job: &queue.Job{V: queue.Version, ID: "j" + string(rune('a'+i)), Store: s.StoreID(),
					Ops: []queue.Op{{Kind: queue.OpPut, Path: "new/deep/big.bin", Data: []byte(last)}}}}})
				require.NoError(t, err)
				require.True(t, res[0].Outcome.Applied(), res[0].Outcome.Detail)
			}
			require.NoError(t, s.Close())
			assert.Equal(t, map[string]string{"new/deep/big.bin": last}, storeFiles(t, store), "the last put, whole, and no temp file left")
			fi, err := os.Stat(journal.Path(store))
			require.NoError(t, err)
			assert.Less(t, fi.Size(), int64(1<<20), "the journal held none of the %d MiB written", n)
		})
	}
}

// Each instant a holder can die at between staging a big write and
// dropping its intent: the next holder finds the file as the batch
// decided it, or as a later writer left it, never an older one.
func TestRecoverStagedWrite(t *testing.T) {
	decided, later := bigData("decided"), bigData("later")
	tests := []struct {
		name string
		// after carries the batch out to the instant of the crash.
		after func(t *testing.T, tr *tree, c journal.Change)
		want  map[string]string
	}{
		{name: "staged, not renamed",
			after: func(*testing.T, *tree, journal.Change) {},
			want:  map[string]string{"f.bin": decided}},
		{name: "renamed, intent standing",
			after: func(t *testing.T, tr *tree, c journal.Change) {
				require.NoError(t, materialize(tr, []journal.Change{c}, false, false))
			},
			want: map[string]string{"f.bin": decided}},
		{name: "renamed, then the next batch staged the file again",
			after: func(t *testing.T, tr *tree, c journal.Change) {
				require.NoError(t, materialize(tr, []journal.Change{c}, false, false))
				require.NoError(t, stage(tr, []journal.Change{{Path: "f.bin", Kind: journal.ChangeWrite, Data: []byte(later), Mode: 0o644}}))
			},
			want: map[string]string{"f.bin": decided, ".f.bin" + tmpSuffix: later}},
		{name: "renamed, then another program wrote the file",
			after: func(t *testing.T, tr *tree, c journal.Change) {
				require.NoError(t, materialize(tr, []journal.Change{c}, false, false))
				putFiles(t, tr.Name(), map[string]string{"f.bin": "theirs"})
			},
			want: map[string]string{"f.bin": "theirs"}},
		{name: "renamed, then a program left bytes of its size at the temp name",
			after: func(t *testing.T, tr *tree, c journal.Change) {
				require.NoError(t, materialize(tr, []journal.Change{c}, false, false))
				putFiles(t, tr.Name(), map[string]string{".f.bin" + tmpSuffix: strings.Replace(decided, "decided", "DECIDED", 1)})
			},
			want: map[string]string{"f.bin": decided, ".f.bin" + tmpSuffix: strings.Replace(decided, "decided", "DECIDED", 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := tempStore(t, map[string]string{"f.bin": "old"})
			s, err := Open(context.Background(), store, Options{Mode: queue.ModeDirect})
			require.NoError(t, err)
			changes := []journal.Change{{Path: "f.bin", Kind: journal.ChangeWrite, Data: []byte(decided), Mode: 0o644}}
			require.NoError(t, stage(s.st.tree, changes))
			c := changes[0]
			require.Equal(t, journal.ChangeStaged, c.Kind)
			require.Nil(t, c.Data, "the intent holds no data")
			in := &journal.Intent{Epoch: s.Epoch(), Changes: changes, LastSeq: 0, Outcomes: []*queue.Outcome{
				{V: queue.Version, ID: "j", Status: queue.StatusApplied, Epoch: s.Epoch(), Mode: queue.ModeDirect, At: time.Now().UTC()},
			}}
			require.NoError(t, writeIntent(s.st.journal, in))
			tt.after(t, s.st.tree, c)
			require.NoError(t, s.Close()) // the crash: the intent stands

			s2, err := Open(context.Background(), store, Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s2.Close() })
			assert.Equal(t, tt.want, storeFiles(t, store))
			pending, err := s2.st.journal.Pending()
			require.NoError(t, err)
			assert.Nil(t, pending, "redone, the intent is dropped")
			o, err := s2.Journal().Outcome("j")
			require.NoError(t, err)
			require.NotNil(t, o)
			assert.True(t, o.Applied())
		})
	}
}

// A temp file a crash left before its batch's intent was recorded is the
// next write's to replace, and never taken for the file.
func TestStagedLitterIsReplaced(t *testing.T) {
	store := tempStore(t, map[string]string{"f.bin": "old", ".f.bin" + tmpSuffix: bigData("never recorded")})
	s, err := Open(context.Background(), store, Options{Mode: queue.ModeDirect})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	assert.Equal(t, "old", storeFiles(t, store)["f.bin"], "nothing redone")
	want := bigData("recorded")
	res, err := s.Apply([]Entry{{Job: &queue.Job{V: queue.Version, ID: "j", Store: s.StoreID(),
		Ops: []queue.Op{{Kind: queue.OpPut, Path: "f.bin", Data: []byte(want)}}}}})
	require.NoError(t, err)
	require.True(t, res[0].Outcome.Applied())
	assert.Equal(t, map[string]string{"f.bin": want}, storeFiles(t, store))
	fi, err := os.Stat(filepath.Join(store, "f.bin"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "the replaced file's mode")
}
