package queue

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Version is the wire-format version of outcomes and of jobs that are one
// JSON value. Decoders reject any version but Version and VersionRaw with
// ReasonBadVersion.
const Version = 1

// VersionRaw is the wire-format version of a job whose data travels as raw
// bytes: the job's JSON value (an op's data given by its "data_len"), one
// newline, then each op's data in op order, concatenated. Encode writes it
// for every job that carries data, so that no byte of it is escaped or
// base64-encoded.
const VersionRaw = 2

// Limits that hold for every job, whatever the daemon's configuration.
const (
	// MaxJobBytes is the largest encoded job accepted by default (1 MiB,
	// the NATS default max payload). A daemon may allow more
	// (Limits.MaxJobBytes, up to MaxJobBytesLimit) and says so in its
	// discovery file.
	MaxJobBytes = 1 << 20
	// MaxJobBytesLimit is the most Limits.MaxJobBytes may be: JetStream
	// stores a message of at most 32 MiB, headers and framing included,
	// in a file stream; 64 KiB of that is left for them.
	MaxJobBytesLimit = 32<<20 - 64<<10
	// MaxOps is the largest number of ops in one job.
	MaxOps = 256
	// MaxIDLen is the longest job ID.
	MaxIDLen = 128
	// MaxPathLen is the longest op path.
	MaxPathLen = 1024
	// MaxArgs is the most arguments an exec op may pass.
	MaxArgs = 1024
	// MaxCoalesceLen is the longest coalescing key.
	MaxCoalesceLen = 128
)

// OpKind is what an op does to its file: its "op" field on the wire. Kinds
// are part of the wire format.
type OpKind string

// Op kinds.
const (
	OpPut    OpKind = "put"    // atomically replace the file with Data
	OpAppend OpKind = "append" // append exactly Data to the file, creating it
	OpMerge  OpKind = "merge"  // RFC 7386 JSON merge patch Data into a JSON object file
	OpDelete OpKind = "delete" // remove the file; deleting a missing file is a no-op
	OpExec   OpKind = "exec"   // run a command of the daemon's allowlist (docs/exec.md)
)

// IfAbsent is the IfMatch value that requires the file not to exist.
const IfAbsent = "absent"

// Op is one change to one file of a store, or one run of an allowlisted
// command (OpExec).
type Op struct {
	// Kind is one of OpPut, OpAppend, OpMerge, OpDelete, OpExec.
	Kind OpKind
	// Path is relative to the store root, slash-separated.
	Path string
	// Data is the content (put), the bytes to add (append) or the merge
	// patch (merge). Ignored by delete.
	Data []byte
	// IfMatch is an optional precondition evaluated before the op:
	// IfAbsent, or the content hash ("sha256:<hex>", see ContentHash) the
	// file must have.
	IfMatch string

	// Name, Args, Dir and Timeout are for OpExec only, whose job has no
	// other op. Name is the command's name on the daemon's allowlist;
	// Args are passed after the command's fixed arguments, as argv (never
	// through a shell), and must be ones the allowlist allows.
	Name string
	Args []string
	// Dir is the working directory, relative to the store, slash-separated;
	// empty means the one the allowlist gives the command.
	Dir string
	// Timeout shortens the command's timeout for this run; 0 means the
	// allowlist's. It may not exceed the allowlist's.
	Timeout time.Duration
}

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

