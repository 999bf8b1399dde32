package writer_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// newStore returns the canonical path of a fresh, empty store.
func newStore(tb testing.TB) string {
	tb.Helper()
	dir, err := queue.ResolveStore(tb.TempDir())
	require.NoError(tb, err)
	return dir
}

// openSession opens a session on store, closed when the test ends.
func openSession(tb testing.TB, store string, o writer.Options) *writer.Session {
	tb.Helper()
	s, err := writer.Open(context.Background(), store, o)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// newJob builds a job for store.
func newJob(tb testing.TB, store, id string, ops ...queue.Op) *queue.Job {
	tb.Helper()
	return &queue.Job{V: queue.Version, ID: id, Store: queue.StoreID(store), Ops: ops}
}

// apply applies jobs as one batch and returns their results.
func apply(tb testing.TB, s *writer.Session, jobs ...*queue.Job) []writer.Result {
	tb.Helper()
	entries := make([]writer.Entry, len(jobs))
	for i, j := range jobs {
		entries[i] = writer.Entry{Job: j}
	}
	res, err := s.Apply(entries)
	require.NoError(tb, err)
	require.Len(tb, res, len(jobs))
	return res
}

// writeFiles creates files (path → content) under store.
func writeFiles(tb testing.TB, store string, files map[string]string) {
	tb.Helper()
	for p, content := range files {
		full := filepath.Join(store, filepath.FromSlash(p))
		require.NoError(tb, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(tb, os.WriteFile(full, []byte(content), 0o644))
	}
}

// readFiles returns every regular file under store, outside .scribe/, as
// path → content.
func readFiles(tb testing.TB, store string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(store, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(store, p)
		if err != nil {
			return err
		}
		if d.IsDir() && rel == queue.MetaDir {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	require.NoError(tb, err)
	return out
}

// assertOutcome checks an outcome's status and reason ("" for applied).
func assertOutcome(tb testing.TB, o *queue.Outcome, want queue.Reason) {
	tb.Helper()
	require.NotNil(tb, o)
	if want == "" {
		assert.Equal(tb, queue.StatusApplied, o.Status, "reason %s: %s", o.Reason, o.Detail)
		assert.Empty(tb, o.Reason)
		return
	}
	assert.Equal(tb, queue.StatusRejected, o.Status)
	assert.Equal(tb, want, o.Reason, "detail: %s", o.Detail)
}

func put(p, data string) queue.Op { return queue.Op{Kind: queue.OpPut, Path: p, Data: []byte(data)} }
func appendOp(p, data string) queue.Op {
	return queue.Op{Kind: queue.OpAppend, Path: p, Data: []byte(data)}
}
func merge(p, data string) queue.Op {
	return queue.Op{Kind: queue.OpMerge, Path: p, Data: []byte(data)}
}
func del(p string) queue.Op { return queue.Op{Kind: queue.OpDelete, Path: p} }

func ifMatch(op queue.Op, cond string) queue.Op {
	op.IfMatch = cond
	return op
}

func hash(s string) string { return queue.ContentHash([]byte(s)) }

func TestApplyOps(t *testing.T) {
	tests := []struct {
		name     string
		files    map[string]string // before
		ops      []queue.Op
		want     queue.Reason      // "" for applied
		wantJSON map[string]string // files compared as JSON; the others must equal wantFiles
		// wantFiles is every file after the job; nil means unchanged.
		wantFiles map[string]string
	}{
		{
			name:      "put creates",
			ops:       []queue.Op{put("a.txt", "hello")},
			wantFiles: map[string]string{"a.txt": "hello"},
		},
		{
			name:      "put creates folders",
			ops:       []queue.Op{put("d/e/f.txt", "deep")},
			wantFiles: map[string]string{"d/e/f.txt": "deep"},
		},
		{
			name:      "put replaces",
			files:     map[string]string{"a.txt": "a much longer old content"},
			ops:       []queue.Op{put("a.txt", "new")},
			wantFiles: map[string]string{"a.txt": "new"},
		},
		{
			name:      "put empty",
			files:     map[string]string{"a.txt": "old"},
			ops:       []queue.Op{{Kind: queue.OpPut, Path: "a.txt"}},
			wantFiles: map[string]string{"a.txt": ""},
		},
		{
			name:      "append creates",
			ops:       []queue.Op{appendOp("log", "one\n")},
			wantFiles: map[string]string{"log": "one\n"},
		},
		{
			name:      "append adds exactly the bytes",
			files:     map[string]string{"log": "ab"},
			ops:       []queue.Op{appendOp("log", "cd"), appendOp("log", "\x00\xff\n")},
			wantFiles: map[string]string{"log": "abcd\x00\xff\n"},
		},
		{
			name:      "append nothing creates an empty file",
			ops:       []queue.Op{appendOp("d/log", "")},
			wantFiles: map[string]string{"d/log": ""},
		},
		{
			name:      "append nothing keeps a file",
			files:     map[string]string{"log": "x"},
			ops:       []queue.Op{appendOp("log", "")},
			wantFiles: map[string]string{"log": "x"},
		},
		{
			name:      "append after put",
			ops:       []queue.Op{put("log", "a"), appendOp("log", "b")},
			wantFiles: map[string]string{"log": "ab"},
		},
		{
			name:     "merge creates",
			ops:      []queue.Op{merge("m.json", `{"a":1,"b":{"c":null}}`)},
			wantJSON: map[string]string{"m.json": `{"a":1,"b":{}}`},
		},
		{
			name:     "merge null deletes a key",
			files:    map[string]string{"m.json": `{"a":1,"b":{"c":2,"d":3},"keep":[1,2]}`},
			ops:      []queue.Op{merge("m.json", `{"a":null,"b":{"c":null},"e":"x"}`)},
			wantJSON: map[string]string{"m.json": `{"b":{"d":3},"e":"x","keep":[1,2]}`},
		},
		{
			name:     "merge replaces arrays",
			files:    map[string]string{"m.json": `{"l":[1,2,3]}`},
			ops:      []queue.Op{merge("m.json", `{"l":[4]}`)},
			wantJSON: map[string]string{"m.json": `{"l":[4]}`},
		},
		{
			name:     "merge twice",
			ops:      []queue.Op{merge("m.json", `{"a":1}`), merge("m.json", `{"b":2}`)},
			wantJSON: map[string]string{"m.json": `{"a":1,"b":2}`},
		},
		{
			name:  "merge on an array file",
			files: map[string]string{"m.json": `[1,2]`},
			ops:   []queue.Op{merge("m.json", `{"a":1}`)},
			want:  queue.ReasonInvalidJSON,
		},
		{
			name:  "merge on a non-JSON file",
			files: map[string]string{"m.json": `{"a":1`},
			ops:   []queue.Op{merge("m.json", `{"a":2}`)},
			want:  queue.ReasonInvalidJSON,
		},
		{
			name:  "merge on an empty file",
			files: map[string]string{"m.json": ``},
			ops:   []queue.Op{merge("m.json", `{"a":2}`)},
			want:  queue.ReasonInvalidJSON,
		},
		{
			name:  "merge with an array patch",
			files: map[string]string{"m.json": `{"a":1}`},
			ops:   []queue.Op{merge("m.json", `[{"a":2}]`)},
			want:  queue.ReasonInvalidJSON,
		},
		{
			name:  "merge with a broken patch",
			files: map[string]string{"m.json": `{"a":1}`},
			ops:   []queue.Op{merge("m.json", `{"a":`)},
			want:  queue.ReasonInvalidJSON,
		},
		{
			name:  "merge with a null patch",
			files: map[string]string{"m.json": `{"a":1}`},
			ops:   []queue.Op{merge("m.json", `null`)},
			want:  queue.ReasonInvalidJSON,
		},
		{
			name:      "delete",
			files:     map[string]string{"a": "x", "b": "y"},
			ops:       []queue.Op{del("a")},
			wantFiles: map[string]string{"b": "y"},
		},
		{
			name:      "delete missing",
			files:     map[string]string{"b": "y"},
			ops:       []queue.Op{del("a"), del("no/such/dir/f")},
			wantFiles: map[string]string{"b": "y"},
		},
		{
			name:      "delete then append",
			files:     map[string]string{"log": "old"},
			ops:       []queue.Op{del("log"), appendOp("log", "new")},
			wantFiles: map[string]string{"log": "new"},
		},
		{
			name:      "if_match absent passes",
			ops:       []queue.Op{ifMatch(put("a", "x"), queue.IfAbsent)},
			wantFiles: map[string]string{"a": "x"},
		},
		{
			name:  "if_match absent fails",
			files: map[string]string{"a": "old"},
			ops:   []queue.Op{ifMatch(put("a", "x"), queue.IfAbsent)},
			want:  queue.ReasonPreconditionFailed,
		},
		{
			name:      "if_match absent after delete",
			files:     map[string]string{"a": "old"},
			ops:       []queue.Op{del("a"), ifMatch(put("a", "x"), queue.IfAbsent)},
			wantFiles: map[string]string{"a": "x"},
		},
		{
			name:      "if_match hash passes",
			files:     map[string]string{"a": "v1"},
			ops:       []queue.Op{ifMatch(put("a", "v2"), hash("v1"))},
			wantFiles: map[string]string{"a": "v2"},
		},
		{
			name:  "if_match hash fails",
			files: map[string]string{"a": "v1"},
			ops:   []queue.Op{ifMatch(put("a", "v2"), hash("v0"))},
			want:  queue.ReasonPreconditionFailed,
		},
		{
			name: "if_match hash on a missing file",
			ops:  []queue.Op{ifMatch(put("a", "v2"), hash(""))},
			want: queue.ReasonPreconditionFailed,
		},
		{
			name:      "if_match sees earlier ops",
			files:     map[string]string{"log": "a"},
			ops:       []queue.Op{appendOp("log", "b"), ifMatch(appendOp("log", "c"), hash("ab"))},
			wantFiles: map[string]string{"log": "abc"},
		},
		{
			name:      "if_match on delete",
			files:     map[string]string{"a": "v1"},
			ops:       []queue.Op{ifMatch(del("a"), hash("v1"))},
			wantFiles: map[string]string{},
		},
		{
			name:  "second op rejected undoes the first",
			files: map[string]string{"a": "keep", "log": "1"},
			ops: []queue.Op{
				put("new.txt", "x"), appendOp("log", "2"), del("a"),
				ifMatch(put("log", "y"), queue.IfAbsent),
			},
			want: queue.ReasonPreconditionFailed,
		},
		{
			name:  "target is a folder",
			files: map[string]string{"d/f": "x"},
			ops:   []queue.Op{put("d", "x")},
			want:  queue.ReasonNotRegular,
		},
		{
			name:  "delete a folder",
			files: map[string]string{"d/f": "x"},
			ops:   []queue.Op{del("d")},
			want:  queue.ReasonNotRegular,
		},
		{
			name:  "parent is a file",
			files: map[string]string{"f": "x"},
			ops:   []queue.Op{put("f/g", "y")},
			want:  queue.ReasonNotRegular,
		},
		{
			name:  "grandparent is a file",
			files: map[string]string{"f": "x"},
			ops:   []queue.Op{appendOp("f/g/h", "y")},
			want:  queue.ReasonNotRegular,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			writeFiles(t, store, tt.files)
			s := openSession(t, store, writer.Options{})

			res := apply(t, s, newJob(t, store, "job", tt.ops...))
			assertOutcome(t, res[0].Outcome, tt.want)
			assert.False(t, res[0].Duplicate)

			got := readFiles(t, store)
			for p, want := range tt.wantJSON {
				if assert.Contains(t, got, p) {
					assert.JSONEq(t, want, got[p], p)
					assert.True(t, strings.HasSuffix(got[p], "\n"), "%s ends with a newline", p)
				}
				delete(got, p)
			}
			want := tt.wantFiles
			if want == nil && tt.wantJSON == nil {
				want = tt.files // rejected (or no-op): unchanged
			}
			if want == nil {
				want = map[string]string{}
			}
			assert.Equal(t, want, got)
		})
	}
}

func TestApplyMaxFileBytes(t *testing.T) {
	const limit = 10
	tests := []struct {
		name  string
		files map[string]string
		ops   []queue.Op
		want  queue.Reason
	}{
		{"put at the limit", nil, []queue.Op{put("a", "0123456789")}, ""},
		{"put over", nil, []queue.Op{put("a", "0123456789x")}, queue.ReasonTooLarge},
		{"append up to the limit", map[string]string{"a": "01234"}, []queue.Op{appendOp("a", "56789")}, ""},
		{"append over", map[string]string{"a": "01234"}, []queue.Op{appendOp("a", "56789x")}, queue.ReasonTooLarge},
		{"appends add up", nil, []queue.Op{appendOp("a", "012345"), appendOp("a", "6789x")}, queue.ReasonTooLarge},
		{"merge over", nil, []queue.Op{merge("m.json", `{"abcdefgh":1}`)}, queue.ReasonTooLarge},
		{"shrink a file over the limit", map[string]string{"a": "0123456789abc"}, []queue.Op{put("a", "small")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			writeFiles(t, store, tt.files)
			s := openSession(t, store, writer.Options{MaxFileBytes: limit})
			res := apply(t, s, newJob(t, store, "job", tt.ops...))
			assertOutcome(t, res[0].Outcome, tt.want)
			if tt.want != "" {
				want := tt.files
				if want == nil {
					want = map[string]string{}
				}
				assert.Equal(t, want, readFiles(t, store), "a rejected job changes nothing")
			}
		})
	}
}

func TestApplySymlinks(t *testing.T) {
	tests := []struct {
		name string
		op   queue.Op
		want queue.Reason
	}{
		{"put through a folder link out", put("out/x", "pwned"), queue.ReasonPathEscapes},
		{"append through a folder link out", appendOp("out/victim", "pwned"), queue.ReasonPathEscapes},
		{"merge through a folder link out", merge("out/v.json", `{"a":1}`), queue.ReasonPathEscapes},
		{"delete through a folder link out", del("out/victim"), queue.ReasonPathEscapes},
		{"nested under a folder link out", put("out/sub/x", "pwned"), queue.ReasonPathEscapes},
		{"put over a file link out", put("outfile", "pwned"), queue.ReasonNotRegular},
		{"append to a file link out", appendOp("outfile", "pwned"), queue.ReasonNotRegular},
		{"delete a file link out", del("outfile"), queue.ReasonNotRegular},
		{"put over a file link in", put("infile", "changed"), queue.ReasonNotRegular},
		{"append to a file link in", appendOp("infile", "changed"), queue.ReasonNotRegular},
		{"merge into a file link in", merge("infile", `{"b":2}`), queue.ReasonNotRegular},
		{"put over a dangling link", put("dangling", "x"), queue.ReasonNotRegular},
		{"put over a link loop", put("loop/x", "x"), queue.ReasonNotRegular},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outside := t.TempDir()
			writeFiles(t, outside, map[string]string{"victim": "safe", "v.json": `{}`})
			store := newStore(t)
			writeFiles(t, store, map[string]string{"real.json": `{"a":1}`})
			require.NoError(t, os.Symlink(outside, filepath.Join(store, "out")))
			require.NoError(t, os.Symlink(filepath.Join(outside, "victim"), filepath.Join(store, "outfile")))
			require.NoError(t, os.Symlink("real.json", filepath.Join(store, "infile")))
			require.NoError(t, os.Symlink("nowhere", filepath.Join(store, "dangling")))
			require.NoError(t, os.Symlink("loop", filepath.Join(store, "loop")))
			s := openSession(t, store, writer.Options{})

			res := apply(t, s, newJob(t, store, "job", tt.op), newJob(t, store, "next", put("ok", "fine")))
			assertOutcome(t, res[0].Outcome, tt.want)
			assertOutcome(t, res[1].Outcome, "")

			assert.Equal(t, map[string]string{"victim": "safe", "v.json": `{}`}, readFiles(t, outside), "nothing outside changed")
			assert.Equal(t, map[string]string{"real.json": `{"a":1}`, "ok": "fine"}, readFiles(t, store))
			for _, link := range []string{"out", "outfile", "infile", "dangling", "loop"} {
				fi, err := os.Lstat(filepath.Join(store, link))
				if assert.NoError(t, err) {
					assert.NotZero(t, fi.Mode()&fs.ModeSymlink, "%s is still a symlink", link)
				}
			}
		})
	}
}

// A symlink squatting on the name the writer stages a put in must not
// make the put write through it.
func TestApplyPutIgnoresTempNameSymlink(t *testing.T) {
	store := newStore(t)
	writeFiles(t, store, map[string]string{"other": "precious"})
	require.NoError(t, os.Symlink("other", filepath.Join(store, ".a.scribe-tmp")))
	s := openSession(t, store, writer.Options{})

	res := apply(t, s, newJob(t, store, "job", put("a", "new")))
	assertOutcome(t, res[0].Outcome, "")
	assert.Equal(t, map[string]string{"a": "new", "other": "precious"}, readFiles(t, store))
	fi, err := os.Lstat(filepath.Join(store, "a"))
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular(), "a is a regular file, not the squatter's link")
}

