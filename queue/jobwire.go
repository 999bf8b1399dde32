package queue

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// A job's wire form, both ways: Encode writes it (its JSON value by hand,
// wirejson.go), Decode reads and checks it, strictly.

// wireOp is Op as JSON. In a job that is one JSON value, data travels as
// "data" (a UTF-8 string) when it is valid UTF-8 and as "data_b64"
// (standard base64) otherwise, so that job files stay readable by people
// and any bytes can still be sent; in a VersionRaw job, as "data_len", the
// length of its part after the JSON value.
type wireOp struct {
	Op        OpKind   `json:"op"`
	Path      *string  `json:"path,omitempty"`
	Data      *string  `json:"data,omitempty"`
	DataB64   *string  `json:"data_b64,omitempty"`
	DataLen   *int     `json:"data_len,omitempty"`
	IfMatch   *string  `json:"if_match,omitempty"`
	Name      *string  `json:"name,omitempty"`
	Args      []string `json:"args,omitempty"`
	Dir       *string  `json:"dir,omitempty"`
	TimeoutMS *int64   `json:"timeout_ms,omitempty"`
}

// MarshalJSON encodes the op in its wire form, data included.
func (o Op) MarshalJSON() ([]byte, error) {
	w := o.wire()
	w.setData(o.Data)
	return w.appendJSON(nil), nil
}

// setData puts data in the op's wire form: as text if it is UTF-8, else
// in base64.
func (w *wireOp) setData(data []byte) {
	switch {
	case data == nil:
	case utf8.Valid(data):
		s := string(data)
		w.Data = &s
	default:
		s := base64.StdEncoding.EncodeToString(data)
		w.DataB64 = &s
	}
}

// wire is the op's wire form without its data.
func (o Op) wire() wireOp {
	w := wireOp{Op: o.Kind, Path: given(o.Path), Name: given(o.Name), Args: o.Args, Dir: given(o.Dir)}
	if o.IfMatch != "" {
		w.IfMatch = &o.IfMatch
	}
	if o.Timeout != 0 {
		ms := timeoutMS(o.Timeout)
		w.TimeoutMS = &ms
	}
	return w
}

// maxTimeoutMS bounds timeout_ms either way: a number of milliseconds a
// time.Duration holds.
const maxTimeoutMS = math.MaxInt64 / int64(time.Millisecond)

// UnmarshalJSON decodes the op's wire form.
func (o *Op) UnmarshalJSON(b []byte) error {
	var w wireOp
	if err := strictUnmarshal(b, &w); err != nil {
		return err
	}
	op, err := w.op()
	*o = op
	return err
}

// op converts the wire form to an Op.
func (w *wireOp) op() (Op, error) {
	o := Op{Kind: w.Op, Args: w.Args}
	if w.Path != nil {
		// A file op's empty path is CheckPath's to refuse (path_escapes).
		if *w.Path == "" && w.Op == OpExec {
			return o, fmt.Errorf("op path: an exec op has none; leave it out")
		}
		o.Path = *w.Path
	}
	// A field given empty is refused, not taken for one left out: the
	// op cannot have it (a file op's name), or "" is no value of it.
	for _, f := range []struct {
		name string
		v    *string
		to   *string
	}{{"name", w.Name, &o.Name}, {"dir", w.Dir, &o.Dir}} {
		if f.v != nil {
			if *f.v == "" {
				return o, fmt.Errorf("op %s: empty: leave it out", f.name)
			}
			*f.to = *f.v
		}
	}
	if w.Args != nil && len(w.Args) == 0 {
		if w.Op != OpExec {
			return o, fmt.Errorf("op args: only an exec op has args")
		}
		o.Args = nil // an exec op's "args": [] is no args
	}
	if w.IfMatch != nil {
		// "" would read as no precondition: a hash left empty by its
		// caller must not turn a conditional write into a blind one.
		if *w.IfMatch == "" {
			return o, fmt.Errorf("op if_match: empty: give %q or sha256:<64 hex>, or leave it out for no precondition", IfAbsent)
		}
		o.IfMatch = *w.IfMatch
	}
	if w.TimeoutMS != nil {
		// An explicit timeout of 0 or less is kept as a negative one, so
		// that Validate rejects it with a reason (0 would mean "none
		// given"), and its digest still hashes the number sent (timeoutMS).
		ms := *w.TimeoutMS
		if ms > maxTimeoutMS || ms < -maxTimeoutMS {
			return o, fmt.Errorf("op timeout_ms: %d is out of range", ms)
		}
		o.Timeout = time.Duration(ms) * time.Millisecond
		if ms == 0 {
			o.Timeout = -1
		}
	}
	switch {
	case w.DataLen != nil:
		return o, fmt.Errorf("op data_len: only in a job of version %d", VersionRaw)
	case w.Data != nil && w.DataB64 != nil:
		return o, fmt.Errorf("op has both data and data_b64")
	case w.Data != nil:
		o.Data = []byte(*w.Data)
	case w.DataB64 != nil:
		d, err := base64.StdEncoding.DecodeString(*w.DataB64)
		if err != nil {
			return o, fmt.Errorf("op data_b64: %w", err)
		}
		o.Data = d
	}
	return o, nil
}

