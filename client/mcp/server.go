package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// DefaultWait bounds a tool call by default: long enough for a job to
// wait its turn behind a busy daemon, short enough that an agent is not
// left hanging on a store that cannot be written.
const DefaultWait = 30 * time.Second

// Config is what the MCP server needs: the store and how its tools reach
// it. Only Store is required.
type Config struct {
	// Store is the store folder; it must exist.
	Store string
	// Route is how write tools reach the store, as scribe submit's
	// --route (default client.RoutePrefer).
	Route client.Route
	// LockFile is the store lock for direct writes ("": the one the
	// store's daemon takes, else ConfigLockFile, else
	// <store>/.scribe/lock).
	LockFile string
	// ConfigLockFile is the store's config file's lock_file, if any
	// (client.WithConfigLockFile).
	ConfigLockFile string
	// Wait bounds each tool call: finding (or starting) the daemon, the
	// job's wait for its outcome, and a direct write's wait for the lock
	// (default DefaultWait).
	Wait time.Duration
	// Autostart, if set, starts a daemon for a write that finds none
	// (not on the direct route).
	Autostart *client.Autostart
	// Version is the version the server tells hosts.
	Version string
	// Logger is the server's logger (default: discard); SDKLogger the
	// MCP SDK's (default: discard: it logs every session at info).
	Logger    *slog.Logger
	SDKLogger *slog.Logger
}

// Server is the MCP server of a store: its tools, ready to serve a host.
type Server struct {
	sdk   *sdk.Server
	log   *slog.Logger
	drain time.Duration // lineTransport.Drain
	// serving is Serve's context: the SDK does not end the calls in
	// progress with it, so each call's context ends with it too.
	serving atomic.Pointer[context.Context]
}

// Serve serves the protocol on r and w, newline-delimited JSON-RPC, until
// r ends (nil) or ctx does (its error). It never closes r or w, writes
// nothing but the protocol on w, and answers a malformed line itself
// instead of ending the session.
func (s *Server) Serve(ctx context.Context, r io.Reader, w io.Writer) error {
	s.serving.Store(&ctx)
	err := s.sdk.Run(ctx, &lineTransport{Reader: r, Writer: w, Log: s.log, Drain: s.drain})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, sdk.ErrConnectionClosed),
		errors.Is(err, syscall.EPIPE): // the host went away: nobody reads the answers
		return nil
	}
	return fmt.Errorf("mcp: %w", err)
}

// tools holds the tools' configuration; its methods are the tools.
type tools struct {
	cfg     Config
	storeID string
}