func TestApplyBatch(t *testing.T) {
	store := newStore(t)
	writeFiles(t, store, map[string]string{"keep": "k"})
	s := openSession(t, store, writer.Options{})

	res := apply(t, s,
		newJob(t, store, "j1", put("a", "one")),
		// Touches a, then fails: a must be back to what j1 made it.
		newJob(t, store, "j2", appendOp("a", "-two"), put("b", "two"), del("keep"), put("c", "x"), ifMatch(put("c", "y"), queue.IfAbsent)),
		newJob(t, store, "j3", appendOp("a", "-three"), ifMatch(put("b", "three"), queue.IfAbsent)),
		newJob(t, store, "j4", ifMatch(appendOp("a", "-four"), hash("one-three"))),
		newJob(t, store, "j5", put("bad", "x"), queue.Op{Kind: "chmod", Path: "bad"}),
		newJob(t, store, "j6", merge("m.json", `{"n":1}`)),
	)
	want := []queue.Reason{"", queue.ReasonPreconditionFailed, "", "", queue.ReasonUnknownOp, ""}
	for i, r := range want {
		assertOutcome(t, res[i].Outcome, r)
		assert.Equal(t, s.Epoch(), res[i].Outcome.Epoch)
		assert.Equal(t, queue.ModeDirect, res[i].Outcome.Mode)
	}
	got := readFiles(t, store)
	assert.JSONEq(t, `{"n":1}`, got["m.json"])
	delete(got, "m.json")
	assert.Equal(t, map[string]string{"keep": "k", "a": "one-three-four", "b": "three"}, got)

	for i, id := range []string{"j1", "j2", "j3", "j4", "j5", "j6"} {
		o, err := s.Journal().Outcome(id)
		require.NoError(t, err)
		require.NotNil(t, o, id)
		assert.Equal(t, res[i].Outcome.Status, o.Status, id)
		assert.Equal(t, res[i].Outcome.Reason, o.Reason, id)
		assert.Equal(t, res[i].Outcome.Epoch, o.Epoch, id)
	}
}