// timeoutMS is an exec op's timeout as its timeout_ms, which the wire
// form and the digest both carry: whole milliseconds, at least 1 if it is
// positive. One the decoder read as 0 or less (kept negative, for
// Validate to reject) gives back the number it read.
func timeoutMS(d time.Duration) int64 {
	if d > 0 {
		return max(d.Milliseconds(), 1)
	}
	return d.Milliseconds()
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

// Job is a unit of work for one store: its ops are applied in order, all or
// nothing.
type Job struct {
	// V is the wire-format version; Encode sets it.
	V int `json:"v"`
	// ID is the idempotency key: a job ID is applied at most once per store.
	ID string `json:"id"`
	// Store is the store ID (see StoreID) the job is for; a client
	// fills it in.
	Store string `json:"store"`
	// Ops are applied in order, all or nothing.
	Ops []Op `json:"ops"`
	// Meta is free-form caller metadata, recorded with the outcome.
	Meta map[string]string `json:"meta,omitempty"`
	// Coalesce is an optional coalescing key, for exec jobs only: while a
	// job with this key waits in the queue, not yet started, later ones
	// that ask for exactly its run (the same command, arguments, dir and
	// timeout) and would be allowed alone join it instead of running
	// again, and all get its outcome (docs/exec.md). Others of the key are
	// decided in their own turn.
	Coalesce string `json:"coalesce,omitempty"`
	// Submitted is when the client built the job (informational).
	Submitted time.Time `json:"submitted,omitzero"`
	// Priority is the job's class in the queue (see Priority); it is not
	// part of the job's identity (Digest), so a retry under another
	// priority is the same job.
	Priority Priority `json:"priority,omitempty"`
}

// NewID returns a fresh job ID: a version 7 UUID (RFC 9562) as 32
// lower-case hex digits, the time it was made (to below the millisecond,
// increasing within a process) and then 62 random bits. IDs made about the
// same time sort together, so that the journal, which keys outcomes by ID,
// adds a batch's outcomes to a page or two instead of a page each.
func NewID() string {
	id := uuid.Must(uuid.NewV7()) // fails only if crypto/rand does, which it does not on supported platforms
	return hex.EncodeToString(id[:])
}

// ValidID reports whether id may be used as a job ID: 1 to MaxIDLen
// characters from [A-Za-z0-9_-], so that it is a single NATS subject token.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// IDProblem says why id may not be used as a job ID, for a message that
// names the rule; "" if it may (ValidID).
func IDProblem(id string) string {
	if ValidID(id) {
		return ""
	}
	return fmt.Sprintf("job id %q is not valid: want 1-%d characters of [A-Za-z0-9_-]", truncate(id, 80), MaxIDLen)
}

// Validate checks the job's shape: version, ID, store, op kinds, paths'
// basic form and limits. It does not look at the store's files; the writer
// checks what depends on them. The error is a *RejectError.
func (j *Job) Validate() error {
	if j.V != Version && j.V != VersionRaw {
		return Reject(ReasonBadVersion, "version %d, want %d or %d", j.V, Version, VersionRaw)
	}
	if !ValidID(j.ID) {
		return Reject(ReasonBadInput, "job id %q: want 1-%d characters of [A-Za-z0-9_-]", truncate(j.ID, 40), MaxIDLen)
	}
	if j.Store == "" {
		return Reject(ReasonBadInput, "job has no store")
	}
	if len(j.Ops) == 0 {
		return Reject(ReasonBadInput, "job has no ops")
	}
	if len(j.Ops) > MaxOps {
		return Reject(ReasonTooLarge, "job has %d ops, limit %d", len(j.Ops), MaxOps)
	}
	if j.Priority != PriorityNormal && j.Priority != PriorityHigh {
		return Reject(ReasonBadInput, "priority %q: want %q or none", truncate(string(j.Priority), 40), PriorityHigh)
	}
	if j.Coalesce != "" {
		if err := checkCoalesce(j.Coalesce); err != nil {
			return err
		}
	}
	for k, v := range j.Meta {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			// JSON would carry it as U+FFFD: not what was given.
			return Reject(ReasonBadInput, "meta %q: keys and values must be UTF-8 text", truncate(k, 40))
		}
	}
	for i, op := range j.Ops {
		switch op.Kind {
		case OpExec:
			if err := j.validateExec(i); err != nil {
				return err
			}
			continue
		case OpPut, OpAppend, OpMerge, OpDelete:
			if op.Name != "" || op.Args != nil || op.Dir != "" || op.Timeout != 0 {
				return Reject(ReasonBadInput, "op %d: name, args, dir and timeout_ms are for exec ops only", i)
			}
		case "":
			return Reject(ReasonBadInput, "op %d: missing op kind", i)
		default:
			return Reject(ReasonUnknownOp, "op %d: unknown op %q", i, truncate(string(op.Kind), 40))
		}
		if err := CheckPath(op.Path); err != nil {
			return Reject(ReasonPathEscapes, "op %d: %v", i, err)
		}
		if op.IfMatch != "" && op.IfMatch != IfAbsent && !validHash(op.IfMatch) {
			return Reject(ReasonBadInput, "op %d: if_match %q: want %q or sha256:<64 hex>", i, truncate(op.IfMatch, 80), IfAbsent)
		}
	}
	if j.Coalesce != "" && !j.IsExec() {
		return Reject(ReasonBadInput, "a coalescing key is for exec jobs only: a job that joins another does not run its own ops, and file ops are not interchangeable")
	}
	return nil
}