// Tool inputs. Each tool's input schema is derived from its struct
// (inputSchema: jsonschema tags are the descriptions, fields without
// omitempty are required, unknown fields are refused), and the SDK
// validates every call against it before the tool runs.
type (
	appendArgs struct {
		Path     string `json:"path" jsonschema:"file path relative to the store, /-separated; it may not leave the store nor name .scribe/"`
		Data     string `json:"data" jsonschema:"the text to append, exactly as given"`
		Newline  bool   `json:"newline,omitempty" jsonschema:"add a newline at the end if data does not end with one"`
		ID       string `json:"id,omitempty" jsonschema:"job ID, the idempotency key: a call repeated with the same id and arguments is applied once and returns the recorded outcome (default: a new random ID)"`
		Priority string `json:"priority,omitempty" jsonschema:"high: decided before the normal jobs queued ahead of it (a direct write ignores it); normal (the default)"`
	}
	putArgs struct {
		Path     string `json:"path" jsonschema:"file path relative to the store, /-separated; it may not leave the store nor name .scribe/"`
		Data     string `json:"data" jsonschema:"the file's new content"`
		IfMatch  string `json:"if_match,omitempty" jsonschema:"precondition: absent (the file must not exist), or sha256:<64 lower-case hex> of the file's current content; else the job is rejected precondition_failed"`
		ID       string `json:"id,omitempty" jsonschema:"job ID, the idempotency key: a call repeated with the same id and arguments is applied once and returns the recorded outcome (default: a new random ID)"`
		Priority string `json:"priority,omitempty" jsonschema:"high: decided before the normal jobs queued ahead of it (a direct write ignores it); normal (the default)"`
	}
	mergeArgs struct {
		Path string `json:"path" jsonschema:"path of a JSON object file relative to the store, /-separated; an absent file counts as {}"`
		// Patch's bytes are taken from the raw arguments (rawPatch), so
		// that key order and numbers reach the file as sent; this field
		// gives the schema and its validation.
		Patch    map[string]any `json:"patch" jsonschema:"RFC 7386 JSON merge patch: a member set to null is removed, an object is merged recursively, any other value replaces"`
		ID       string         `json:"id,omitempty" jsonschema:"job ID, the idempotency key: a call repeated with the same id and arguments is applied once and returns the recorded outcome (default: a new random ID)"`
		Priority string         `json:"priority,omitempty" jsonschema:"high: decided before the normal jobs queued ahead of it (a direct write ignores it); normal (the default)"`
	}
	deleteArgs struct {
		Path     string `json:"path" jsonschema:"file path relative to the store; a missing file is not an error, and folders are never removed"`
		ID       string `json:"id,omitempty" jsonschema:"job ID, the idempotency key: a call repeated with the same id and arguments is applied once and returns the recorded outcome (default: a new random ID)"`
		Priority string `json:"priority,omitempty" jsonschema:"high: decided before the normal jobs queued ahead of it (a direct write ignores it); normal (the default)"`
	}
	jobArgs struct {
		Ops      []jobOp `json:"ops" jsonschema:"1-256 ops, applied in order, all or nothing; an exec op must be the only one"`
		ID       string  `json:"id,omitempty" jsonschema:"job ID, the idempotency key: a call repeated with the same id and arguments is applied once and returns the recorded outcome (default: a new random ID)"`
		Priority string  `json:"priority,omitempty" jsonschema:"high: decided before the normal jobs queued ahead of it (a direct write ignores it); normal (the default)"`
	}
	// jobOp is an op in its wire form (docs/protocol.md); queue.Op
	// decodes it, by the protocol's rules.
	jobOp struct {
		Op        string   `json:"op" jsonschema:"put, append, merge, delete or exec"`
		Path      string   `json:"path,omitempty" jsonschema:"file ops: path relative to the store"`
		Data      *string  `json:"data,omitempty" jsonschema:"file ops: the bytes as text (for merge: the patch, a JSON object, as a string)"`
		DataB64   *string  `json:"data_b64,omitempty" jsonschema:"file ops: the bytes in standard base64, instead of data"`
		IfMatch   string   `json:"if_match,omitempty" jsonschema:"file ops: absent, or sha256:<64 lower-case hex> of the file's content"`
		Name      string   `json:"name,omitempty" jsonschema:"exec: the command's name on the daemon's allowlist"`
		Args      []string `json:"args,omitempty" jsonschema:"exec: arguments after the command's own, as argv"`
		Dir       string   `json:"dir,omitempty" jsonschema:"exec: working folder relative to the store"`
		TimeoutMS *int64   `json:"timeout_ms,omitempty" jsonschema:"exec: a shorter timeout for this run, in milliseconds"`
	}
	execArgs struct {
		Name     string   `json:"name" jsonschema:"the command's name on the daemon's allowlist ([exec.NAME] in <store>/.scribe/config.toml)"`
		Args     []string `json:"args,omitempty" jsonschema:"arguments passed after the command's fixed ones, as argv (never through a shell); the allowlist must allow them"`
		Coalesce string   `json:"coalesce,omitempty" jsonschema:"coalescing key: while a job with this key waits in the queue, not yet started, this one joins it and gets its outcome, if it asks for the same run: the same command, arguments, dir and timeout"`
		ID       string   `json:"id,omitempty" jsonschema:"job ID, the idempotency key: a call repeated with the same id and arguments runs once and returns the recorded outcome (default: a new random ID)"`
		Priority string   `json:"priority,omitempty" jsonschema:"high: decided before the normal jobs queued ahead of it (a direct write ignores it); normal (the default)"`
	}
	outcomeArgs struct {
		ID string `json:"id" jsonschema:"the job ID a write tool named"`
	}
	cancelArgs struct {
		ID string `json:"id" jsonschema:"the ID of the queued job to cancel, as a write tool named it"`
	}
	statusArgs struct{}
)