func TestApplyEmptyBatch(t *testing.T) {
	store := newStore(t)
	s := openSession(t, store, writer.Options{})
	res, err := s.Apply(nil)
	require.NoError(t, err)
	assert.Empty(t, res)
}

func TestApplyDuplicateInBatch(t *testing.T) {
	store := newStore(t)
	s := openSession(t, store, writer.Options{})
	res := apply(t, s,
		newJob(t, store, "same", appendOp("log", "1")),
		newJob(t, store, "other", appendOp("log", "2")),
		newJob(t, store, "same", appendOp("log", "1")),
		newJob(t, store, "bad", ifMatch(put("log", "x"), queue.IfAbsent)),
		newJob(t, store, "bad", ifMatch(put("log", "x"), queue.IfAbsent)),
		newJob(t, store, "same", appendOp("log", "3")),
		newJob(t, store, "bad", put("fine", "x")),
	)
	assertOutcome(t, res[0].Outcome, "")
	assert.False(t, res[0].Duplicate)
	assert.True(t, res[2].Duplicate)
	assert.Same(t, res[0].Outcome, res[2].Outcome)
	assertOutcome(t, res[3].Outcome, queue.ReasonPreconditionFailed)
	assert.True(t, res[4].Duplicate)
	assertOutcome(t, res[4].Outcome, queue.ReasonPreconditionFailed)
	// The same IDs for different jobs: conflicts, applied nowhere.
	for _, i := range []int{5, 6} {
		assert.True(t, res[i].Conflict, i)
		assert.False(t, res[i].Duplicate, i)
		assertOutcome(t, res[i].Outcome, queue.ReasonIDConflict)
	}
	assert.Equal(t, map[string]string{"log": "12"}, readFiles(t, store))
	got, err := s.Journal().Outcome("same")
	require.NoError(t, err)
	assert.Equal(t, res[0].Outcome.Digest, got.Digest, "the ID keeps its first outcome")
	assert.Equal(t, queue.StatusApplied, got.Status)
}

