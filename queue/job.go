package queue

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
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
