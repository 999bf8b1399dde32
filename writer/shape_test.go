package writer

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// storeTree lists a store outside .scribe/: files with their content,
// folders as "<path>/".
func storeTree(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case rel == ".":
		case d.IsDir() && rel == queue.MetaDir:
			return filepath.SkipDir
		case d.IsDir():
			out[rel+"/"] = ""
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		}
		return nil
	})
	require.NoError(tb, err)
	return out
}

func shapeJob(store, id string, ops ...queue.Op) *queue.Job {
	return &queue.Job{V: queue.Version, ID: id, Store: queue.StoreID(store), Ops: ops}
}

// applyBatch applies jobs as one batch and returns each job's reason (""
// when applied). The batch must never fail: whatever a job asks is
// decided, never left to break carrying the batch out.
func applyBatch(tb testing.TB, store string, jobs ...*queue.Job) []queue.Reason {
	tb.Helper()
	s, err := Open(context.Background(), store, Options{})
	require.NoError(tb, err)
	defer s.Close()
	entries := make([]Entry, len(jobs))
	for i, j := range jobs {
		entries[i] = Entry{Job: j}
	}
	res, err := s.Apply(entries)
	require.NoError(tb, err, "a batch failed to materialise: the store would be wedged")
	pending, err := s.st.journal.Pending()
	require.NoError(tb, err)
	require.Nil(tb, pending)
	reasons := make([]queue.Reason, len(res))
	for i, r := range res {
		reasons[i] = r.Outcome.Reason
	}
	return reasons
}

func TestBatchFileFolderConflicts(t *testing.T) {
	put := func(p string) queue.Op { return queue.Op{Kind: queue.OpPut, Path: p, Data: []byte(p)} }
	app := func(p string) queue.Op { return queue.Op{Kind: queue.OpAppend, Path: p, Data: []byte("+")} }
	del := func(p string) queue.Op { return queue.Op{Kind: queue.OpDelete, Path: p} }
	tests := []struct {
		name  string
		disk  map[string]string
		jobs  [][]queue.Op
		want  []queue.Reason
		after map[string]string
	}{
		{"one job: a file and a folder of one name", nil,
			[][]queue.Op{{put("a"), put("a/b")}},
			[]queue.Reason{queue.ReasonNotRegular}, map[string]string{}},
		{"one job: the folder first", nil,
			[][]queue.Op{{put("a/b"), put("a")}},
			[]queue.Reason{queue.ReasonNotRegular}, map[string]string{}},
		{"two submitters in one batch", nil,
			[][]queue.Op{{put("x")}, {app("x/y")}},
			[]queue.Reason{"", queue.ReasonNotRegular}, map[string]string{"x": "x"}},
		{"two submitters, the folder first", nil,
			[][]queue.Op{{app("x/y")}, {put("x")}},
			[]queue.Reason{"", queue.ReasonNotRegular}, map[string]string{"x/": "", "x/y": "+"}},
		{"a file on disk under a new file's folder", map[string]string{"a": "file"},
			[][]queue.Op{{put("a/b")}},
			[]queue.Reason{queue.ReasonNotRegular}, map[string]string{"a": "file"}},
		{"a folder on disk where a file goes", map[string]string{"a/b": "in a"},
			[][]queue.Op{{put("a")}},
			[]queue.Reason{queue.ReasonNotRegular}, map[string]string{"a/": "", "a/b": "in a"}},
		{"a file deleted, then a folder in its place", map[string]string{"a": "file"},
			[][]queue.Op{{del("a"), put("a/b")}},
			[]queue.Reason{""}, map[string]string{"a/": "", "a/b": "a/b"}},
		{"deleted by one job, a folder by the next", map[string]string{"a": "file"},
			[][]queue.Op{{del("a")}, {put("a/b")}, {put("a")}},
			[]queue.Reason{"", "", queue.ReasonNotRegular}, map[string]string{"a/": "", "a/b": "a/b"}},
		{"a folder stays after its file is deleted", nil,
			[][]queue.Op{{put("a/b")}, {del("a/b")}, {put("a")}},
			[]queue.Reason{"", "", queue.ReasonNotRegular}, map[string]string{"a/": ""}},
		{"a rejected job's folders are forgotten", map[string]string{"z": "disk"},
			[][]queue.Op{{put("a/b"), {Kind: queue.OpPut, Path: "z", IfMatch: queue.IfAbsent}}, {put("a")}},
			[]queue.Reason{queue.ReasonPreconditionFailed, ""}, map[string]string{"a": "a", "z": "disk"}},
		{"deep: a file above a new file", nil,
			[][]queue.Op{{put("a/b")}, {put("a/b/c/d")}},
			[]queue.Reason{"", queue.ReasonNotRegular}, map[string]string{"a/": "", "a/b": "a/b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := tempStore(t, tt.disk)
			var jobs []*queue.Job
			for i, ops := range tt.jobs {
				jobs = append(jobs, shapeJob(store, fmt.Sprintf("j%d", i), ops...))
			}
			assert.Equal(t, tt.want, applyBatch(t, store, jobs...))
			assert.Equal(t, tt.after, storeTree(t, store))
			// The store takes the next write.
			assert.Equal(t, []queue.Reason{""}, applyBatch(t, store, shapeJob(store, "next", put("next"))))
		})
	}
}

