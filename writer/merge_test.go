package writer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rfc7386Examples are the rows of RFC 7386 Appendix A: original, patch,
// result.
var rfc7386Examples = []struct{ target, patch, want string }{
	{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
	{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
	{`{"a":"b"}`, `{"a":null}`, `{}`},
	{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
	{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
	{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
	{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
	{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
	{`["a","b"]`, `["c","d"]`, `["c","d"]`},
	{`{"a":"b"}`, `["c"]`, `["c"]`},
	{`{"a":"foo"}`, `null`, `null`},
	{`{"a":"foo"}`, `"bar"`, `"bar"`},
	{`{"e":null}`, `{"a":1}`, `{"e":null,"a":1}`},
	{`[1,2]`, `{"a":"b","c":null}`, `{"a":"b"}`},
	{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
}

// decodeJSON decodes one JSON value with encoding/json, numbers kept as
// written, for comparing results as values.
func decodeJSON(t testing.TB, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v), "not JSON: %q", b)
	_, err := dec.Token()
	require.ErrorIs(t, err, io.EOF, "data after the value: %q", b)
	return v
}

func TestMergePatchRFC7386Appendix(t *testing.T) {
	require.Len(t, rfc7386Examples, 15)
	for i, c := range rfc7386Examples {
		t.Run(fmt.Sprintf("row%02d", i+1), func(t *testing.T) {
			got, err := mergePatch([]byte(c.target), []byte(c.patch))
			require.NoError(t, err)
			assert.Equal(t, decodeJSON(t, []byte(c.want)), decodeJSON(t, got))
			// The appendix writes its results compactly, in the order
			// this package promises: the bytes match too.
			assert.Equal(t, c.want, string(got))
		})
	}
}

func TestMergePatchKeepsNullsInArrays(t *testing.T) {
	cases := []struct{ name, target, patch, want string }{
		{"reported", `{}`, `{"a":[{"x":null,"y":1}]}`, `{"a":[{"x":null,"y":1}]}`},
		{"replaces an array", `{"a":[1,2]}`, `{"a":[null,{"b":null}]}`, `{"a":[null,{"b":null}]}`},
		{"nested", `{"a":{"b":1}}`, `{"a":{"c":[[null],{"d":[null]}]}}`, `{"a":{"b":1,"c":[[null],{"d":[null]}]}}`},
		// An object patched into a non-object loses its null members
		// (RFC: MergePatch({}, value)), but not the nulls of its arrays.
		{"object into a non-object", `{"a":1}`, `{"a":{"b":null,"c":[null,{"d":null}]}}`, `{"a":{"c":[null,{"d":null}]}}`},
		{"target's arrays untouched", `{"a":[null,{"x":null}],"b":1}`, `{"b":2}`, `{"a":[null,{"x":null}],"b":2}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := mergePatch([]byte(c.target), []byte(c.patch))
			require.NoError(t, err)
			assert.Equal(t, c.want, string(got))
		})
	}
}

// manyKeys returns an object with n keys, k00 to k<n-1>, then dup again
// unless dup is "".
func manyKeys(n int, dup string) string {
	var sb strings.Builder
	sb.WriteString("{")
	for i := range n {
		fmt.Fprintf(&sb, `"k%02d":%d,`, i, i)
	}
	if dup != "" {
		fmt.Fprintf(&sb, `%q:0,`, dup)
	}
	return strings.TrimSuffix(sb.String(), ",") + "}"
}

func TestMergePatchRejectsDuplicateKeys(t *testing.T) {
	cases := []struct{ name, target, patch, side, pointer string }{
		{"target", `{"a":1,"a":2}`, `{"a":null}`, "target", "/a"},
		{"patch", `{"a":1}`, `{"b":1,"b":null}`, "patch", "/b"},
		{"target nested", `{"x":{"y":{"a":1,"b":2,"a":3}}}`, `{}`, "target", "/x/y/a"},
		{"patch nested", `{}`, `{"x":{"a":{},"a":{}}}`, "patch", "/x/a"},
		{"target in an array", `{"l":[1,{"k":1,"k":1}]}`, `{"m":1}`, "target", "/l/1/k"},
		{"patch in an array", `{}`, `{"l":[[{"k":null,"k":null}]]}`, "patch", "/l/0/0/k"},
		{"spelled differently", `{"a":1,"\u0061":2}`, `{}`, "target", "/a"},
		{"pointer escaped", `{}`, `{"a/b~":{"c":1,"c":1}}`, "patch", "/a~1b~0/c"},
		{"non-object patch", `{}`, `[{"a":1,"a":2}]`, "patch", "/0/a"},
		{"large object", manyKeys(40, "k07"), `{}`, "target", "/k07"},
		{"large nested object", `{}`, `{"o":` + manyKeys(17, "k16") + `}`, "patch", "/o/k16"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := mergePatch([]byte(c.target), []byte(c.patch))
			require.Error(t, err, "got %s", got)
			assert.ErrorIs(t, err, errDuplicateKey)
			assert.Equal(t, fmt.Sprintf("%s: duplicate key %q", c.side, c.pointer), err.Error())
		})
	}

	// The same name in different objects is no duplicate.
	got, err := mergePatch([]byte(`{"a":{"a":1},"l":[{"a":1},{"a":2}]}`), []byte(`{"b":{"a":{"a":2}}}`))
	require.NoError(t, err)
	assert.Equal(t, `{"a":{"a":1},"l":[{"a":1},{"a":2}],"b":{"a":{"a":2}}}`, string(got))
	big := manyKeys(40, "")
	got, err = mergePatch([]byte(big), []byte(`{"o":`+big+`}`))
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSuffix(big, "}")+`,"o":`+big+`}`, string(got))
}

func TestMergePatchRejectsInvalidJSON(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	cases := []struct{ name, target, patch, side string }{
		{"empty target", ``, `{}`, "target"},
		{"empty patch", `{}`, ``, "patch"},
		{"truncated", `{"a":`, `{}`, "target"},
		{"trailing value", `{}`, `{} {}`, "patch"},
		{"trailing text", `{"a":1} x`, `{}`, "target"},
		{"raw control character", "{\"a\":\"x\ty\"}", `{}`, "target"},
		{"bad literal", `{}`, `{"a":nul}`, "patch"},
		{"single quotes", `{}`, `{'a':1}`, "patch"},
		{"too deep", `{"a":` + deep(maxParseDepth) + `}`, `{}`, "target"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := mergePatch([]byte(c.target), []byte(c.patch))
			require.Error(t, err, "got %s", got)
			assert.True(t, strings.HasPrefix(err.Error(), c.side+": "), err.Error())
		})
	}

	// Surrounding whitespace is no trailing data, and the deepest nesting
	// allowed passes.
	got, err := mergePatch([]byte(" \n{\"a\" : 1}\n"), []byte(`{"b":`+deep(maxParseDepth-1)+`}`))
	require.NoError(t, err)
	assert.Equal(t, `{"a":1,"b":`+deep(maxParseDepth-1)+`}`, string(got))
}

func TestMergePatchKeyOrder(t *testing.T) {
	t.Run("deterministic", func(t *testing.T) {
		// Enough new keys that a map's random order would show.
		target := []byte(`{"z":1,"m":{"k9":9,"k1":1},"a":3}`)
		patch := []byte(`{"q":1,"m":{"k0":0,"k1":null,"k5":5},"b":2,"z":{"y":1},"a":null,"c":3,"p":4,"d":5,"o":6,"e":7}`)
		const want = `{"z":{"y":1},"m":{"k9":9,"k0":0,"k5":5},"q":1,"b":2,"c":3,"p":4,"d":5,"o":6,"e":7}`
		for range 50 {
			got, err := mergePatch(bytes.Clone(target), patch)
			require.NoError(t, err)
			require.Equal(t, want, string(got))
		}
	})
	t.Run("target order kept", func(t *testing.T) {
		got, err := mergePatch([]byte(`{"c":1,"b":2,"a":3}`), []byte(`{"a":30,"c":10}`))
		require.NoError(t, err)
		assert.Equal(t, `{"c":10,"b":2,"a":30}`, string(got))
	})
	t.Run("new keys in patch order", func(t *testing.T) {
		var patch, want strings.Builder
		patch.WriteString(`{`)
		want.WriteString(`{"first":0`)
		for i := range 100 {
			if i > 0 {
				patch.WriteString(",")
			}
			fmt.Fprintf(&patch, `"k%03d":%d`, (i*37)%100, i)
			fmt.Fprintf(&want, `,"k%03d":%d`, (i*37)%100, i)
		}
		patch.WriteString(`}`)
		want.WriteString(`}`)
		got, err := mergePatch([]byte(`{"first":0}`), []byte(patch.String()))
		require.NoError(t, err)
		assert.Equal(t, want.String(), string(got))
	})
	t.Run("deleted then re-added goes last", func(t *testing.T) {
		got, err := mergePatch([]byte(`{"a":1,"b":2}`), []byte(`{"a":null}`))
		require.NoError(t, err)
		require.Equal(t, `{"b":2}`, string(got))
		got, err = mergePatch(got, []byte(`{"a":3}`))
		require.NoError(t, err)
		assert.Equal(t, `{"b":2,"a":3}`, string(got))
	})
	t.Run("key spelling of the target kept", func(t *testing.T) {
		got, err := mergePatch([]byte(`{"\u0061":1,"b":2}`), []byte(`{"a":10,"\u0062":null,"\u0063":3}`))
		require.NoError(t, err)
		assert.Equal(t, `{"\u0061":10,"\u0063":3}`, string(got))
	})
}

func TestMergePatchKeepsNumbers(t *testing.T) {
	const nums = `{"big":1e400,"tiny":1E-400,"int":12345678901234567890123,"dec":0.10,"neg":-0,"exp":-1.50e+10,"arr":[0.10,1e400,100000000000000000001]}`
	got, err := mergePatch([]byte(nums), []byte(`{"new":0.30000000000000000004,"obj":{"n":1.0}}`))
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSuffix(nums, "}")+`,"new":0.30000000000000000004,"obj":{"n":1.0}}`, string(got))

	got, err = mergePatch([]byte(`{"a":{"n":1}}`), []byte(`{"a":{"n":12345678901234567890123.0e-0}}`))
	require.NoError(t, err)
	assert.Equal(t, `{"a":{"n":12345678901234567890123.0e-0}}`, string(got))
}

// The output looks as the merge library's did, so files scribe merged
// before do not change bytes on their next merge.
func TestMergePatchFormatAsBefore(t *testing.T) {
	cases := []struct{ target, patch string }{
		{`{"a":1}`, `{"b":"x"}`},
		{"{ \"a\" : 1 ,\n\t\"z\": [1, 2 ,{\"q\" : null}] }\n", `{"b":"x"}`},
		{`{"a":"\u0041<>&` + "\u2028é" + `","b":"\/"}`, `{"c":"<>&\u00e9 \u2028"}`},
		{`{"a":1}`, `{"a":{"x":1,"y":null}}`},
		{`{"n":1e400,"m":0.10}`, `{"p":1E-400}`},
		{`{"s":"\ud800"}`, "{\"t\":\"\xff\xfe\"}"},
		{`{"a":{"b":1}}`, `{"a":{"c":[ 2 ]}}`},
		{`{}`, `{}`},
		{`{"<k>":[ "<a>" , "x\u2028" , {"&" : null} ]}`, `{"&":"` + "\u2029" + `"}`},
		{`{"a":"\"<\\"}`, `{"b":"\\\"&"}`},
	}
	for _, c := range cases {
		want, err := jsonpatch.MergePatch([]byte(c.target), []byte(c.patch))
		require.NoError(t, err)
		got, err := mergePatch([]byte(c.target), []byte(c.patch))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%s + %s", c.target, c.patch)
	}
}

// inspectJSON reports, with encoding/json's tokenizer rather than the
// parser under test, whether b is one valid JSON value, whether it is an
// object, whether some object repeats a key, and whether a null stands
// anywhere inside an array.
func inspectJSON(b []byte) (valid, object, dupKeys, nullInArray bool) {
	if !json.Valid(b) {
		return false, false, false, false
	}
	type frame struct {
		keys    map[string]bool // nil for an array
		wantKey bool
	}
	var stack []frame
	arrays := 0
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	for first := true; ; first = false {
		tok, err := dec.Token()
		if err == io.EOF {
			return true, object, dupKeys, nullInArray
		}
		if err != nil {
			return false, false, false, false
		}
		if first {
			object = tok == json.Delim('{')
		}
		if name, ok := tok.(string); ok && len(stack) > 0 && stack[len(stack)-1].wantKey {
			n := len(stack)
			dupKeys = dupKeys || stack[n-1].keys[name]
			stack[n-1].keys[name], stack[n-1].wantKey = true, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{keys: map[string]bool{}, wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			arrays++
			continue
		case json.Delim('}'), json.Delim(']'):
			if stack[len(stack)-1].keys == nil {
				arrays--
			}
			stack = stack[:len(stack)-1]
		case nil:
			nullInArray = nullInArray || arrays > 0
		}
		// A value ended: in an object, a key comes next.
		if n := len(stack); n > 0 && stack[n-1].keys != nil {
			stack[n-1].wantKey = true
		}
	}
}

func TestInspectJSON(t *testing.T) {
	cases := []struct {
		in                                  string
		valid, object, dupKeys, nullInArray bool
	}{
		{`{"a":1}`, true, true, false, false},
		{`{"a":{"a":1},"b":[{"a":1},{"a":1}]}`, true, true, false, false},
		{`{"a":{"b":1},"a":2}`, true, true, true, false},
		{`{"a":[{"b":{"c":1,"c":2}}]}`, true, true, true, false},
		{`{"a":null,"b":{"c":null}}`, true, true, false, false},
		{`{"a":[1,{"b":null}]}`, true, true, false, true},
		{`[null]`, true, false, false, true},
		{`{"a":1} x`, false, false, false, false},
	}
	for _, c := range cases {
		valid, object, dup, nulls := inspectJSON([]byte(c.in))
		assert.Equal(t, []bool{c.valid, c.object, c.dupKeys, c.nullInArray}, []bool{valid, object, dup, nulls}, c.in)
	}
}

// randomJSON writes a random JSON value for TestMergePatchRandomObjects:
// an object at the top, keys from a small set so that target and patch
// share some, and nulls (which delete) only outside arrays.
func randomJSON(r *rand.Rand, sb *strings.Builder, depth int, object, inArray bool) {
	kind := r.IntN(7) // 0-3 a scalar, 4-5 an array, 6 an object
	switch {
	case object:
		kind = 6
	case depth <= 0:
		kind = r.IntN(4)
	}
	switch kind {
	case 0:
		if inArray {
			sb.WriteString("true")
		} else {
			sb.WriteString("null")
		}
	case 1:
		sb.WriteString([]string{"0", "-1", "0.10", "1e400", "12345678901234567890123", "-0.0e-5"}[r.IntN(6)])
	case 2:
		sb.WriteString([]string{`""`, `"x"`, `"<&>"`, `"\u00e9\n"`, `"\ud800"`}[r.IntN(5)])
	case 3:
		sb.WriteString([]string{"true", "false"}[r.IntN(2)])
	case 4, 5:
		sb.WriteString("[")
		for i := range r.IntN(3) {
			if i > 0 {
				sb.WriteString(", ")
			}
			randomJSON(r, sb, depth-1, false, true)
		}
		sb.WriteString("]")
	default:
		sb.WriteString("{")
		for i, k := range r.Perm(6)[:r.IntN(7)] {
			if i > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(sb, ` "%c" : `, 'a'+k)
			randomJSON(r, sb, depth-1, false, inArray)
		}
		sb.WriteString("}")
	}
}

// Random objects reach shapes the fuzzers' byte mutations seldom keep
// valid: the merge must agree with the library it replaces (where that is
// right) as values, and be idempotent.
func TestMergePatchRandomObjects(t *testing.T) {
	r := rand.New(rand.NewPCG(7386, 1))
	for range 5000 {
		var ts, ps strings.Builder
		randomJSON(r, &ts, 4, true, false)
		randomJSON(r, &ps, 4, true, false)
		target, patch := []byte(ts.String()), []byte(ps.String())
		got, err := mergePatch(target, patch)
		require.NoError(t, err, "%s + %s", target, patch)
		want, err := jsonpatch.MergePatch(target, patch)
		require.NoError(t, err, "jsonpatch: %s + %s", target, patch)
		require.Equal(t, decodeJSON(t, want), decodeJSON(t, got), "%s + %s", target, patch)
		again, err := mergePatch(got, patch)
		require.NoError(t, err)
		require.Equal(t, string(got), string(again), "not idempotent: %s + %s", target, patch)
	}
}

func addMergeSeeds(f *testing.F) {
	for _, c := range rfc7386Examples {
		f.Add([]byte(c.target), []byte(c.patch))
	}
	for _, s := range [][2]string{
		{`{}`, `{"a":[{"x":null,"y":1}]}`},
		{`{"a":1,"a":2}`, `{"a":null}`},
		{`{"a":1}`, `{"b":{"c":1,"c":2}}`},
		{`{"z":1,"m":{"k9":9,"k1":1},"a":3}`, `{"q":1,"m":{"k0":0,"k1":null},"b":2,"z":{"y":1},"a":null,"c":3}`},
		{`{"n":1e400,"i":12345678901234567890123,"d":0.10}`, `{"d":-0,"e":1E-400}`},
		{`{"\u0061":1,"s":"<\ud800>"}`, "{\"a\":{\"b\":null},\"t\":\"\xff\"}"},
		{" {\"a\" : [ 1 , 2 ] }\n", `{"a":{"b":[]}}`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
}

// FuzzMergePatchDifferential checks mergePatch against the merge library
// it replaces, on the inputs where that library follows RFC 7386: objects
// without duplicate keys and without nulls inside the patch's arrays. It
// also checks that exactly the inputs that are not valid JSON, or repeat a
// key, are refused.
func FuzzMergePatchDifferential(f *testing.F) {
	addMergeSeeds(f)
	f.Fuzz(func(t *testing.T, target, patch []byte) {
		if jsonDepth(target) > MaxMergeDepth || jsonDepth(patch) > MaxMergeDepth {
			return // applyOp rejects these before merging
		}
		tValid, tObject, tDup, _ := inspectJSON(target)
		pValid, pObject, pDup, pNullInArray := inspectJSON(patch)
		got, err := mergePatch(target, patch)
		if !tValid || !pValid || tDup || pDup {
			require.Error(t, err, "accepted %q + %q: %q", target, patch, got)
			return
		}
		require.NoError(t, err, "%q + %q", target, patch)
		require.True(t, json.Valid(got), "not JSON: %q", got)
		if !tObject || !pObject || pNullInArray {
			return
		}
		want, err := jsonpatch.MergePatch(target, patch)
		require.NoError(t, err, "jsonpatch: %q + %q", target, patch)
		assert.Equal(t, decodeJSON(t, want), decodeJSON(t, got), "%q + %q", target, patch)
	})
}

// FuzzMergePatchProperties checks properties of mergePatch that hold for
// any input: it never panics; the result is valid JSON, an object when
// the patch is one, and the patch itself (compacted) when it is not; and
// merging the same patch again changes nothing, not even a byte.
func FuzzMergePatchProperties(f *testing.F) {
	addMergeSeeds(f)
	f.Fuzz(func(t *testing.T, target, patch []byte) {
		got, err := mergePatch(target, patch)
		if err != nil {
			return
		}
		require.True(t, json.Valid(got), "not JSON: %q", got)
		if _, pObject, _, _ := inspectJSON(patch); !pObject {
			want, err := json.Marshal(json.RawMessage(patch))
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
			return
		}
		var obj map[string]any
		dec := json.NewDecoder(bytes.NewReader(got))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&obj), "not an object: %q", got)
		require.NotNil(t, obj, "null: %q", got)

		again, err := mergePatch(got, patch)
		require.NoError(t, err, "merging %q into the result %q", patch, got)
		assert.Equal(t, string(got), string(again), "not idempotent: %q + %q", target, patch)
		twice, err := mergePatch(target, patch)
		require.NoError(t, err)
		assert.Equal(t, string(got), string(twice), "not deterministic")
	})
}