// wireJob is Job as JSON, its ops in wire form: Decode reads a job in one
// pass of the decoder (an Op's own UnmarshalJSON would scan each op's
// bytes twice more).
type wireJob struct {
	V         int               `json:"v"`
	ID        string            `json:"id"`
	Store     string            `json:"store"`
	Ops       []wireOp          `json:"ops"`
	Meta      map[string]string `json:"meta,omitempty"`
	Coalesce  *string           `json:"coalesce,omitempty"`
	Submitted time.Time         `json:"submitted,omitzero"`
	Priority  *Priority         `json:"priority,omitempty"`
}

// givenEmpty refuses a job's coalesce or priority given empty: "" is no
// value of either, and a job must not read as one left out.
func givenEmpty(coalesce *string, priority *Priority) error {
	switch {
	case coalesce != nil && *coalesce == "":
		return fmt.Errorf("coalesce: empty: leave it out")
	case priority != nil && *priority == "":
		return fmt.Errorf("priority: empty: leave it out for a normal job")
	}
	return nil
}

// CheckGivenEmpty applies Decode's rule on job fields given empty
// (coalesce, priority) to a job's JSON b, for a caller that decodes b into
// a Job itself (a job file), where "" and a field left out look the same.
// The ops' fields are the ops' own decoding's.
func CheckGivenEmpty(b []byte) error {
	var w struct {
		Coalesce *string   `json:"coalesce"`
		Priority *Priority `json:"priority"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return nil // not a job's JSON: its decoder says so
	}
	return givenEmpty(w.Coalesce, w.Priority)
}

// given is s as an optional wire field: nil (left out) when empty.
func given[T ~string](s T) *T {
	if s == "" {
		return nil
	}
	return &s
}

// Encode validates the job and returns its wire form: VersionRaw if it
// carries data, Version otherwise (j.V is set to the one written).
func Encode(j *Job) ([]byte, error) { return EncodeLimit(j, MaxJobBytes) }

// EncodeLimit is Encode for a daemon that takes jobs of up to limit bytes
// (Discovery.MaxJobBytes); limit 0 means MaxJobBytes.
func EncodeLimit(j *Job, limit int) ([]byte, error) {
	if limit <= 0 {
		limit = MaxJobBytes
	}
	if j.V != 0 && j.V != Version && j.V != VersionRaw {
		if err := j.Validate(); err != nil {
			return nil, err // a version the caller set, refused as a decoder would
		}
	}
	j.V = Version
	for _, op := range j.Ops {
		if op.Data != nil {
			j.V = VersionRaw
		}
	}
	if err := j.Validate(); err != nil {
		return nil, err
	}
	var b []byte
	var err error
	if j.V == VersionRaw {
		b, err = encodeRaw(j)
	} else {
		w := j.wire(false)
		b, err = w.appendJSON(nil)
	}
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		whose := "the store's daemon's: serve --max-job-bytes"
		if limit == MaxJobBytes {
			whose = "1 MiB: a direct write's always, a daemon's unless it takes more: serve --max-job-bytes"
		}
		return nil, Reject(ReasonTooLarge, "job is %d bytes encoded, limit %d (%s)", len(b), limit, whose)
	}
	return b, nil
}

// Decode parses and validates a job's wire form. On error the returned job
// still carries whatever ID could be read (empty if none), so that the
// rejection can be recorded under it; the error is a *RejectError. A job
// that decoded but is invalid is returned whole (its Ops non-nil), so its
// Digest is its own; for bytes that did not decode (not JSON, an unknown
// field, a wrong type, too large) it holds only the ID, and Ops is nil.
func Decode(b []byte) (*Job, error) { return DecodeLimit(b, MaxJobBytes) }

// DecodeLimit is Decode for jobs of up to limit bytes (0: MaxJobBytes).
func DecodeLimit(b []byte, limit int) (*Job, error) {
	if limit <= 0 {
		limit = MaxJobBytes
	}
	if len(b) > limit {
		return &Job{ID: salvageID(b)}, Reject(ReasonTooLarge, "job is %d bytes, limit %d", len(b), limit)
	}
	j, err := decodeJob(b)
	if err != nil {
		// Salvage the ID, if any, so the caller can still hear why.
		id := salvageID(b)
		return &Job{ID: id}, Reject(ReasonBadInput, "job is not valid JSON: %v", err)
	}
	if err := j.Validate(); err != nil {
		if !ValidID(j.ID) {
			j.ID = ""
		}
		return j, err
	}
	return j, nil
}

// wire is the job's wire form, with its ops' data in it, or, raw, only
// their lengths (VersionRaw).
func (j *Job) wire(raw bool) wireJob {
	w := wireJob{V: j.V, ID: j.ID, Store: j.Store, Meta: j.Meta, Coalesce: given(j.Coalesce), Submitted: j.Submitted, Priority: given(j.Priority)}
	if j.Ops != nil {
		w.Ops = make([]wireOp, len(j.Ops))
	}
	for i, op := range j.Ops {
		w.Ops[i] = op.wire()
		if raw && op.Data != nil {
			n := len(op.Data)
			w.Ops[i].DataLen = &n
		} else if !raw {
			w.Ops[i].setData(op.Data)
		}
	}
	return w
}

// encodeRaw writes j as VersionRaw: its JSON value with each op's data
// length, a newline, and the data.
func encodeRaw(j *Job) ([]byte, error) {
	w := j.wire(true)
	size := 0
	for _, op := range j.Ops {
		size += len(op.Data)
	}
	b, err := w.appendJSON(make([]byte, 0, 256+size))
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	for _, op := range j.Ops {
		b = append(b, op.Data...)
	}
	return b, nil
}

// decodeJob decodes a job's wire form strictly, in one pass over its JSON
// value. A VersionRaw job's data is not copied: its ops' Data share b.
func decodeJob(b []byte) (*Job, error) {
	var w wireJob
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, err
	}
	if err := CheckText(b[:dec.InputOffset()]); err != nil {
		return nil, err
	}
	rest := b[dec.InputOffset():]
	raw := w.V == VersionRaw
	if raw {
		if len(rest) == 0 || rest[0] != '\n' {
			return nil, fmt.Errorf("a job of version %d has a newline after its JSON value", VersionRaw)
		}
		rest = rest[1:]
	} else if len(bytes.TrimLeft(rest, " \t\r\n")) > 0 {
		return nil, fmt.Errorf("data after the JSON value")
	}
	if err := givenEmpty(w.Coalesce, w.Priority); err != nil {
		return nil, err
	}
	j := &Job{V: w.V, ID: w.ID, Store: w.Store, Meta: w.Meta, Submitted: w.Submitted}
	if w.Coalesce != nil {
		j.Coalesce = *w.Coalesce
	}
	if w.Priority != nil {
		j.Priority = *w.Priority
	}
	j.Ops = make([]Op, len(w.Ops)) // non-nil even without ops: the job decoded (see Decode)
	for i := range w.Ops {
		n := w.Ops[i].DataLen
		w.Ops[i].DataLen = nil
		op, err := w.Ops[i].op()
		if err != nil {
			return nil, err
		}
		if n != nil {
			switch {
			case !raw:
				return nil, fmt.Errorf("op %d: data_len: only in a job of version %d", i, VersionRaw)
			case w.Ops[i].Data != nil || w.Ops[i].DataB64 != nil:
				return nil, fmt.Errorf("op %d: data_len with data or data_b64", i)
			case *n < 0 || *n > len(rest):
				return nil, fmt.Errorf("op %d: data_len %d, but %d bytes follow", i, *n, len(rest))
			}
			op.Data, rest = rest[:*n:*n], rest[*n:]
		}
		j.Ops[i] = op
	}
	if raw && len(rest) > 0 {
		return nil, fmt.Errorf("%d bytes after the ops' data", len(rest))
	}
	return j, nil
}

// CheckText finds what encoding/json would read as U+FFFD in a job's
// JSON text b, which it has decoded: a byte that is not part of valid
// UTF-8, or a lone surrogate escape (\ud800). Either would change a path,
// data, an argument or meta from what was sent, so such a job does not
// decode; a reader of a job in another form (a --job file) checks too.
func CheckText(b []byte) error {
	if !utf8.Valid(b) {
		for i := 0; i < len(b); {
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return fmt.Errorf("byte %d is not UTF-8 (send such bytes as data_b64)", i)
			}
			i += n
		}
	}
	surrogate := func(at int) (rune, bool) { // at: a \u escape in b, if any
		if at+6 > len(b) || b[at] != '\\' || b[at+1] != 'u' {
			return 0, false
		}
		r, err := strconv.ParseUint(string(b[at+2:at+6]), 16, 16)
		return rune(r), err == nil && utf16.IsSurrogate(rune(r))
	}
	for i := 0; ; {
		k := bytes.IndexByte(b[i:], '\\')
		if k < 0 || i+k+1 >= len(b) {
			return nil
		}
		i += k
		if hi, ok := surrogate(i); ok {
			lo, pair := surrogate(i + 6)
			if hi >= 0xdc00 || !pair || lo < 0xdc00 {
				return fmt.Errorf("byte %d: the lone surrogate escape %s is no character", i, b[i:i+6])
			}
			i += 12
			continue
		}
		i += 2 // an escape: \u of a character is skipped 4 bytes later, harmlessly
	}
}

// strictUnmarshal decodes one JSON value, refusing unknown fields: a
// misspelt "if_match" must not silently drop a precondition.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}

// salvageID reads the top-level "id" of a job that does not decode, from
// the tokens before the first syntax error, so that even a truncated or
// garbled job can get a recorded rejection. It reads the key as the
// decoder does: in any case ("ID"), and the last of several. It returns
// "" if that one is not a valid ID.
func salvageID(b []byte) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	depth := 1
	expectKey := true
	id := ""
	for depth > 0 {
		t, err := dec.Token()
		if err != nil {
			return id
		}
		switch v := t.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
			} else {
				depth--
			}
			if depth == 1 {
				expectKey = true
			}
			continue
		case string:
			if depth == 1 && expectKey && strings.EqualFold(v, "id") {
				t, err := dec.Token()
				if err != nil {
					return ""
				}
				id = ""
				if s, ok := t.(string); ok && ValidID(s) {
					id = s
				} else if d, ok := t.(json.Delim); ok && (d == '{' || d == '[') {
					depth++ // not an ID, but its value's tokens follow
					continue
				}
				continue // expectKey stays: the next token is a key
			}
		}
		if depth == 1 {
			expectKey = !expectKey
		}
	}
	return id
}
