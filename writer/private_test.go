package writer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// Every way a direct writer or a look-up enters a store refuses a .scribe
// that another user could change, or a file planted in it, before it
// reads or writes anything there: nothing is followed, created or
// recorded.
func TestDirectEntrancesRefuseInsecureMeta(t *testing.T) {
	entrances := map[string]func(store string) error{
		"Open": func(store string) error {
			s, err := writer.Open(context.Background(), store, writer.Options{})
			if s != nil {
				s.Close()
			}
			return err
		},
		"Take": func(store string) error {
			h, err := writer.Take(context.Background(), store, writer.Options{Wait: time.Second})
			if h != nil {
				h.Unlock()
			}
			return err
		},
		"TryLock": func(store string) error {
			h, err := lock.Acquire(context.Background(), store, lock.Options{})
			if h != nil {
				h.Unlock()
			}
			return err
		},
		"OpenJournalReadOnly": func(store string) error {
			j, err := journal.OpenReadOnly(journal.Path(store), time.Second)
			if j != nil {
				j.Close()
			}
			return err
		},
	}
	setups := map[string]func(t *testing.T, l queue.Layout, target string){
		"folder world-writable": func(t *testing.T, l queue.Layout, _ string) { require.NoError(t, os.Chmod(l.Meta(), 0o777)) },
		"journal a symlink": func(t *testing.T, l queue.Layout, target string) {
			require.NoError(t, os.Remove(l.Journal()))
			require.NoError(t, os.Symlink(target, l.Journal()))
		},
		"lock a symlink": func(t *testing.T, l queue.Layout, target string) {
			require.NoError(t, os.Remove(l.Lock()))
			require.NoError(t, os.Symlink(target, l.Lock()))
		},
		"demand file a symlink": func(t *testing.T, l queue.Layout, target string) {
			require.NoError(t, os.Symlink(target, l.Demand()))
		},
	}
	if os.Geteuid() == 0 {
		setups["journal another user's"] = func(t *testing.T, l queue.Layout, _ string) {
			require.NoError(t, os.Chown(l.Journal(), 65534, 65534))
		}
	}
	for sname, setup := range setups {
		for ename, enter := range entrances {
			t.Run(sname+"/"+ename, func(t *testing.T) {
				store := newStore(t)
				s := openSession(t, store, writer.Options{})
				require.NoError(t, s.Close())
				l := queue.Layout{Root: store}
				target := filepath.Join(filepath.Dir(store), "target")
				setup(t, l, target)
				before := treeOf(t, store)

				err := enter(store)
				assert.ErrorIs(t, err, queue.ErrInsecure)
				assert.NoFileExists(t, target, "followed a planted symlink")
				assert.Equal(t, before, treeOf(t, store), "a refusal changes nothing")
			})
		}
	}
}

// treeOf is every entry under dir with its mode and size.
func treeOf(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			out[rel] += " " + string(b)
		}
		return nil
	}))
	return out
}