// An ID reused for a different job, in a later batch or by a direct
// writer, is a conflict the caller sees; the recorded outcome stays.
func TestApplyIDConflictAcrossSessions(t *testing.T) {
	store := newStore(t)
	s1, err := writer.Open(context.Background(), store, writer.Options{Mode: queue.ModeDaemon})
	require.NoError(t, err)
	first := apply(t, s1, newJob(t, store, "nightly-2026-12-01", appendOp("log", "daemon job\n")))
	require.NoError(t, s1.Close())
	assertOutcome(t, first[0].Outcome, "")

	s2 := openSession(t, store, writer.Options{})
	res := apply(t, s2, newJob(t, store, "nightly-2026-12-01", appendOp("log", "someone else's job\n")))
	assert.True(t, res[0].Conflict)
	assertOutcome(t, res[0].Outcome, queue.ReasonIDConflict)
	assert.Contains(t, res[0].Outcome.Detail, "nightly-2026-12-01")
	assert.Equal(t, map[string]string{"log": "daemon job\n"}, readFiles(t, store))
	got, err := s2.Journal().Outcome("nightly-2026-12-01")
	require.NoError(t, err)
	assert.Equal(t, first[0].Outcome.Digest, got.Digest)
	assert.Equal(t, queue.StatusApplied, got.Status)
}

