package writer

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/journal"
)

// FuzzMergePatch applies a merge op with arbitrary patch bytes to an
// arbitrary (or missing) file: it must never panic, and it either rejects
// the job, leaving the batch's view of the file as it was, or produces a
// valid JSON object.
func FuzzMergePatch(f *testing.F) {
	seeds := []struct {
		doc    string
		exists bool
		patch  string
	}{
		{`{"a":1,"b":{"c":2}}`, true, `{"a":null,"b":{"c":3,"d":[1]}}`},
		{``, false, `{"a":{"b":null}}`},
		{`{}`, true, `{}`},
		{`{"a":1}`, true, `null`},
		{`{"a":1}`, true, `[1,2]`},
		{`{"a":1}`, true, `"x"`},
		{`{"a":1}`, true, `{"a":`},
		{`[1]`, true, `{"a":1}`},
		{`not json`, true, `{"a":1}`},
		{``, true, `{"a":1}`},
		{`{"a":1,"a":2}`, true, `{"a":{"a":null},"a":3}`},
		{`{"n":1e400}`, true, `{"m":-0.0e-5}`},
		{` {"s":"\ud800"} `, true, "{\"s\":\"\xff\"}"},
		{`{"deep":[[[[[[{}]]]]]]}`, true, `{"deep":{"x":{"y":{"z":null}}}}`},
	}
	for _, s := range seeds {
		f.Add([]byte(s.doc), s.exists, []byte(s.patch))
	}
	store := f.TempDir()
	tr := openTestTree(f, store)
	const name = "doc.json"

	f.Fuzz(func(t *testing.T, doc []byte, exists bool, patch []byte) {
		full := filepath.Join(store, name)
		if exists {
			require.NoError(t, os.WriteFile(full, doc, 0o644))
		} else if err := os.Remove(full); err != nil && !errors.Is(err, os.ErrNotExist) {
			require.NoError(t, err)
		}
		ov := newOverlay(tr, 1<<20)
		err := ov.applyJob(&queue.Job{Ops: []queue.Op{{Kind: queue.OpMerge, Path: name, Data: patch}}})
		if err != nil {
			var rej *queue.RejectError
			require.True(t, errors.As(err, &rej), "not a rejection: %v", err)
			assert.NotEqual(t, queue.ReasonInternal, rej.Reason, "applier panicked: %s", rej.Detail)
			assert.Empty(t, ov.changes(), "a rejected job leaves no change")
			if st, ok := ov.files[name]; ok {
				assert.Equal(t, exists, st.exists)
				assert.False(t, st.replaced)
			}
			return
		}
		changes := ov.changes()
		require.Len(t, changes, 1)
		c := changes[0]
		assert.Equal(t, journal.ChangeWrite, c.Kind)
		assert.True(t, json.Valid(c.Data), "result is not JSON: %q", c.Data)
		var obj map[string]any
		dec := json.NewDecoder(bytes.NewReader(c.Data))
		dec.UseNumber() // numbers beyond float64 are still JSON
		assert.NoError(t, dec.Decode(&obj), "result is not an object: %q", c.Data)
		assert.NotNil(t, obj, "result is null: %q", c.Data)
		assert.True(t, bytes.HasSuffix(c.Data, []byte("\n")))
		// The merge only succeeds on an object file (or none) with an object patch.
		assert.True(t, isJSONObject(patch), "accepted patch %q", patch)
		if exists {
			assert.True(t, isJSONObject(doc), "accepted file %q", doc)
		}
	})
}
