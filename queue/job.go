package queue

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"
)

// Version is the wire-format version of jobs and outcomes. Decoders reject
// any other version with ReasonBadVersion.
const Version = 1

// Limits that hold for every job, whatever the daemon's configuration.
const (
	// MaxJobBytes is the largest encoded job accepted (1 MiB, the NATS
	// default max payload).
	MaxJobBytes = 1 << 20
	// MaxOps is the largest number of ops in one job.
	MaxOps = 256
	// MaxIDLen is the longest job ID.
	MaxIDLen = 128
	// MaxPathLen is the longest op path.
	MaxPathLen = 1024
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
)

// IfAbsent is the IfMatch value that requires the file not to exist.
const IfAbsent = "absent"

// Op is one change to one file of a store.
type Op struct {
	// Kind is one of OpPut, OpAppend, OpMerge, OpDelete.
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
}

// wireOp is Op as JSON. Data travels as "data" (a UTF-8 string) when it is
// valid UTF-8 and as "data_b64" (standard base64) otherwise, so that job
// files stay readable by people and any bytes can still be sent.
type wireOp struct {
	Op      OpKind  `json:"op"`
	Path    string  `json:"path"`
	Data    *string `json:"data,omitempty"`
	DataB64 *string `json:"data_b64,omitempty"`
	IfMatch string  `json:"if_match,omitempty"`
}

// MarshalJSON encodes the op in its wire form.
func (o Op) MarshalJSON() ([]byte, error) {
	w := wireOp{Op: o.Kind, Path: o.Path, IfMatch: o.IfMatch}
	if o.Data != nil {
		if utf8.Valid(o.Data) {
			s := string(o.Data)
			w.Data = &s
		} else {
			s := base64.StdEncoding.EncodeToString(o.Data)
			w.DataB64 = &s
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes the op's wire form.
func (o *Op) UnmarshalJSON(b []byte) error {
	var w wireOp
	if err := strictUnmarshal(b, &w); err != nil {
		return err
	}
	*o = Op{Kind: w.Op, Path: w.Path, IfMatch: w.IfMatch}
	switch {
	case w.Data != nil && w.DataB64 != nil:
		return fmt.Errorf("op has both data and data_b64")
	case w.Data != nil:
		o.Data = []byte(*w.Data)
	case w.DataB64 != nil:
		d, err := base64.StdEncoding.DecodeString(*w.DataB64)
		if err != nil {
			return fmt.Errorf("op data_b64: %w", err)
		}
		o.Data = d
	}
	return nil
}

// Job is a unit of work for one store: its ops are applied in order, all or
// nothing.
type Job struct {
	// V is the wire-format version; Encode sets it.
	V int `json:"v"`
	// ID is the idempotency key: a job ID is applied at most once per store.
	ID string `json:"id"`
	// Store is the store ID (see StoreID) the job is for.
	Store string `json:"store"`
	// Ops are applied in order, all or nothing.
	Ops []Op `json:"ops"`
	// Meta is free-form caller metadata, recorded with the outcome.
	Meta map[string]string `json:"meta,omitempty"`
	// Submitted is when the client built the job (informational).
	Submitted time.Time `json:"submitted,omitzero"`
}

// NewID returns a fresh random job ID.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
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

// Validate checks the job's shape: version, ID, store, op kinds, paths'
// basic form and limits. It does not look at the store's files; the writer
// checks what depends on them. The error is a *RejectError.
func (j *Job) Validate() error {
	if j.V != Version {
		return Reject(ReasonBadVersion, "version %d, want %d", j.V, Version)
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
	for i, op := range j.Ops {
		switch op.Kind {
		case OpPut, OpAppend, OpMerge, OpDelete:
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
	return nil
}

// Encode validates the job, sets its version if unset, and returns its
// wire form.
func Encode(j *Job) ([]byte, error) {
	if j.V == 0 {
		j.V = Version
	}
	if err := j.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxJobBytes {
		return nil, Reject(ReasonTooLarge, "job is %d bytes encoded, limit %d", len(b), MaxJobBytes)
	}
	return b, nil
}

// Decode parses and validates a job's wire form. On error the returned job
// still carries whatever ID could be read (empty if none), so that the
// rejection can be recorded under it; the error is a *RejectError.
func Decode(b []byte) (*Job, error) {
	if len(b) > MaxJobBytes {
		return &Job{ID: salvageID(b)}, Reject(ReasonTooLarge, "job is %d bytes, limit %d", len(b), MaxJobBytes)
	}
	var j Job
	if err := strictUnmarshal(b, &j); err != nil {
		// Salvage the ID, if any, so the caller can still hear why.
		id := salvageID(b)
		return &Job{ID: id}, Reject(ReasonBadInput, "job is not valid JSON: %v", err)
	}
	if err := j.Validate(); err != nil {
		if !ValidID(j.ID) {
			j.ID = ""
		}
		return &j, err
	}
	return &j, nil
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
// garbled job can get a recorded rejection. It returns "" if none is valid.
func salvageID(b []byte) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	depth := 1
	expectKey := true
	for depth > 0 {
		t, err := dec.Token()
		if err != nil {
			return ""
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
			if depth == 1 && expectKey && v == "id" {
				t, err := dec.Token()
				if id, ok := t.(string); err == nil && ok && ValidID(id) {
					return id
				}
				return ""
			}
		}
		if depth == 1 {
			expectKey = !expectKey
		}
	}
	return ""
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
// each op's kind, path, if_match and data, then each meta key and value in
// byte order of the keys (docs/protocol.md).
func (j *Job) Digest() string {
	h := sha256.New()
	ns := func(b []byte) {
		h.Write(strconv.AppendInt(nil, int64(len(b)), 10))
		h.Write([]byte{':'})
		h.Write(b)
		h.Write([]byte{','})
	}
	ns([]byte("scribe-job-1"))
	for _, op := range j.Ops {
		ns([]byte(op.Kind))
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