func TestApplyDuplicateAcrossSessions(t *testing.T) {
	store := newStore(t)
	s1, err := writer.Open(context.Background(), store, writer.Options{Mode: queue.ModeDaemon})
	require.NoError(t, err)
	first := apply(t, s1,
		newJob(t, store, "applied", appendOp("log", "once")),
		newJob(t, store, "rejected", ifMatch(put("log", "x"), queue.IfAbsent)),
	)
	require.NoError(t, s1.Close())
	// Someone changes the file between the sessions: a replay must not touch it.
	writeFiles(t, store, map[string]string{"log": "changed"})

	s2 := openSession(t, store, writer.Options{})
	require.Greater(t, s2.Epoch(), first[0].Outcome.Epoch)
	// The same jobs again (a retry): their recorded outcomes, nothing redone.
	res := apply(t, s2,
		newJob(t, store, "applied", appendOp("log", "once")),
		newJob(t, store, "rejected", ifMatch(put("log", "x"), queue.IfAbsent)),
	)
	for i := range res {
		assert.True(t, res[i].Duplicate, i)
		assert.Equal(t, first[i].Outcome.Status, res[i].Outcome.Status)
		assert.Equal(t, first[i].Outcome.Reason, res[i].Outcome.Reason)
		assert.Equal(t, first[i].Outcome.Detail, res[i].Outcome.Detail)
		assert.Equal(t, first[i].Outcome.Epoch, res[i].Outcome.Epoch, "the recorded epoch, not this session's")
		assert.Equal(t, queue.ModeDaemon, res[i].Outcome.Mode)
		assert.True(t, first[i].Outcome.At.Equal(res[i].Outcome.At))
	}
	assert.Equal(t, map[string]string{"log": "changed"}, readFiles(t, store))
}

