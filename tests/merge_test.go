package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// Merge through a real daemon is RFC 7386 (arrays are
// replaced as written, nulls inside them too), gives the same bytes every
// time (the file's key order, then new keys in the patch's order), and
// rejects a file with a repeated key as invalid_json, leaving it alone.
func TestMergeIsRFC7386AndDeterministic(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	merge := func(path, patch string) result {
		t.Helper()
		// --route require: the daemon's writer applies it, not a direct write.
		return scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "merge", path, patch)
	}

	t.Run("deterministic", func(t *testing.T) {
		const target = `{"zeta":1,"mid":{"y":1,"x":2},"alpha":true,"num":1e400}`
		// Many new keys, so that an unordered merge would scatter them.
		const patch = `{"n5":5,"mid":{"x":null,"w":[null,0.10],"v":{"b":1,"a":null}},"zeta":"z","n1":1,"alpha":null,` +
			`"n9":9,"n3":{"k2":2,"k1":null,"k0":0},"n0":0,"n7":7,"n2":2,"n8":8}`
		const want = `{"zeta":"z","mid":{"y":1,"w":[null,0.10],"v":{"b":1}},"num":1e400,` +
			`"n5":5,"n1":1,"n9":9,"n3":{"k2":2,"k0":0},"n0":0,"n7":7,"n2":2,"n8":8}` + "\n"
		for i := range 8 {
			name := fmt.Sprintf("doc-%d.json", i)
			require.NoError(t, os.WriteFile(filepath.Join(store, name), []byte(target), 0o644))
			r := merge(name, patch)
			require.Equal(t, 0, r.code, r.stderr)
			require.Equal(t, want, readFile(t, filepath.Join(store, name)), "file %d", i)
		}
	})

	t.Run("nulls inside arrays kept", func(t *testing.T) {
		r := merge("arr.json", `{"a":[{"x":null,"y":1}]}`)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, `{"a":[{"x":null,"y":1}]}`+"\n", readFile(t, filepath.Join(store, "arr.json")))
	})

	t.Run("duplicate keys rejected", func(t *testing.T) {
		for _, c := range []struct{ name, file, patch string }{
			{"in the file", `{"a":1,"a":2}`, `{"a":null}`},
			{"nested in the file", `{"o":{"l":[{"k":1,"k":2}]}}`, `{"b":1}`},
			{"in the patch", `{"a":1}`, `{"b":1,"b":2}`},
		} {
			t.Run(c.name, func(t *testing.T) {
				path := filepath.Join(store, "dup.json")
				require.NoError(t, os.WriteFile(path, []byte(c.file), 0o644))
				r := merge("dup.json", c.patch)
				assert.Equal(t, 1, r.code, "stdout %q stderr %q", r.stdout, r.stderr)
				assert.Contains(t, r.stderr, string(queue.ReasonInvalidJSON))
				assert.Contains(t, r.stderr, "duplicate key")
				assert.Equal(t, c.file, readFile(t, path), "a rejected merge changes nothing")
			})
		}
	})
}
