package writer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// mergePatch applies patch to target as RFC 7386 section 2 defines it and
// returns the result as compact JSON.
//
// Objects keep their members in order: a member the patch changes keeps
// its place in the target, a member patched with null is removed, and new
// members follow in the patch's order, so that the same merge always gives
// the same bytes and a store kept in git diffs cleanly. Every other value
// (strings, numbers, literals, arrays, nulls inside arrays) is copied as
// written, so numbers keep their precision and spelling (1e400, 0.10).
// The output is written as json.Marshal writes a json.RawMessage, as the
// merge library used before did: no whitespace, and <, >, &, U+2028 and
// U+2029 escaped inside strings.
//
// A target or patch that is not valid JSON, that has anything after its
// value, that repeats a key in any object at any depth (names compared
// unescaped: "a" and "\u0061" are one key), or that nests deeper than
// maxParseDepth is an error; the error says which of the two and, for a
// repeated key, where (a JSON pointer). Like the RFC, a patch that is not
// an object replaces the target, and a target that is not an object is
// merged as {}.
func mergePatch(target, patch []byte) ([]byte, error) {
	if err := checkJSON(target); err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	if err := checkJSON(patch); err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	// Room for the result and the newline the caller adds.
	out := make([]byte, 0, len(target)+len(patch)+1)
	return mergeValue(rawValue(target), rawValue(patch)).appendTo(out), nil
}

// MaxMergeDepth is the deepest nesting of objects and arrays that merge
// accepts, in the file and in the patch.
const MaxMergeDepth = 128

// jsonDepth returns how deep objects and arrays nest in b, valid JSON.
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// maxParseDepth is how deep mergePatch nests. It is one more than the limit
// applyOp checks first, so that a deep input is rejected there, as too
// large; this bound only keeps the recursion finite.
const maxParseDepth = MaxMergeDepth + 1

// jsonValue is a JSON value that checkJSON accepted: its raw bytes, or an
// object built by a merge. Only the objects on the patch's paths are ever
// taken apart, so that merging into a large file costs little more than
// copying it.
type jsonValue struct {
	merged []jsonMember // the members of an object built by mergeValue
	raw    []byte       // otherwise
}

type jsonMember struct {
	rawName []byte // as written, quotes included
	value   jsonValue
}

func rawValue(b []byte) jsonValue { return jsonValue{raw: bytes.Trim(b, " \t\n\r")} }

func (v jsonValue) isObject() bool { return v.merged != nil || len(v.raw) > 0 && v.raw[0] == '{' }

func (v jsonValue) isNull() bool { return v.merged == nil && string(v.raw) == "null" }

// members yields the members of v, an object, in order.
func (v jsonValue) members(yield func(jsonMember) bool) {
	if v.merged != nil {
		for _, m := range v.merged {
			if !yield(m) {
				return
			}
		}
		return
	}
	b := v.raw
	for i := skipSpace(b, 1); b[i] != '}'; {
		end := skipString(b, i)
		m := jsonMember{rawName: b[i:end]}
		i = skipSpace(b, skipSpace(b, end)+1) // past ':'
		end = skipValue(b, i)
		m.value.raw = b[i:end]
		if !yield(m) {
			return
		}
		if i = skipSpace(b, end); b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
}

// mergeValue is the MergePatch function of RFC 7386 section 2, on
// ordered objects: the target's members keep their order, those the patch
// sets to null are dropped, and the patch's new members follow in its
// order. checkJSON has made sure that no object repeats a name, so each
// member of one matches at most one of the other.
func mergeValue(target, patch jsonValue) jsonValue {
	if !patch.isObject() {
		return patch
	}
	var changes []jsonMember
	byName := map[string]int{}
	for m := range patch.members {
		byName[string(nameBytes(m.rawName))] = len(changes)
		changes = append(changes, m)
	}
	used := make([]bool, len(changes))
	out := make([]jsonMember, 0, len(changes))
	if target.isObject() {
		for m := range target.members {
			if j, ok := byName[string(nameBytes(m.rawName))]; ok {
				used[j] = true
				if changes[j].value.isNull() {
					continue
				}
				m.value = mergeValue(m.value, changes[j].value)
			}
			out = append(out, m)
		}
	}
	for j, m := range changes {
		if used[j] || m.value.isNull() {
			continue
		}
		m.value = mergeValue(jsonValue{}, m.value)
		out = append(out, m)
	}
	return jsonValue{merged: out}
}

// appendTo appends v's JSON to dst as json.Marshal writes a
// json.RawMessage, as the merge library used before did.
func (v jsonValue) appendTo(dst []byte) []byte {
	if v.merged == nil {
		return appendCompact(dst, v.raw)
	}
	dst = append(dst, '{')
	for i, m := range v.merged {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendCompact(dst, m.rawName)
		dst = append(dst, ':')
		dst = m.value.appendTo(dst)
	}
	return append(dst, '}')
}

// appendCompact appends raw, valid JSON, to dst without its whitespace and
// with <, >, &, U+2028 and U+2029 escaped, as encoding/json's compact does
// for json.Marshal.
func appendCompact(dst, raw []byte) []byte {
	const hex = "0123456789abcdef"
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			continue
		case c == '"':
			inString = !inString
		case !inString:
		case c == '\\':
			dst = append(dst, c)
			i++
			c = raw[i] // an escaped byte is ASCII: kept as is
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			continue
		case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[raw[i+2]&0xF])
			i += 2
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

// errDuplicateKey is wrapped with the duplicated member's JSON pointer.
var errDuplicateKey = errors.New("duplicate key")

// checkJSON checks that b is one valid JSON value, that no object in it,
// at any depth, repeats a key, and that it nests no deeper than
// maxParseDepth.
func checkJSON(b []byte) error {
	// json.Valid does the syntax (and trailing data) checks; the walk
	// below then only has to find where things are.
	if !json.Valid(b) {
		var raw json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			return err // a *json.SyntaxError that says what and where
		}
		return errors.New("invalid JSON")
	}
	c := &jsonChecker{b: b}
	c.i = skipSpace(b, 0)
	return c.value(1)
}