func TestApplyWrongStore(t *testing.T) {
	store := newStore(t)
	s := openSession(t, store, writer.Options{})
	j := newJob(t, store, "j", put("a", "x"))
	j.Store = queue.StoreID("/some/other/store")
	res := apply(t, s, j)
	assertOutcome(t, res[0].Outcome, queue.ReasonWrongStore)
	assert.Empty(t, readFiles(t, store))
	o, err := s.Journal().Outcome("j")
	require.NoError(t, err)
	require.NotNil(t, o)
	assert.Equal(t, queue.ReasonWrongStore, o.Reason)
}

func TestApplyEntryErr(t *testing.T) {
	store := newStore(t)
	s := openSession(t, store, writer.Options{})
	decodeErr := queue.Reject(queue.ReasonBadVersion, "version 9, want 1")
	res, err := s.Apply([]writer.Entry{
		{Job: &queue.Job{ID: "undecodable", Meta: map[string]string{"k": "v"}}, Err: decodeErr, Seq: 4},
		{Job: &queue.Job{}, Err: queue.Reject(queue.ReasonBadInput, "garbage"), Seq: 5},
		{Err: queue.Reject(queue.ReasonBadInput, "no job at all"), Seq: 6},
		{Job: newJob(t, store, "good", put("a", "x")), Seq: 7},
	})
	require.NoError(t, err)
	require.Len(t, res, 4)
	assertOutcome(t, res[0].Outcome, queue.ReasonBadVersion)
	assert.Equal(t, "undecodable", res[0].Outcome.ID)
	assert.Equal(t, "version 9, want 1", res[0].Outcome.Detail)
	assert.Equal(t, uint64(4), res[0].Outcome.Seq)
	assertOutcome(t, res[1].Outcome, queue.ReasonBadInput)
	assert.Empty(t, res[1].Outcome.ID)
	assertOutcome(t, res[2].Outcome, queue.ReasonBadInput)
	assertOutcome(t, res[3].Outcome, "")

	o, err := s.Journal().Outcome("undecodable")
	require.NoError(t, err)
	require.NotNil(t, o)
	assert.Equal(t, queue.ReasonBadVersion, o.Reason)
	assert.Equal(t, map[string]string{"k": "v"}, o.Meta)
	_, lastSeq, err := s.Journal().Meta()
	require.NoError(t, err)
	assert.Equal(t, uint64(7), lastSeq)
	assert.Equal(t, map[string]string{"a": "x"}, readFiles(t, store))
}

