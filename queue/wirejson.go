package queue

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// The wire's hot paths without reflection: a job's header as its client
// encodes it, an outcome both ways, and the discovery file a client reads. Each writes exactly the bytes
// encoding/json writes for the same value (the tests hold them to it), and
// hands any value it does not take apart itself (a map, a nested object, a
// string to escape) to encoding/json. The decoders read only the usual
// form; for anything else they say so, and their callers ask
// encoding/json, whose result is the rule.

// appendString appends s as encoding/json writes a string: quoted, and
// escaped as it escapes. Printable ASCII that needs no escape, the usual
// case, is copied.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendValue appends v as encoding/json encodes it.
func appendValue(b []byte, v any) ([]byte, error) {
	q, err := json.Marshal(v)
	return append(b, q...), err
}

// appendTime appends t as encoding/json encodes a time.Time.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	q, err := t.MarshalJSON()
	if err != nil {
		return b, &json.MarshalerError{Type: reflect.TypeFor[time.Time](), Err: err} // as encoding/json says it
	}
	return append(b, q...), nil
}

// appendJSON appends the job's JSON value, as json.Marshal(w) writes it.
func (w *wireJob) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(w.V), 10)
	b = append(b, `,"id":`...)
	b = appendString(b, w.ID)
	b = append(b, `,"store":`...)
	b = appendString(b, w.Store)
	b = append(b, `,"ops":`...)
	if w.Ops == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range w.Ops {
			if i > 0 {
				b = append(b, ',')
			}
			b = w.Ops[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	var err error
	if len(w.Meta) > 0 {
		b = append(b, `,"meta":`...)
		if b, err = appendValue(b, w.Meta); err != nil {
			return nil, err
		}
	}
	if w.Coalesce != nil {
		b = append(b, `,"coalesce":`...)
		b = appendString(b, *w.Coalesce)
	}
	if !w.Submitted.IsZero() {
		b = append(b, `,"submitted":`...)
		if b, err = appendTime(b, w.Submitted); err != nil {
			return nil, err
		}
	}
	if w.Priority != nil {
		b = append(b, `,"priority":`...)
		b = appendString(b, string(*w.Priority))
	}
	return append(b, '}'), nil
}

// appendJSON appends the op's JSON value, as json.Marshal(w) writes it.
func (w *wireOp) appendJSON(b []byte) []byte {
	b = append(b, `{"op":`...)
	b = appendString(b, string(w.Op))
	field := func(name string, v *string) {
		if v != nil {
			b = append(b, `,"`...)
			b = append(b, name...)
			b = append(b, `":`...)
			b = appendString(b, *v)
		}
	}
	field("path", w.Path)
	field("data", w.Data)
	field("data_b64", w.DataB64)
	if w.DataLen != nil {
		b = append(b, `,"data_len":`...)
		b = strconv.AppendInt(b, int64(*w.DataLen), 10)
	}
	field("if_match", w.IfMatch)
	field("name", w.Name)
	if len(w.Args) > 0 {
		b = append(b, `,"args":[`...)
		for i, a := range w.Args {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, a)
		}
		b = append(b, ']')
	}
	field("dir", w.Dir)
	if w.TimeoutMS != nil {
		b = append(b, `,"timeout_ms":`...)
		b = strconv.AppendInt(b, *w.TimeoutMS, 10)
	}
	return append(b, '}')
}

// appendJSON appends the outcome's JSON value, as json.Marshal(o) writes
// it.
func (o *Outcome) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(o.V), 10)
	b = append(b, `,"id":`...)
	b = appendString(b, o.ID)
	b = append(b, `,"status":`...)
	b = appendString(b, string(o.Status))
	if o.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendString(b, string(o.Reason))
	}
	if o.Detail != "" {
		b = append(b, `,"detail":`...)
		b = appendString(b, o.Detail)
	}
	b = append(b, `,"epoch":`...)
	b = strconv.AppendUint(b, o.Epoch, 10)
	if o.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, o.Seq, 10)
	}
	b = append(b, `,"mode":`...)
	b = appendString(b, string(o.Mode))
	b = append(b, `,"at":`...)
	var err error
	if b, err = appendTime(b, o.At); err != nil {
		return nil, err
	}
	if len(o.Meta) > 0 {
		b = append(b, `,"meta":`...)
		if b, err = appendValue(b, o.Meta); err != nil {
			return nil, err
		}
	}
	if o.MetaCut != 0 {
		b = append(b, `,"meta_cut":`...)
		b = strconv.AppendInt(b, int64(o.MetaCut), 10)
	}
	if o.Digest != "" {
		b = append(b, `,"digest":`...)
		b = appendString(b, o.Digest)
	}
	if o.Exec != nil {
		b = append(b, `,"exec":`...)
		if b, err = appendValue(b, o.Exec); err != nil {
			return nil, err
		}
	}
	if o.CoalescedInto != "" {
		b = append(b, `,"coalesced_into":`...)
		b = appendString(b, o.CoalescedInto)
	}
	return append(b, '}'), nil
}