// jsonChecker walks JSON that json.Valid accepted.
type jsonChecker struct {
	b     []byte
	i     int
	path  []pathStep // where the walk is, for error messages
	names [][][]byte // per depth, the decoded names of the object there
}

type pathStep struct {
	name  []byte
	index int
	isIdx bool // an array element, at index
}

// value walks the value at c.i; depth is the nesting an object or array
// there would have, the top level being 1.
func (c *jsonChecker) value(depth int) error {
	switch c.b[c.i] {
	case '{', '[':
		if depth > maxParseDepth {
			return fmt.Errorf("nested deeper than %d at %q", maxParseDepth, c.pointer(nil))
		}
		if c.b[c.i] == '{' {
			return c.object(depth)
		}
		return c.array(depth)
	}
	c.i = skipValue(c.b, c.i)
	return nil
}

func (c *jsonChecker) object(depth int) error {
	for len(c.names) <= depth {
		c.names = append(c.names, nil)
	}
	names := c.names[depth][:0] // reused, so that most objects allocate nothing
	c.i = skipSpace(c.b, c.i+1)
	for c.b[c.i] != '}' {
		end := skipString(c.b, c.i)
		name := nameBytes(c.b[c.i:end])
		names = append(names, name)
		c.path = append(c.path, pathStep{name: name})
		c.i = skipSpace(c.b, skipSpace(c.b, end)+1) // past ':'
		if err := c.value(depth + 1); err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
		if c.i = skipSpace(c.b, c.i); c.b[c.i] == ',' {
			c.i = skipSpace(c.b, c.i+1)
		}
	}
	c.i++
	c.names[depth] = names
	if dup := duplicate(names); dup != nil {
		return fmt.Errorf("%w %q", errDuplicateKey, c.pointer(dup))
	}
	return nil
}

// duplicate returns a name that names holds twice, or nil. It may reorder
// names.
func duplicate(names [][]byte) []byte {
	if len(names) <= 16 {
		for i, a := range names {
			for _, b := range names[:i] {
				if bytes.Equal(a, b) {
					return a
				}
			}
		}
		return nil
	}
	// Sorting allocates nothing, unlike a set of strings.
	slices.SortFunc(names, bytes.Compare)
	for i := 1; i < len(names); i++ {
		if bytes.Equal(names[i-1], names[i]) {
			return names[i]
		}
	}
	return nil
}

// array walks an array only to check the objects inside it: the array
// itself is kept as written.
func (c *jsonChecker) array(depth int) error {
	c.i = skipSpace(c.b, c.i+1)
	for n := 0; c.b[c.i] != ']'; n++ {
		c.path = append(c.path, pathStep{index: n, isIdx: true})
		if err := c.value(depth + 1); err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
		if c.i = skipSpace(c.b, c.i); c.b[c.i] == ',' {
			c.i = skipSpace(c.b, c.i+1)
		}
	}
	c.i++
	return nil
}

// pointer is the RFC 6901 JSON pointer of where the walk is, or of its
// member name if name is not nil.
func (c *jsonChecker) pointer(name []byte) string {
	path := c.path
	if name != nil {
		path = append(path[:len(path):len(path)], pathStep{name: name})
	}
	var sb strings.Builder
	for _, s := range path {
		sb.WriteByte('/')
		if s.isIdx {
			sb.WriteString(strconv.Itoa(s.index))
		} else {
			sb.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(string(s.name)))
		}
	}
	return sb.String()
}

// nameBytes returns the value of a valid JSON string as encoding/json
// decodes it (invalid UTF-8 and lone surrogates become U+FFFD), so that
// keys match as the file's other readers see them. Without escapes it is
// the string's own bytes.
func nameBytes(raw []byte) []byte {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner
	}
	var s string
	_ = json.Unmarshal(raw, &s) // cannot fail: json.Valid accepted it
	return []byte(s)
}

// The scanners below take valid JSON (json.Valid) and the index where a
// token starts, and return the index just past it.

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func skipString(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++ // the escaped byte; \uXXXX's digits need no care
		}
	}
	return i + 1
}

// skipValue skips any value, without recursion.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		for depth := 0; ; {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	// A number, true, false or null.
	for i < len(b) && !isDelimiter(b[i]) {
		i++
	}
	return i
}

func isDelimiter(c byte) bool {
	switch c {
	case ',', ']', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