// validateExec checks exec op i: the job's only op, a command name, args
// that can be argv, a directory inside the store and a positive timeout.
func (j *Job) validateExec(i int) error {
	op := j.Ops[i]
	if len(j.Ops) != 1 {
		return Reject(ReasonBadInput, "op %d: an exec op must be its job's only op: a command's effects cannot be undone, so they cannot be all or nothing with other ops", i)
	}
	if !ValidCommandName(op.Name) {
		return Reject(ReasonBadInput, "op %d: exec command name %q: want 1-64 characters of [A-Za-z0-9_.-], starting with a letter or digit", i, truncate(op.Name, 40))
	}
	if op.Path != "" || op.Data != nil || op.IfMatch != "" {
		return Reject(ReasonBadInput, "op %d: an exec op takes no path, data or if_match", i)
	}
	if len(op.Args) > MaxArgs {
		return Reject(ReasonTooLarge, "op %d: %d arguments, limit %d", i, len(op.Args), MaxArgs)
	}
	for k, a := range op.Args {
		if !utf8.ValidString(a) || strings.IndexByte(a, 0) >= 0 {
			return Reject(ReasonBadInput, "op %d: argument %d is not UTF-8 text without NUL bytes", i, k)
		}
	}
	if op.Dir != "" {
		if err := CheckPath(op.Dir); err != nil {
			return Reject(ReasonPathEscapes, "op %d: dir: %v", i, err)
		}
	}
	if op.Timeout < 0 {
		return Reject(ReasonBadInput, "op %d: timeout_ms: want a positive number of milliseconds, or none for the command's own", i)
	}
	return nil
}

// ValidCommandName reports whether name may name an exec command: 1 to 64
// characters of [A-Za-z0-9_.-], starting with a letter or digit.
func ValidCommandName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// checkCoalesce checks a coalescing key: 1 to MaxCoalesceLen bytes of
// printable UTF-8, on an exec job.
func checkCoalesce(key string) error {
	if len(key) > MaxCoalesceLen || !utf8.ValidString(key) || strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return Reject(ReasonBadInput, "coalescing key %q: want 1-%d bytes of printable UTF-8", truncate(key, 40), MaxCoalesceLen)
	}
	return nil
}

// IsExec reports whether the job runs a command (its op is OpExec).
func (j *Job) IsExec() bool { return len(j.Ops) == 1 && j.Ops[0].Kind == OpExec }

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
		return nil, Reject(ReasonTooLarge, "job is %d bytes encoded, limit %d (1 MiB, unless the store's daemon takes more: serve --max-job-bytes)", len(b), limit)
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Digest identifies what a job asks for, apart from its ID, its store and
// when it was submitted: two jobs with one ID and the same digest are the
// same job (a retry); with different digests they are a conflict
// (ReasonIDConflict). It is "sha256:" and the lower-case hex SHA-256 of
// the netstrings ("<decimal length>:<bytes>,") of, in order, "scribe-job-1",
// "coalesce:" and the coalescing key if the job has one, each op's kind
// then, for file ops, its path, if_match and data, and for exec ops its
// name, dir, timeout in milliseconds (decimal) and args as a JSON array of
// strings, then each meta key and value in byte order of the keys
// (docs/protocol.md).
func (j *Job) Digest() string {
	h := sha256.New()
	ns := func(b []byte) {
		h.Write(strconv.AppendInt(nil, int64(len(b)), 10))
		h.Write([]byte{':'})
		h.Write(b)
		h.Write([]byte{','})
	}
	ns([]byte("scribe-job-1"))
	if j.Coalesce != "" {
		ns([]byte("coalesce:" + j.Coalesce))
	}
	for _, op := range j.Ops {
		ns([]byte(op.Kind))
		if op.Kind == OpExec {
			args := []byte("[]")
			if len(op.Args) > 0 {
				args, _ = json.Marshal(op.Args)
			}
			ns([]byte(op.Name))
			ns([]byte(op.Dir))
			ns(strconv.AppendInt(nil, timeoutMS(op.Timeout), 10))
			ns(args)
			continue
		}
		ns([]byte(op.Path))
		ns([]byte(op.IfMatch))
		ns(op.Data)
	}
	keys := make([]string, 0, len(j.Meta))
	for k := range j.Meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ns([]byte(k))
		ns([]byte(j.Meta[k]))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