// decodeOutcomeFast decodes an outcome of the usual form (see decodeFlat),
// without an exec result. It reports false for anything else, which
// encoding/json then decodes (or refuses).
func decodeOutcomeFast(b []byte) (*Outcome, bool) {
	o := new(Outcome)
	ok := decodeFlat(b, func(s *scanner, key string) bool {
		var v string
		var ok bool
		switch key {
		case "v":
			return s.int(&o.V)
		case "id":
			o.ID, ok = s.str()
		case "status":
			v, ok = s.str()
			o.Status = Status(v)
		case "reason":
			v, ok = s.str()
			o.Reason = Reason(v)
		case "detail":
			o.Detail, ok = s.str()
		case "epoch":
			o.Epoch, ok = s.uint(64)
		case "seq":
			o.Seq, ok = s.uint(64)
		case "mode":
			v, ok = s.str()
			o.Mode = Mode(v)
		case "at":
			return s.time(&o.At)
		case "meta":
			o.Meta, ok = s.stringMap()
		case "meta_cut":
			return s.int(&o.MetaCut)
		case "digest":
			o.Digest, ok = s.str()
		case "coalesced_into":
			o.CoalescedInto, ok = s.str()
		}
		return ok // false for exec, and for a key that is not the Outcome's
	})
	return o, ok
}

// decodeDiscovery decodes a discovery file of the usual form (see
// decodeFlat), as encoding/json would; false for anything else.
func decodeDiscovery(b []byte) (*Discovery, bool) {
	d := new(Discovery)
	strs := map[string]*string{"url": &d.URL, "user": &d.User, "password": &d.Password, "version": &d.Version, "store": &d.Store,
		"store_id": &d.StoreID, "tls_cert": &d.TLSCert, "tls_cert_sha256": &d.TLSCertSHA256, "lock_file": &d.LockFile, "queue": &d.Queue}
	ok := decodeFlat(b, func(s *scanner, key string) bool {
		if to, ok := strs[key]; ok {
			*to, ok = s.str()
			return ok
		}
		switch key {
		case "pid":
			return s.int(&d.PID)
		case "max_job_bytes":
			return s.int(&d.MaxJobBytes)
		case "idle_release_ms":
			v, ok := s.uint(63)
			d.IdleReleaseMS = int64(v)
			return ok
		case "started":
			return s.time(&d.Started)
		}
		return false
	})
	return d, ok
}

// decodeFlat reads an object of the usual form: keys spelled without
// escapes, each at most once, each value read by field, which reports
// false for a key it does not know or a value it cannot read exactly as
// encoding/json would; then nothing but space. It reports whether all of
// that held.
func decodeFlat(b []byte, field func(s *scanner, key string) bool) bool {
	s := scanner{b: b}
	if !s.byte('{') {
		return false
	}
	var seenKeys [16]string
	seen := seenKeys[:0]
	for first := true; !s.byte('}'); first = false {
		if !first && !s.byte(',') {
			return false
		}
		q, plain, ok := s.raw()
		if !ok || !plain || !s.byte(':') {
			return false
		}
		key := string(q[1 : len(q)-1])
		if slices.Contains(seen, key) || len(seen) == cap(seen) {
			return false // encoding/json keeps the last; leave that to it
		}
		seen = append(seen, key)
		if !field(&s, key) {
			return false
		}
	}
	return s.end()
}

// scanner reads the usual form of JSON tokens from b; each method reports
// false for anything it does not read exactly as encoding/json would.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// byte reads c, after any space.
func (s *scanner) byte(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only space is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// raw reads a string token, its quotes included; plain says it holds no
// escape. A control byte, which JSON does not allow in a string, is not
// read.
func (s *scanner) raw() (q []byte, plain, ok bool) {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, false
	}
	plain = true
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			q := s.b[s.i : j+1]
			s.i = j + 1
			return q, plain, true
		case c == '\\':
			plain = false
			j++
		case c < 0x20:
			return nil, false, false
		}
	}
	return nil, false, false
}

// str reads a string. One with escapes, or that is not UTF-8 (which
// encoding/json replaces), encoding/json reads.
func (s *scanner) str() (string, bool) {
	q, plain, ok := s.raw()
	switch {
	case !ok:
		return "", false
	case plain && utf8.Valid(q):
		return string(q[1 : len(q)-1]), true
	}
	var v string
	return v, json.Unmarshal(q, &v) == nil
}

// uint reads an unsigned integer of at most bits bits.
func (s *scanner) uint(bits int) (uint64, bool) {
	s.space()
	j := s.i
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		j++
	}
	if j == s.i || j < len(s.b) && (s.b[j] == '.' || s.b[j] == 'e' || s.b[j] == 'E') {
		return 0, false
	}
	if s.b[s.i] == '0' && j > s.i+1 {
		return 0, false // a leading zero is not JSON
	}
	v, err := strconv.ParseUint(string(s.b[s.i:j]), 10, bits)
	if err != nil {
		return 0, false
	}
	s.i = j
	return v, true
}

// int reads an unsigned integer into an int.
func (s *scanner) int(to *int) bool {
	v, ok := s.uint(strconv.IntSize - 1)
	*to = int(v)
	return ok
}

// time reads a string as encoding/json decodes a time.Time: the token
// as it is, to its UnmarshalJSON.
func (s *scanner) time(to *time.Time) bool {
	q, _, ok := s.raw()
	return ok && to.UnmarshalJSON(q) == nil
}

// stringMap reads an object of strings.
func (s *scanner) stringMap() (map[string]string, bool) {
	if !s.byte('{') {
		return nil, false
	}
	m := map[string]string{}
	for first := true; ; first = false {
		if s.byte('}') {
			return m, true
		}
		if !first && !s.byte(',') {
			return nil, false
		}
		k, ok := s.str()
		if !ok || !s.byte(':') {
			return nil, false
		}
		v, ok := s.str()
		if !ok {
			return nil, false
		}
		m[k] = v // the last of a repeated key, as encoding/json keeps
	}
}