// statusResult is the status tool's answer.
type statusResult struct {
	Store     string `json:"store" jsonschema:"the store's real path"`
	StoreID   string `json:"store_id" jsonschema:"the store's ID"`
	Route     string `json:"route" jsonschema:"this server's route: prefer, require or direct"`
	Autostart bool   `json:"autostart" jsonschema:"whether a write that finds no daemon starts one"`
	Writes    string `json:"writes" jsonschema:"how the next write reaches the store: daemon (queued through it), direct (under the store lock, by this server), autostart (it starts a daemon first) or refused (no daemon, and the route or stranded jobs forbid a direct write)"`
	// Daemon is the daemon's own report, when one serves the store.
	Daemon *queue.StatusReport `json:"daemon,omitempty" jsonschema:"the daemon's status report, when one serves the store"`
	Holder *queue.Holder       `json:"holder,omitempty" jsonschema:"without a daemon: who holds the store lock, as its lock file says"`
	// Stranded says why jobs may wait in a queue no daemon serves.
	Stranded string `json:"stranded,omitempty" jsonschema:"without a daemon: why jobs may still wait in its queue"`
	Note     string `json:"note" jsonschema:"what this means for writes"`
}

// Output schemas, derived when an MCP server is built (New),
// not at start: inferring them takes about a millisecond, which every
// other command, a hook's submit first, would pay for nothing. Write tools
// answer with the job's outcome (queue.Outcome, as on the wire), the
// outcome tool with the journal's answer (queue.Lookup).
var (
	outcomeSchema = sync.OnceValue(mustSchema[queue.Outcome])
	lookupSchema  = sync.OnceValue(mustSchema[queue.Lookup])
	cancelSchema  = sync.OnceValue(mustSchema[queue.CancelAnswer])
	statusSchema  = sync.OnceValue(mustSchema[statusResult])
)

// mustSchema infers the JSON schema of T; it panics on a type the
// inference cannot describe, a programming error the tests catch.
func mustSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("schema: %v", err))
	}
	return s
}

// inputSchema is the input schema of a tool taking T, tightened where Go
// types say less than the protocol: a slice or pointer may be absent but
// not null, a job ID has its pattern, an op kind is one of five.
func inputSchema[T any]() *jsonschema.Schema {
	s := mustSchema[T]()
	var tighten func(s *jsonschema.Schema)
	tighten = func(s *jsonschema.Schema) {
		if len(s.Types) == 2 && s.Types[0] == "null" {
			s.Type, s.Types = s.Types[1], nil
		}
		if s.Items != nil {
			tighten(s.Items)
		}
		for name, p := range s.Properties {
			tighten(p)
			switch name {
			case "id":
				p.Pattern = fmt.Sprintf("^[A-Za-z0-9_-]{1,%d}$", queue.MaxIDLen)
			case "ops":
				p.MinItems, p.MaxItems = jsonschema.Ptr(1), jsonschema.Ptr(queue.MaxOps)
			case "op":
				p.Enum = []any{"put", "append", "merge", "delete", "exec"}
			case "if_match":
				// "" would pass as no precondition: a blind write.
				p.Pattern = "^(" + queue.IfAbsent + "|sha256:[0-9a-f]{64})$"
			case "priority":
				// "" would pass as no priority: normal, silently.
				p.Enum = []any{queue.PriorityHigh.String(), queue.PriorityNormal.String()}
			case "coalesce":
				// "" would pass as no key: a run of its own, silently.
				p.MinLength, p.MaxLength = jsonschema.Ptr(1), jsonschema.Ptr(queue.MaxCoalesceLen)
			}
		}
	}
	tighten(s)
	return s
}