// A job that decodes but is invalid records its digest, so that its retry
// is told from another job under its ID; bytes that do not decode have none.
func TestApplyDecodeErrDigest(t *testing.T) {
	store := newStore(t)
	s := openSession(t, store, writer.Options{})
	sid := queue.StoreID(store)
	entry := func(raw string) writer.Entry {
		job, err := queue.Decode([]byte(raw))
		require.Error(t, err, raw)
		return writer.Entry{Job: job, Err: err}
	}
	badVersion := `{"v":3,"id":"v","store":"` + sid + `","ops":[{"op":"put","path":"a","data":"x"}]}`
	unknownOp := `{"v":1,"id":"u","store":"` + sid + `","ops":[{"op":"chmod","path":"a"}]}`
	escapes := `{"v":1,"id":"p","store":"` + sid + `","ops":[{"op":"put","path":"../a"}]}`
	noOps := `{"v":1,"id":"n","store":"` + sid + `"}`
	notJSON := `{"v":1,"id":"j","store":`
	entries := []writer.Entry{entry(badVersion), entry(unknownOp), entry(escapes), entry(noOps), entry(notJSON)}
	res, err := s.Apply(entries)
	require.NoError(t, err)
	for i, want := range []queue.Reason{queue.ReasonBadVersion, queue.ReasonUnknownOp, queue.ReasonPathEscapes, queue.ReasonBadInput} {
		assertOutcome(t, res[i].Outcome, want)
		assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, res[i].Outcome.Digest, want)
		assert.Equal(t, entries[i].Job.Digest(), res[i].Outcome.Digest, want)
	}
	assertOutcome(t, res[4].Outcome, queue.ReasonBadInput)
	assert.Empty(t, res[4].Outcome.Digest, "bytes that do not decode have no digest")

	again, err := s.Apply([]writer.Entry{entry(badVersion), entry(strings.Replace(unknownOp, "chmod", "chown", 1))})
	require.NoError(t, err)
	assert.True(t, again[0].Duplicate, "the same invalid job again is a retry")
	assert.Equal(t, queue.ReasonBadVersion, again[0].Outcome.Reason)
	assert.True(t, again[1].Conflict, "another invalid job under the ID is a conflict")
	assert.Equal(t, queue.ReasonIDConflict, again[1].Outcome.Reason)
}

func TestApplyAfterClose(t *testing.T) {
	store := newStore(t)
	s, err := writer.Open(context.Background(), store, writer.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.NoError(t, s.Close(), "Close twice")
	_, err = s.Apply([]writer.Entry{{Job: newJob(t, store, "j", put("a", "x"))}})
	assert.ErrorIs(t, err, writer.ErrClosed)
	assert.Empty(t, readFiles(t, store))
}

func TestSessionEpochAndJournal(t *testing.T) {
	store := newStore(t)
	var last uint64
	for i := range 4 {
		s, err := writer.Open(context.Background(), store, writer.Options{Mode: queue.ModeDaemon, Command: "test"})
		require.NoError(t, err)
		assert.Equal(t, last+1, s.Epoch(), "open %d", i)
		last = s.Epoch()
		assert.Equal(t, queue.StoreID(store), s.StoreID())

		h, err := lock.ReadHolder(lock.DefaultPath(store))
		require.NoError(t, err)
		assert.Equal(t, s.Epoch(), h.Epoch, "the lock file names the epoch")
		assert.Equal(t, queue.ModeDaemon, h.Mode)

		epoch, _, err := s.Journal().Meta()
		require.NoError(t, err)
		assert.Equal(t, s.Epoch(), epoch)

		id := "j" + string(rune('a'+i))
		j := newJob(t, store, id, appendOp("log", id))
		j.Meta = map[string]string{"n": id}
		res, err := s.Apply([]writer.Entry{{Job: j, Seq: uint64(10 + i)}})
		require.NoError(t, err)
		o, err := s.Journal().Outcome(id)
		require.NoError(t, err)
		require.NotNil(t, o)
		assert.Equal(t, queue.StatusApplied, o.Status)
		assert.Equal(t, s.Epoch(), o.Epoch)
		assert.Equal(t, uint64(10+i), o.Seq)
		assert.Equal(t, queue.ModeDaemon, o.Mode)
		assert.Equal(t, map[string]string{"n": id}, o.Meta)
		assert.True(t, res[0].Outcome.At.Equal(o.At))
		missing, err := s.Journal().Outcome("never")
		require.NoError(t, err)
		assert.Nil(t, missing)
		require.NoError(t, s.Close())
	}
	assert.Equal(t, map[string]string{"log": "jajbjcjd"}, readFiles(t, store))

	ro, err := journal.OpenReadOnly(journal.Path(store), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ro.Close() })
	epoch, lastSeq, err := ro.Meta()
	require.NoError(t, err)
	assert.Equal(t, last, epoch)
	assert.Equal(t, uint64(13), lastSeq)
}