// A library caller's job skips the encoder: the session checks it too.
func TestBatchNameTooLongForTempFile(t *testing.T) {
	store := tempStore(t, nil)
	for _, n := range []int{244, 250, 255} {
		name := strings.Repeat("n", n)
		got := applyBatch(t, store,
			shapeJob(store, fmt.Sprintf("put%d", n), queue.Op{Kind: queue.OpPut, Path: name, Data: []byte("x")}),
			shapeJob(store, fmt.Sprintf("merge%d", n), queue.Op{Kind: queue.OpMerge, Path: "d/" + name, Data: []byte(`{"a":1}`)}))
		assert.Equal(t, []queue.Reason{queue.ReasonPathEscapes, queue.ReasonPathEscapes}, got, n)
	}
	name := strings.Repeat("n", queue.MaxNameLen)
	assert.Equal(t, []queue.Reason{""}, applyBatch(t, store, shapeJob(store, "longest", queue.Op{Kind: queue.OpPut, Path: name, Data: []byte("x")})))
	assert.Equal(t, map[string]string{name: "x"}, storeTree(t, store))
}

// fuzzNames are nested names on which files and folders collide.
var fuzzNames = []string{"a", "b", "a/b", "a/c", "b/a", "a/b/c", "a/b/c/d", "c"}

// FuzzBatchNeverWedges builds random stores and random multi-op jobs over
// nested names from its input. Applied as one batch, they must never fail
// to materialise, and must leave the same files and outcomes as the same
// jobs applied one batch each: batching never changes what a job does.
func FuzzBatchNeverWedges(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{1, 0, 0, 0, 2, 8, 0, 2, 0, 1, 3, 1, 8, 1})
	f.Add([]byte("put a then a/b, delete, merge into a folder"))
	f.Add([]byte{7, 7, 7, 0, 0, 2, 0, 9, 1, 2, 3, 2, 1, 0, 1, 1, 4, 5})
	f.Fuzz(func(t *testing.T, in []byte) {
		next := func() int {
			if len(in) == 0 {
				return 0
			}
			b := int(in[0])
			in = in[1:]
			return b
		}
		// The disk: a few files (their folders follow), skipping any that
		// collide with what is there.
		disk := map[string]string{}
		for range next() % 4 {
			p := fuzzNames[next()%len(fuzzNames)]
			if collides(disk, p) {
				continue
			}
			disk[p] = "disk " + p
		}
		var jobs []*queue.Job
		for j := range 1 + next()%6 {
			var ops []queue.Op
			for range 1 + next()%4 {
				op := queue.Op{Path: fuzzNames[next()%len(fuzzNames)]}
				switch next() % 5 {
				case 0:
					op.Kind, op.Data = queue.OpPut, []byte("put "+op.Path)
				case 1:
					op.Kind, op.Data = queue.OpAppend, []byte("+"+op.Path)
				case 2:
					op.Kind = queue.OpDelete
				case 3:
					op.Kind, op.Data = queue.OpMerge, []byte(`{"k":"`+op.Path+`"}`)
				case 4:
					op.Kind, op.Data, op.IfMatch = queue.OpPut, []byte("new "+op.Path), queue.IfAbsent
				}
				ops = append(ops, op)
			}
			jobs = append(jobs, &queue.Job{V: queue.Version, ID: fmt.Sprintf("j%d", j), Ops: ops})
		}

		batched, serial := tempStore(t, disk), tempStore(t, disk)
		for _, j := range jobs {
			j.Store = queue.StoreID(batched)
		}
		t.Logf("disk %v", disk)
		for _, j := range jobs {
			t.Logf("job %s: %+v", j.ID, j.Ops)
		}
		got := applyBatch(t, batched, jobs...)
		var want []queue.Reason
		for _, j := range jobs {
			cp := *j
			cp.Store = queue.StoreID(serial)
			want = append(want, applyBatch(t, serial, &cp)...)
		}
		assert.Equal(t, want, got, "outcomes, batched and one by one")
		assert.Equal(t, storeTree(t, serial), storeTree(t, batched), "files, batched and one by one")
	})
}

// collides reports whether a file at p cannot sit beside the files in
// disk (one would be the other's folder).
func collides(disk map[string]string, p string) bool {
	names := make([]string, 0, len(disk))
	for q := range disk {
		names = append(names, q)
	}
	sort.Strings(names)
	for _, q := range names {
		if q == p || strings.HasPrefix(q, p+"/") || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}

// A holder whose lock file or journal was replaced by another program
// (the file renamed away, a new one in its place) stops before changing
// anything: another writer may hold the new lock file.
func TestApplyStopsWhenOwnFilesReplaced(t *testing.T) {
	for _, name := range []string{"lock", "journal.db"} {
		t.Run(name, func(t *testing.T) {
			store := tempStore(t, nil)
			s, err := Open(context.Background(), store, Options{})
			require.NoError(t, err)
			defer s.Close()
			p := filepath.Join(store, queue.MetaDir, name)
			require.NoError(t, os.Rename(p, p+".moved"))
			require.NoError(t, os.WriteFile(p, nil, 0o600))
			_, err = s.Apply([]Entry{{Job: shapeJob(store, "j", queue.Op{Kind: queue.OpPut, Path: "f", Data: []byte("x")})}})
			require.ErrorIs(t, err, ErrStoreChanged)
			assert.Equal(t, map[string]string{}, storeTree(t, store), "nothing changed")
		})
	}
}