// New builds the MCP server of a store: its tools and their schemas. It
// checks that the store is a folder whose .scribe only this user can
// change; it connects to nothing until a tool is called.
func New(cfg Config) (*Server, error) {
	real, err := queue.ResolveStore(cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", cfg.Store, err)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("store %s is not a folder", cfg.Store)
	}
	// Every tool reads or writes the store's .scribe: one that another
	// user could change stops the server now, rather than failing each
	// call after the host has started using it.
	if err := (queue.Layout{Root: real}).Check(); err != nil {
		return nil, err
	}
	cfg.Store = real
	if cfg.Route, err = client.ParseRoute(string(cfg.Route)); err != nil {
		return nil, err
	}
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	sdkLog := cfg.SDKLogger
	if sdkLog == nil {
		sdkLog = slog.New(slog.DiscardHandler)
	}
	m := &tools{cfg: cfg, storeID: queue.StoreID(real)}
	s := sdk.NewServer(&sdk.Implementation{Name: "scribe", Title: "scribe", Version: cfg.Version}, &sdk.ServerOptions{
		Logger: sdkLog,
		// The tools are fixed, and the server sends no log messages: it
		// offers tools, without list-changed notifications, and nothing else.
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{}},
		Instructions: "scribe serializes the writes to the files of the store " + real + ": each write tool hands a job " +
			"to the store's one writer and returns its outcome (applied, or rejected with a reason; a rejected job changes " +
			"nothing). Paths are relative to the store. If a result says the outcome is unknown, look the job up with the " +
			"outcome tool or call the same tool again with the same arguments and id: it is applied at most once. " +
			"Never redo such a write another way.",
	})
	no := new(bool)
	// write is a write tool. Every one is idempotent given an id; those
	// marked idempotent are so without one too (a repeated put, merge or
	// delete leaves the file as the first did), while a repeated append,
	// job or exec without an id is a second job.
	write := func(name, title, desc string, destructive, idempotent bool, input *jsonschema.Schema) *sdk.Tool {
		return &sdk.Tool{
			Name: name, Title: title, Description: desc, InputSchema: input, OutputSchema: outcomeSchema(),
			Annotations: &sdk.ToolAnnotations{Title: title, DestructiveHint: &destructive, IdempotentHint: idempotent, OpenWorldHint: no},
		}
	}
	const answer = " Returns the job's outcome: applied, or rejected with a reason code (isError; the job changed nothing)."
	sdk.AddTool(s, write("append", "Append to a file",
		"Append text to a file of the store, creating it (and its folders) if absent. The text goes after whatever the file holds, exactly once."+answer, false, false, inputSchema[appendArgs]()), m.append)
	sdk.AddTool(s, write("put", "Replace a file",
		"Replace a file's whole content atomically, creating it (and its folders) if absent. if_match makes it conditional: absent (create only) or the sha256 of the content you read (compare-and-swap)."+answer, true, true, inputSchema[putArgs]()), m.put)
	sdk.AddTool(s, write("merge", "Merge into a JSON file",
		"Merge a JSON object into a JSON object file (RFC 7386 merge patch): null removes a member, objects merge recursively, other values replace; an absent file counts as {}. Members keep their order; new ones follow in the patch's order."+answer, true, true, inputSchema[mergeArgs]()), m.merge)
	sdk.AddTool(s, write("delete", "Delete a file",
		"Delete a file of the store. A missing file is not an error; folders are never removed."+answer, true, true, inputSchema[deleteArgs]()), m.delete)
	sdk.AddTool(s, write("job", "Apply several ops at once",
		"Apply several ops (put, append, merge, delete) as one job: in order, all or nothing. Ops are in scribe's wire form: data is text (for merge, the patch as a JSON string), data_b64 for bytes that are not text."+answer, true, false, inputSchema[jobArgs]()), m.job)
	sdk.AddTool(s, write("exec", "Run an allowlisted command",
		"Run a command of the store daemon's allowlist in the store's turn, with the store lock held, and wait for it. Needs the store's daemon (running, or started by this server's autostart); without one the call fails and nothing runs. Applied means the command exited 0; the outcome's exec member holds its exit code and output."+answer, true, false, inputSchema[execArgs]()), m.exec)
	sdk.AddTool(s, &sdk.Tool{
		Name: "outcome", Title: "Look up a job's outcome", InputSchema: inputSchema[outcomeArgs](), OutputSchema: lookupSchema(),
		Description: "Look up a job's recorded outcome by its ID, in the store's journal. found false means no outcome is recorded: the job is still queued, or was never received (for example refused before it reached the store).",
		Annotations: &sdk.ToolAnnotations{Title: "Look up a job's outcome", ReadOnlyHint: true, OpenWorldHint: no},
	}, m.outcome)
	sdk.AddTool(s, &sdk.Tool{
		Name: "status", Title: "Store status", InputSchema: inputSchema[statusArgs](), OutputSchema: statusSchema(),
		Description: "Show how writes reach the store: the daemon's status report when one serves it (queue length, counts, the lock holder, what the writer waits for), or, without one, what a write will do (write directly under the store lock, start a daemon, or be refused).",
		Annotations: &sdk.ToolAnnotations{Title: "Store status", ReadOnlyHint: true, OpenWorldHint: no},
	}, m.status)
	yes := true
	sdk.AddTool(s, &sdk.Tool{
		Name: "cancel", Title: "Cancel a queued job", InputSchema: inputSchema[cancelArgs](), OutputSchema: cancelSchema(),
		Description: "Cancel a job still waiting in the daemon's queue: it is recorded rejected (reason cancelled) and never applied. Too late once the job was decided or the writer has it in hand; cancelling again gives the same answer. Needs the store's daemon.",
		Annotations: &sdk.ToolAnnotations{Title: "Cancel a queued job", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: no},
	}, m.cancel)
	// A call takes up to Wait; its answer, a moment more.
	srv := &Server{sdk: s, log: cfg.Logger, drain: cfg.Wait + 5*time.Second}
	s.AddReceivingMiddleware(srv.endWithServe)
	return srv, nil
}