func TestOpenSymlinkedStore(t *testing.T) {
	store := newStore(t)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(store, link))
	s := openSession(t, link, writer.Options{})
	assert.Equal(t, queue.StoreID(store), s.StoreID())
	res := apply(t, s, newJob(t, store, "j", put("a", "x")))
	assertOutcome(t, res[0].Outcome, "")
	assert.Equal(t, map[string]string{"a": "x"}, readFiles(t, store))
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(tb testing.TB, store string)
		insecure bool // refused by the rules of .scribe, before the lock is taken
	}{
		{"journal is a folder", func(tb testing.TB, store string) {
			require.NoError(tb, os.MkdirAll(journal.Path(store), 0o700))
		}, true},
		{"journal is a symlink", func(tb testing.TB, store string) {
			require.NoError(tb, os.MkdirAll(filepath.Join(store, queue.MetaDir), 0o700))
			require.NoError(tb, os.Symlink(filepath.Join(store, "elsewhere.db"), journal.Path(store)))
		}, true},
		{"journal is group-writable", func(tb testing.TB, store string) {
			require.NoError(tb, os.MkdirAll(filepath.Join(store, queue.MetaDir), 0o700))
			require.NoError(tb, os.WriteFile(journal.Path(store), nil, 0o600))
			require.NoError(tb, os.Chmod(journal.Path(store), 0o660))
		}, true},
		{"journal is garbage", func(tb testing.TB, store string) {
			require.NoError(tb, os.MkdirAll(filepath.Join(store, queue.MetaDir), 0o700))
			require.NoError(tb, os.WriteFile(journal.Path(store), []byte(strings.Repeat("garbage!", 1024)), 0o600))
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			tt.setup(t, store)
			s, err := writer.Open(context.Background(), store, writer.Options{})
			require.Error(t, err)
			assert.Nil(t, s)
			assert.NotErrorIs(t, err, lock.ErrLocked)
			if tt.insecure {
				assert.ErrorIs(t, err, queue.ErrInsecure)
				assert.NoFileExists(t, lock.DefaultPath(store), "refused before anything is written")
				assert.NoFileExists(t, filepath.Join(store, "elsewhere.db"))
				return
			}
			// The failed open released the store lock: another open file
			// description can take it (an in-process TryLock would nest).
			assertReleased(t, lock.DefaultPath(store))
		})
	}
}

func TestOpenMissingStore(t *testing.T) {
	_, err := writer.Open(context.Background(), filepath.Join(t.TempDir(), "nope"), writer.Options{})
	assert.True(t, errors.Is(err, fs.ErrNotExist), "%v", err)
}

// A file must have one name in a store: a folder symlink inside the store
// or a second hard link would let two ops in one batch change one file
// under two names, and one change would silently overwrite the other.
// scribe's own folder and lock file are out of reach by any name.
func TestApplyAliasesAndOwnFiles(t *testing.T) {
	tests := []struct {
		name string
		op   queue.Op
		want queue.Reason
	}{
		{"append through a folder link inside", appendOp("link/log", "2"), queue.ReasonNotRegular},
		{"put through a link to .scribe", put("meta/evil.txt", "x"), queue.ReasonPathEscapes},
		{"put over the journal via a link to .scribe", put("meta/journal.db", "x"), queue.ReasonPathEscapes},
		{"append to a hard link", appendOp("hard", "2"), queue.ReasonNotRegular},
		{"put over a hard link to the journal", put("journal-link", "x"), queue.ReasonPathEscapes},
		{"put over a custom lock file", put(".index.lock", "x"), queue.ReasonPathEscapes},
		{"append to a custom lock file", appendOp(".index.lock", "x"), queue.ReasonPathEscapes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			writeFiles(t, store, map[string]string{"a/log": "0", "hard": "1"})
			require.NoError(t, os.Symlink("a", filepath.Join(store, "link")))
			require.NoError(t, os.Symlink(".scribe", filepath.Join(store, "meta")))
			require.NoError(t, os.Link(filepath.Join(store, "hard"), filepath.Join(store, "hard2")))
			lockFile := filepath.Join(store, ".index.lock")
			s := openSession(t, store, writer.Options{LockPath: lockFile})
			require.NoError(t, os.Link(journal.Path(store), filepath.Join(store, "journal-link")))
			lockInode := inode(t, lockFile)
			before := readFiles(t, store)

			res := apply(t, s, newJob(t, store, "alias", tt.op), newJob(t, store, "next", appendOp("a/log", "1")))
			assertOutcome(t, res[0].Outcome, tt.want)
			assertOutcome(t, res[1].Outcome, "")

			after := readFiles(t, store)
			assert.Equal(t, "01", after["a/log"])
			for _, m := range []map[string]string{before, after} {
				delete(m, "a/log")
				delete(m, "journal-link") // the journal itself, which the batch changes
				delete(m, ".index.lock")  // checked by inode below
			}
			assert.Equal(t, before, after, "the rejected op changed nothing")
			assert.Equal(t, lockInode, inode(t, lockFile), "the lock file is the same file")
			assert.NoFileExists(t, filepath.Join(store, ".scribe", "evil.txt"))
		})
	}
}