// endWithServe ends each call's context when Serve's ends (SIGINT,
// SIGTERM): a call waiting for a daemon that does not answer would hold
// the server for the rest of its --wait.
func (s *Server) endWithServe(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if serving := s.serving.Load(); serving != nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(*serving, cancel)()
		}
		return next(ctx, method, req)
	}
}

func (m *tools) append(ctx context.Context, _ *sdk.CallToolRequest, in appendArgs) (*sdk.CallToolResult, any, error) {
	data := in.Data
	if in.Newline && !strings.HasSuffix(data, "\n") {
		data += "\n"
	}
	return m.write(ctx, "append", in.Priority, &queue.Job{ID: in.ID, Ops: []queue.Op{{Kind: queue.OpAppend, Path: in.Path, Data: []byte(data)}}}), nil, nil
}

func (m *tools) put(ctx context.Context, _ *sdk.CallToolRequest, in putArgs) (*sdk.CallToolResult, any, error) {
	return m.write(ctx, "put", in.Priority, &queue.Job{ID: in.ID, Ops: []queue.Op{{Kind: queue.OpPut, Path: in.Path, Data: []byte(in.Data), IfMatch: in.IfMatch}}}), nil, nil
}

func (m *tools) merge(ctx context.Context, req *sdk.CallToolRequest, in mergeArgs) (*sdk.CallToolResult, any, error) {
	patch, err := rawPatch(req)
	if err != nil {
		return nil, nil, err
	}
	return m.write(ctx, "merge", in.Priority, &queue.Job{ID: in.ID, Ops: []queue.Op{{Kind: queue.OpMerge, Path: in.Path, Data: patch}}}), nil, nil
}

// rawPatch is the merge tool's patch as the host sent it, compacted. The
// SDK hands the typed handler arguments it decoded into maps and encoded
// again, which sorts keys and rounds numbers through float64; the merge
// promises the patch's key order and numbers as written. The whitespace
// between its tokens is dropped, since it is part of the job's digest: a
// host that sends the same arguments again, spaced another way, repeats
// the call rather than conflicting with it.
func rawPatch(req *sdk.CallToolRequest) ([]byte, error) {
	var raw struct {
		Patch json.RawMessage `json:"patch"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &raw); err != nil {
		return nil, fmt.Errorf("read the patch: %w", err)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw.Patch); err != nil {
		return nil, fmt.Errorf("read the patch: %w", err)
	}
	return b.Bytes(), nil
}

func (m *tools) delete(ctx context.Context, _ *sdk.CallToolRequest, in deleteArgs) (*sdk.CallToolResult, any, error) {
	return m.write(ctx, "delete", in.Priority, &queue.Job{ID: in.ID, Ops: []queue.Op{{Kind: queue.OpDelete, Path: in.Path}}}), nil, nil
}

func (m *tools) job(ctx context.Context, _ *sdk.CallToolRequest, in jobArgs) (*sdk.CallToolResult, any, error) {
	job := named(&queue.Job{ID: in.ID})
	for i, wop := range in.Ops {
		// Through the wire form, so that data, data_b64 and timeout_ms
		// mean exactly what they mean in a job file.
		b, err := json.Marshal(wop)
		if err == nil {
			var op queue.Op
			if err = json.Unmarshal(b, &op); err == nil {
				job.Ops = append(job.Ops, op)
				continue
			}
		}
		return m.refused(job, queue.Reject(queue.ReasonBadInput, "op %d: %v", i, err)), nil, nil
	}
	return m.write(ctx, "job", in.Priority, job), nil, nil
}

func (m *tools) exec(ctx context.Context, _ *sdk.CallToolRequest, in execArgs) (*sdk.CallToolResult, any, error) {
	op := queue.Op{Kind: queue.OpExec, Name: in.Name}
	if len(in.Args) > 0 {
		op.Args = in.Args
	}
	return m.write(ctx, "exec", in.Priority, &queue.Job{ID: in.ID, Coalesce: in.Coalesce, Ops: []queue.Op{op}}), nil, nil
}

// open opens a client for one call. The route is found afresh for each
// call, as each `scribe submit` finds it, so that a daemon started or
// gone since the last call is seen. Look-ups take the prefer route
// without autostart, as `scribe status` does: the journal answers them
// with or without a daemon.
func (m *tools) open(ctx context.Context, write bool) (*client.Client, error) {
	opts := []client.Option{client.WithLockFile(m.cfg.LockFile), client.WithConfigLockFile(m.cfg.ConfigLockFile), client.WithLogger(m.cfg.Logger)}
	if write {
		opts = append(opts, client.WithRoute(m.cfg.Route), client.WithWait(m.cfg.Wait))
		if m.cfg.Autostart != nil && m.cfg.Route != client.RouteDirect {
			opts = append(opts, client.WithAutostart(*m.cfg.Autostart))
		}
	}
	return client.Open(ctx, m.cfg.Store, opts...)
}

// write applies a job and answers with its outcome. It never redoes a
// job another way: an outcome it cannot learn is reported unknown, with
// the ID to look up or call again with.
func (m *tools) write(ctx context.Context, tool, priority string, job *queue.Job) *sdk.CallToolResult {
	given := job.ID != "" // the host's: an earlier call may have sent it
	named(job)
	p, err := queue.ParsePriority(priority)
	if err != nil {
		return m.refused(job, queue.Reject(queue.ReasonBadInput, "%v", err))
	}
	job.Priority = p
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Wait)
	defer cancel()
	log := m.cfg.Logger.With("tool", tool, "id", job.ID)
	cl, err := m.open(ctx, true)
	if err != nil {
		log.Warn("not written", "err", err)
		return m.notWritten(tool, job, given, err)
	}
	defer cl.Close()
	out, err := cl.Apply(ctx, job)
	var rej *queue.RejectError
	switch {
	case err == nil:
		log.Debug("outcome", "status", out.Status, "reason", out.Reason, "mode", out.Mode)
		return outcomeResult(out)
	case errors.As(err, &rej):
		// Refused by validation, before it was sent: nothing recorded.
		log.Debug("refused", "reason", rej.Reason, "detail", rej.Detail)
		return m.refused(job, rej)
	case errors.Is(err, client.ErrBusy), errors.Is(err, client.ErrQueueFull),
		errors.Is(err, client.ErrExecNeedsDaemon), errors.Is(err, client.ErrStranded):
		log.Warn("not written", "err", err)
		return m.notWritten(tool, job, given, err)
	}
	// Handed over, fate unknown: the wait ran out, the daemon went away,
	// the connection broke. The job may still be applied, once.
	log.Warn("outcome unknown", "err", err)
	return errorResult(fmt.Sprintf("outcome unknown for job %s (%v). It may still be applied, at most once. "+
		"Look it up with the outcome tool (id %q), or call %s again with the same arguments and id %q, which "+
		"applies it at most once; do not redo the write another way (another tool, or another id).",
		job.ID, err, job.ID, tool, job.ID))
}

// named gives job an ID if it has none: known before anything is sent,
// to name the job in every answer, a refusal's included.
func named(job *queue.Job) *queue.Job {
	if job.ID == "" {
		job.ID = queue.NewID()
	}
	return job
}

// refused answers for a job refused before it reached the store, as
// malformed: a rejection like any other, except that it is not recorded
// (the outcome tool does not find it) and has no epoch or mode.
func (m *tools) refused(job *queue.Job, rej *queue.RejectError) *sdk.CallToolResult {
	out := &queue.Outcome{
		V: queue.Version, ID: job.ID, Status: queue.StatusRejected, Reason: rej.Reason, Detail: rej.Detail,
		At: time.Now().UTC(),
	}
	res := outcomeResult(out)
	res.Content[0] = &sdk.TextContent{Text: fmt.Sprintf("job %s rejected (%s): %s. It was refused before it reached the store: nothing was written, and no outcome is recorded.", job.ID, rej.Reason, rej.Detail)}
	return res
}

// notWritten answers for a job this call did not hand over (no daemon,
// none reachable, a busy store, a full queue). Under an ID of its own
// making it certainly was not applied. Under the host's id (given), an
// earlier call with that id may have handed it over, and that copy may
// still be applied: the answer says so, and to call again with that id,
// never to redo the write another way.
func (m *tools) notWritten(tool string, job *queue.Job, given bool, err error) *sdk.CallToolResult {
	var hint string
	switch {
	case errors.Is(err, client.ErrBusy):
		hint = "another writer holds the store lock (named above); call again later"
	case errors.Is(err, client.ErrQueueFull):
		hint = "the daemon's queue is full; call again later"
	case errors.Is(err, client.ErrExecNeedsDaemon) && m.cfg.Route == client.RouteDirect:
		hint = "exec jobs run only in the store's daemon, and this server's --route direct never uses it"
	case errors.Is(err, client.ErrExecNeedsDaemon), errors.Is(err, client.ErrNoDaemon):
		hint = fmt.Sprintf("start the daemon (scribe serve --store %s), or run scribe mcp with --autostart (or autostart = true in the store's .scribe/config.toml)", m.cfg.Store)
	case errors.Is(err, client.ErrStranded):
		hint = fmt.Sprintf("start the daemon (scribe serve --store %s) to apply them, or run scribe mcp with --autostart", m.cfg.Store)
	case errors.Is(err, client.ErrUnavailable):
		hint = fmt.Sprintf("see %s; call again later", queue.Layout{Root: m.cfg.Store}.DaemonLog())
	case errors.Is(err, context.DeadlineExceeded):
		hint = fmt.Sprintf("the store could not be reached within %s; call again later", m.cfg.Wait)
	default:
		hint = "call again once that is fixed"
	}
	if given {
		return errorResult(fmt.Sprintf("not written by this call: job %s was not handed over: %v; %s. An earlier call with id %q "+
			"may still be applied, at most once: look it up with the outcome tool, or call %s again with the same arguments "+
			"and id %q; do not redo the write another way (another tool, or another id).", job.ID, err, hint, job.ID, tool, job.ID))
	}
	return errorResult(fmt.Sprintf("not written: job %s was not applied: %v; %s.", job.ID, err, hint))
}

// outcomeResult is a write tool's answer for a decided job: a short text,
// and the outcome as structured content (and, for hosts that read only
// text, as JSON text). A rejected job is a tool error.
func outcomeResult(out *queue.Outcome) *sdk.CallToolResult {
	text := fmt.Sprintf("applied job %s (by %s, epoch %d)", out.ID, out.Mode, out.Epoch)
	if !out.Applied() {
		text = fmt.Sprintf("job %s rejected (%s): %s", out.ID, out.Reason, out.Detail)
	}
	if out.CoalescedInto != "" {
		text += fmt.Sprintf("; it joined the run of job %s", out.CoalescedInto)
	}
	res := structuredResult(text, out)
	res.IsError = !out.Applied()
	return res
}

// structuredResult is a result of text, v as structured content, and v
// as JSON text: the spec's fallback for hosts that do not read structured
// content.
func structuredResult(text string, v any) *sdk.CallToolResult {
	b, err := json.Marshal(v)
	if err != nil { // the types are ours and marshal; but say so rather than panic
		return errorResult(fmt.Sprintf("%s (the structured result could not be encoded: %v)", text, err))
	}
	return &sdk.CallToolResult{
		Content:           []sdk.Content{&sdk.TextContent{Text: text}, &sdk.TextContent{Text: string(b)}},
		StructuredContent: json.RawMessage(b),
	}
}

// errorResult is a tool error with text only.
func errorResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, IsError: true}
}

func (m *tools) outcome(ctx context.Context, _ *sdk.CallToolRequest, in outcomeArgs) (*sdk.CallToolResult, any, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Wait)
	defer cancel()
	cl, err := m.open(ctx, false)
	if err != nil {
		return nil, nil, fmt.Errorf("look up job %s: %w", in.ID, err)
	}
	defer cl.Close()
	l, err := cl.Status(ctx, in.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("look up job %s: %w", in.ID, err)
	}
	var text string
	switch o := l.Outcome; {
	case l.Found && o != nil && o.Applied():
		text = fmt.Sprintf("job %s: applied (by %s, epoch %d, at %s)", o.ID, o.Mode, o.Epoch, o.At.Format(time.RFC3339Nano))
	case l.Found && o != nil:
		text = fmt.Sprintf("job %s: rejected (%s): %s", o.ID, o.Reason, o.Detail)
	case !l.PrunedBefore.IsZero():
		text = fmt.Sprintf("job %s: no outcome recorded: still queued, never received, or recorded before %s and pruned", in.ID, l.PrunedBefore.Format(time.RFC3339))
	default:
		text = fmt.Sprintf("job %s: no outcome recorded: still queued, or never received", in.ID)
	}
	return structuredResult(text, l), nil, nil
}

func (m *tools) status(ctx context.Context, _ *sdk.CallToolRequest, _ statusArgs) (*sdk.CallToolResult, any, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Wait)
	defer cancel()
	cl, err := m.open(ctx, false)
	if err != nil {
		return nil, nil, fmt.Errorf("status of %s: %w", m.cfg.Store, err)
	}
	defer cl.Close()
	ss, err := cl.StoreStatus(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("status of %s: %w", m.cfg.Store, err)
	}
	st := statusResult{Store: m.cfg.Store, StoreID: m.storeID, Route: string(m.cfg.Route), Autostart: m.cfg.Autostart != nil, Daemon: ss.Report}
	if ss.Report == nil {
		st.Holder = ss.Holder
		if ss.Stranded != nil {
			st.Stranded = *ss.Stranded
		}
	}
	st.Writes, st.Note = m.writesVia(st.Daemon != nil, st.Stranded != "")
	text := fmt.Sprintf("store %s: %s", st.Store, st.Note)
	if r := st.Daemon; r != nil {
		text = fmt.Sprintf("store %s: daemon pid %d, version %s; queued %d, applied %d, rejected %d since start. %s",
			st.Store, r.PID, r.Version, r.Queued, r.Applied, r.Rejected, st.Note)
	}
	return structuredResult(text, st), nil, nil
}

// writesVia says how the next write reaches the store, given whether a
// daemon serves it and whether jobs may be stranded in its queue.
func (m *tools) writesVia(daemon, stranded bool) (writes, note string) {
	direct := fmt.Sprintf("write tools write directly, under the store lock: one at a time with any other writer, waiting up to %s for the lock; exec jobs fail, as they run only in a daemon", m.cfg.Wait)
	switch {
	case m.cfg.Route == client.RouteDirect:
		return "direct", "route direct: " + direct
	case daemon:
		return "daemon", "write tools queue their jobs through the store's daemon, which applies them in order"
	case m.cfg.Autostart != nil:
		return "autostart", "no daemon serves the store; the next write starts one (detached, exiting once idle) and queues through it"
	case m.cfg.Route == client.RouteRequire:
		return "refused", "no daemon serves the store, and route require writes only through one: writes fail until a daemon runs"
	case stranded:
		return "refused", "no daemon serves the store, but a stopped one may have left jobs in its queue: writes fail rather than overtake them until a daemon applies them (scribe serve), or with autostart"
	}
	return "direct", "no daemon serves the store: " + direct
}
