package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/daemon"
	"github.com/scribehq/scribe/writer/lock"
)

// queueTimeout bounds a submit without --wait: finding the daemon and
// queueing the job.
const queueTimeout = 30 * time.Second

// SubmitCommand queues a job (or, without a daemon, applies it directly).
type SubmitCommand struct{ *Main }

// waitFlag is --wait, of submit and lock alike: a bool flag ("wait,
// however long") that also takes a bound, as --wait=10s or, through
// parseWait, --wait 10s.
type waitFlag struct {
	on bool
	d  time.Duration
}

func (w *waitFlag) IsBoolFlag() bool { return true }
func (w *waitFlag) String() string {
	if w == nil || !w.on {
		return "false"
	}
	if w.d == 0 {
		return "true"
	}
	return w.d.String()
}
func (w *waitFlag) Set(s string) error {
	if b, err := strconv.ParseBool(s); err == nil {
		w.on, w.d = b, 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("want true, false or a positive duration")
	}
	w.on, w.d = true, d
	return nil
}

// parseWait is parseStrict for a command with a --wait waitFlag: a
// positive duration right after a bare --wait is its bound ("--wait 10s"
// is "--wait=10s"), and flags after it are parsed too. No OP and no
// sensible lock command reads as a duration; "lock --wait -- 10s" runs a
// command named 10s.
func parseWait(fs *flag.FlagSet, args []string, w *waitFlag) error {
	for {
		rest, err := parseOnce(fs, args)
		if err != nil {
			return err
		}
		n := len(args) - len(rest)
		if n == 0 || len(rest) == 0 || (args[n-1] != "--wait" && args[n-1] != "-wait") {
			return nil
		}
		d, err := time.ParseDuration(rest[0])
		if err != nil {
			return nil // not a duration: the first argument
		}
		if d <= 0 {
			return usageError("--wait %s: want a positive duration", rest[0])
		}
		w.on, w.d = true, d
		args = rest[1:]
	}
}

// waitUsage is the --wait flag's help, the same for submit and lock.
const waitUsage = "; --wait=DUR, or --wait DUR, bounds the wait (exit 75 when it runs out)"

// Run parses flags, builds the job and submits it.
func (c *SubmitCommand) Run(ctx context.Context, args []string) error {
	fs := c.newFlagSet("submit", "--store DIR [flags] OP PATH [DATA|-]\n"+
		"       scribe submit --store DIR [flags] --job FILE\n"+
		"       scribe submit --store DIR [flags] exec NAME [ARGS...]\n\n"+
		"OP is put, append, merge or delete (no DATA); PATH is relative to the store (a leading\n"+
		"./ is dropped). DATA is taken verbatim: no newline is added, unless --newline. With - it\n"+
		"is read from stdin. Without DATA it is read from stdin too, but only when stdin is not a\n"+
		"terminal (a pipe, a file); on a terminal that is a usage error: give DATA, or -. Hooks\n"+
		"should always pass DATA or -: their stdin is the caller's event.\n"+
		"A job is at most 1 MiB (1048576 bytes) encoded, DATA included; a larger one is rejected\n"+
		"too_large (exit 1).\n"+
		"Flags go before OP: DATA may start with -. A duration right after a bare --wait is its\n"+
		"bound: --wait 10s is --wait=10s.\n"+
		"exec runs the command NAME of the daemon's allowlist with ARGS, passed as they are (even\n"+
		"those starting with -); it needs a daemon (or --autostart). With --wait and without --json,\n"+
		"the command's output is printed as its own: stdout on stdout, stderr on stderr.\n"+
		"Interrupted (Ctrl-C) after the job was sent, it exits 130 naming the job: it may still be\n"+
		"applied (scribe status ID).\n"+remoteUsage)
	store := storeFlag(fs)
	var nf natsFlags
	nf.register(fs)
	var wait waitFlag
	fs.Var(&wait, "wait", "wait for the outcome, without bound (a direct write still fails at once on a busy lock: give --wait=DUR to wait for it)"+waitUsage)
	newline := fs.Bool("newline", false, "end DATA with a newline: add \"\\n\" unless it ends with one (put, append, merge)")
	id := fs.String("id", "", "job `ID`: 1-128 characters of [A-Za-z0-9_-], the idempotency key, protecting against a repeat while its outcome is kept (serve --retention); the same ID for a different job is rejected id_conflict (default: a new random one)")
	jobFile := fs.String("job", "", "read a multi-op job from `FILE` (- for stdin)")
	ifMatch := fs.String("if-match", "", "precondition: `absent`, or sha256:<lower-case hex> of the file's content (not with --job: put if_match in the job file)")
	coalesce := fs.String("coalesce", "", "exec jobs only: coalescing `key`; while a job with this key waits in the queue, not yet started, this one joins it and gets its outcome if it asks for the same run (command, arguments, dir, timeout)")
	asJSON := fs.Bool("json", false, "print the outcome (or the queued job ID) as JSON")
	route := fs.String("route", os.Getenv("SCRIBE_ROUTE"), "`prefer` (daemon if any, else direct), require (daemon only) or direct (default $SCRIBE_ROUTE, else prefer)")
	lockFile := fs.String("lock-file", "", "store lock `file` for direct writes (default: the one a running daemon takes, else <store>/.scribe/lock)")
	autostart := fs.Bool("autostart", envBool("SCRIBE_AUTOSTART"), "when no daemon serves the store, start one (detached, logging to <store>/.scribe/daemon.log) and submit through it (default $SCRIBE_AUTOSTART, else autostart in <store>/.scribe/config.toml)")
	exitIdle := fs.Duration("exit-idle", envDuration("SCRIBE_EXIT_IDLE", client.DefaultExitIdle), "with --autostart: the started daemon exits once idle this `long` (default $SCRIBE_EXIT_IDLE, else exit_idle in <store>/.scribe/config.toml, else 5m)")
	if err := parseWait(fs, args, &wait); err != nil {
		return err
	}
	if *exitIdle <= 0 {
		return usageError("--exit-idle %s: want a positive duration", *exitIdle)
	}
	r, err := client.ParseRoute(*route)
	if err != nil {
		return usageError("%v", err)
	}
	if r == client.RouteDirect && !given(fs, "nats-url") {
		// A direct write asked for (a `scribe lock` child's) writes the
		// folder here, whatever queue the environment names.
		nf.URL = ""
	}
	t, err := nf.resolve(*store)
	if err != nil {
		return err
	}
	if err := checkLockFileFolder(*lockFile); err != nil {
		return err
	}
	if err := t.checkRemoteRoute(fs, r, *autostart); err != nil {
		return err
	}
	jf := jobFlags{file: *jobFile, ifMatch: *ifMatch, coalesce: *coalesce, newline: *newline}
	job, err := c.buildJob(fs.Args(), jf)
	if err != nil {
		return err
	}
	if *id != "" {
		job.ID = *id
	}
	switch {
	case t.remote != nil: // a remote queue's daemon is its operator's to start
		*autostart = false
	case r != client.RouteDirect: // the direct route starts no daemon
		if *autostart, *exitIdle, err = c.autostartSettings(fs, *store, *autostart, *exitIdle); err != nil {
			return err
		}
	}

	// Bound the command: by --wait=DUR, or, without --wait, by
	// queueTimeout (a hook must not hang on a daemon that went away).
	// Plain --wait waits for the outcome however long it takes. sig is
	// only ever ended by a signal: then the job's fate is told apart
	// from a wait that ran out.
	sig := ctx
	bound := queueTimeout
	if wait.on {
		bound = wait.d
	}
	if bound > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	// The lock file shows a direct writer's command to those it makes
	// wait: the op and path, never the data (which may be long, private,
	// or hold newlines).
	opts := []client.Option{client.WithRoute(r), client.WithLockFile(*lockFile), client.WithCommand(describeJob(fs.Args(), *jobFile))}
	// A direct write waits for the lock only within a bound (DESIGN:
	// waiting is opt-in and bounded): plain --wait stays fail-fast there.
	if wait.d > 0 {
		opts = append(opts, client.WithWait(wait.d))
	}
	if *autostart && r != client.RouteDirect {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("autostart: find the scribe binary: %w", err)
		}
		opts = append(opts, client.WithAutostart(client.Autostart{Command: []string{exe, "serve"}, ExitIdle: *exitIdle}))
	}
	cl, err := t.open(ctx, opts...)
	if err != nil {
		return c.failedAt(sig, err, r, t, nil)
	}
	defer cl.Close()

	if !wait.on && cl.Queued() {
		if err := cl.Submit(ctx, job); err != nil {
			return c.failedAt(sig, err, r, t, job)
		}
		if *asJSON {
			return writeJSON(c.Stdout, map[string]string{"id": job.ID, "status": "queued"})
		}
		fmt.Fprintln(c.Stdout, job.ID)
		return nil
	}
	out, err := cl.Apply(ctx, job)
	if err != nil {
		return c.failedAt(sig, err, r, t, job)
	}
	switch {
	case *asJSON:
		if err := writeJSON(c.Stdout, out); err != nil {
			return err
		}
	case out.Exec != nil:
		c.writeExecOutput(out)
	case out.Applied():
		fmt.Fprintln(c.Stdout, out.ID)
	}
	if !out.Applied() {
		return fmt.Errorf("job %s %w", out.ID, out.Err())
	}
	return nil
}

// writeExecOutput prints what an exec job's command wrote, as if it had
// run here: its stdout on stdout, its stderr on stderr, each followed by
// a note on stderr if its middle was cut (the command's max_output).
func (c *SubmitCommand) writeExecOutput(out *queue.Outcome) {
	x := out.Exec
	_, _ = io.WriteString(c.Stdout, x.Stdout)
	_, _ = io.WriteString(c.Stderr, x.Stderr)
	for _, cut := range []struct {
		stream string
		n      int64
	}{{"stdout", x.StdoutCut}, {"stderr", x.StderrCut}} {
		if cut.n > 0 {
			fmt.Fprintf(c.Stderr, "scribe: job %s: %d bytes cut from the middle of the command's %s (its max_output)\n", out.ID, cut.n, cut.stream)
		}
	}
}

// autostartSettings settles --autostart and --exit-idle: the command
// line, else SCRIBE_AUTOSTART and SCRIBE_EXIT_IDLE, else the store's
// config file (autostart, the store's opt-in; exit_idle, if positive:
// a daemon started on demand must leave one day). The file is read only
// when it exists and something is left to settle, and held to serve's
// rules: an insecure file, or an invalid value of those two keys, fails
// the submit as it would fail serve, rather than being ignored. The rest
// of the file is serve's (ReadConfig of callerKeys).
func (c *SubmitCommand) autostartSettings(flags *flag.FlagSet, store string, autostart bool, exitIdle time.Duration) (bool, time.Duration, error) {
	onCommandLine := map[string]bool{}
	flags.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	autostartSet := onCommandLine["autostart"] || os.Getenv("SCRIBE_AUTOSTART") != ""
	exitIdleSet := onCommandLine["exit-idle"] || os.Getenv("SCRIBE_EXIT_IDLE") != ""
	if autostartSet && (!autostart || exitIdleSet) {
		return autostart, exitIdle, nil
	}
	path := configPath(store)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return autostart, exitIdle, nil
	}
	cfg, err := ReadConfig(path, callerKeys...)
	if err != nil {
		return false, 0, reportConfigErrors(c.Stderr, err)
	}
	if !autostartSet && cfg.Autostart != nil {
		autostart = *cfg.Autostart
	}
	if !exitIdleSet && cfg.ExitIdle != nil && *cfg.ExitIdle > 0 {
		exitIdle = *cfg.ExitIdle
	}
	return autostart, exitIdle, nil
}

// jobFlags are the flags that shape the job: --job, --if-match,
// --coalesce, --newline.
type jobFlags struct {
	file, ifMatch, coalesce string
	newline                 bool
}

// buildJob reads the job from --job, or builds it from OP PATH [DATA|-]
// or exec NAME [ARGS...].
func (c *SubmitCommand) buildJob(args []string, f jobFlags) (*queue.Job, error) {
	job, err := c.readJob(args, f)
	if err != nil {
		return nil, err
	}
	if f.coalesce != "" {
		// A --job file's job may be anything: queue validation refuses
		// a key on a file job (exit 1, as for any invalid job file).
		if f.file == "" && !job.IsExec() {
			return nil, usageError("--coalesce is for exec jobs only (exec NAME [ARGS...])")
		}
		job.Coalesce = f.coalesce
	}
	return job, nil
}

// readJob reads the job from --job, or builds it from the arguments.
func (c *SubmitCommand) readJob(args []string, f jobFlags) (*queue.Job, error) {
	if f.file != "" {
		return c.readJobFile(args, f)
	}
	if len(args) > 0 && args[0] == string(queue.OpExec) {
		if len(args) < 2 {
			return nil, usageError("want exec NAME [ARGS...]: the name of a command of the daemon's allowlist")
		}
		if f.ifMatch != "" {
			return nil, usageError("--if-match is for file ops, not exec")
		}
		if f.newline {
			return nil, usageError("--newline is for DATA, not exec")
		}
		// Everything after NAME is argv, as given: no flags are parsed
		// there, so "-n" or "--" reach the command.
		op := queue.Op{Kind: queue.OpExec, Name: args[1]}
		if len(args) > 2 {
			op.Args = slices.Clone(args[2:])
		}
		return &queue.Job{V: queue.Version, Ops: []queue.Op{op}}, nil
	}
	if len(args) < 2 || len(args) > 3 {
		return nil, usageError("want OP PATH [DATA|-] or exec NAME [ARGS...], got %d arguments", len(args))
	}
	// An unknown OP is a typo on this command line, not a job to
	// reject: no job is built. (A --job file's unknown op is rejected
	// unknown_op, as on the wire.)
	kind := queue.OpKind(args[0])
	switch kind {
	case queue.OpPut, queue.OpAppend, queue.OpMerge, queue.OpDelete:
	default:
		return nil, usageError("unknown op %q: want put, append, merge, delete or exec", args[0])
	}
	op := queue.Op{Kind: kind, Path: queue.TrimDotSlash(args[1]), IfMatch: f.ifMatch}
	if kind == queue.OpDelete {
		if len(args) == 3 {
			return nil, usageError("delete takes no data")
		}
		if f.newline {
			return nil, usageError("--newline is for DATA: delete takes none")
		}
		return &queue.Job{V: queue.Version, Ops: []queue.Op{op}}, nil
	}
	switch {
	case len(args) == 3 && args[2] != "-":
		op.Data = []byte(args[2])
	case len(args) == 2 && isTerminalReader(c.Stdin):
		// DESIGN's "DATA from stdin when absent", but a person at a
		// terminal who forgot DATA would otherwise hang, typing into a
		// job they did not mean.
		return nil, usageError("%s %s: DATA is missing; give DATA, or - to read it from stdin (stdin is a terminal)", args[0], args[1])
	default:
		b, err := readLimited(c.Stdin, "DATA from stdin")
		if err != nil {
			return nil, err
		}
		op.Data = b
	}
	if f.newline && (len(op.Data) == 0 || op.Data[len(op.Data)-1] != '\n') {
		op.Data = append(op.Data, '\n')
	}
	return &queue.Job{V: queue.Version, Ops: []queue.Op{op}}, nil
}

// readJobFile reads and decodes --job FILE (- for stdin).
func (c *SubmitCommand) readJobFile(args []string, f jobFlags) (*queue.Job, error) {
	if len(args) > 0 {
		return nil, usageError("--job takes no OP arguments, got %q", args)
	}
	if f.ifMatch != "" {
		return nil, usageError("--if-match applies to a single op; put if_match in the job file's ops")
	}
	if f.newline {
		return nil, usageError("--newline applies to DATA; in a job file, end the data with \\n")
	}
	var b []byte
	var err error
	if f.file == "-" {
		b, err = readLimited(c.Stdin, "the job file from stdin")
	} else {
		b, err = os.ReadFile(f.file)
	}
	if err != nil {
		return nil, fmt.Errorf("read job: %w", err)
	}
	var job queue.Job
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&job); err != nil {
		return nil, queue.Reject(queue.ReasonBadInput, "job file is not a valid job: %s", jobFileProblem(b, err))
	}
	if dec.More() {
		return nil, queue.Reject(queue.ReasonBadInput, "job file has more after the job")
	}
	return &job, nil
}

// readLimited reads what of r a job can hold. More than any job may be
// (queue.MaxJobBytesLimit) is rejected too_large at once, saying that the
// size is a lower bound: the rest was not read. The store's own limit,
// 1 MiB unless its daemon allows more, is checked when the job is
// encoded.
func readLimited(r io.Reader, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, queue.MaxJobBytesLimit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if len(b) > queue.MaxJobBytesLimit {
		return nil, queue.Reject(queue.ReasonTooLarge, "%s is at least %d bytes; a job may be at most %d bytes encoded", what, len(b), queue.MaxJobBytesLimit)
	}
	return b, nil
}

// isTerminalReader reports whether r is a terminal (not a pipe, a file
// or /dev/null).
func isTerminalReader(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && isTTY(f.Fd())
}

// jobFileProblem says what is wrong with a job file that does not decode
// (err), in the file's terms: "ops[1].path: want a string, not a
// number", not Go's type names. The ops are decoded one by one to find
// which one fails.
func jobFileProblem(b []byte, err error) string {
	var top map[string]json.RawMessage
	if e := json.Unmarshal(b, &top); e != nil {
		return jsonProblem(b, "", e)
	}
	if raw, ok := top["ops"]; ok {
		var ops []json.RawMessage
		if e := json.Unmarshal(raw, &ops); e != nil {
			return jsonProblem(raw, "ops", e)
		}
		for i, r := range ops {
			var op queue.Op
			if e := json.Unmarshal(r, &op); e != nil {
				return jsonProblem(r, fmt.Sprintf("ops[%d]", i), e)
			}
		}
	}
	return jsonProblem(b, "", err)
}

// jsonProblem describes a decoding error of b, found at the place named
// by at ("" for the top, "ops", "ops[0]").
func jsonProblem(b []byte, at string, err error) string {
	name := func(field string) string {
		switch {
		case at == "":
			return field
		case field == "":
			return at
		}
		return at + "." + field
	}
	prefix := func(field string) string {
		if n := name(field); n != "" {
			return n + ": "
		}
		return ""
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var pe *time.ParseError
	switch {
	case errors.As(err, &te):
		// te.Field is the path from what was decoded: "path" in an op,
		// "ops.path" from the top (no index: hence the op-by-op pass).
		field := te.Field
		if at != "" {
			if i := strings.LastIndexByte(field, '.'); i >= 0 {
				field = field[i+1:]
			}
		}
		return fmt.Sprintf("%swant %s, not %s", prefix(field), jsonKind(te.Type), article(te.Value))
	case errors.As(err, &se) && se.Offset >= int64(len(b)):
		return prefix("") + "the JSON ends too soon"
	case errors.As(err, &se):
		// Offset counts the bytes read: the culprit is the last of them.
		line, col := position(b, se.Offset-1)
		return fmt.Sprintf("%sline %d, column %d: %s", prefix(""), line, col, strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &pe):
		return fmt.Sprintf("%swant a time such as 2026-01-02T15:04:05Z, not %q", prefix("submitted"), pe.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return prefix("") + "the JSON ends too soon"
	}
	return prefix("") + strings.TrimPrefix(err.Error(), "json: ")
}

// jsonKind names what JSON value a Go type decodes from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another value"
}

// article puts "a" or "an" before a JSON value's kind ("number",
// "object").
func article(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

// position is the 1-based line and column of byte offset off in b.
func position(b []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(b)))
	before := b[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// describeJob is how a direct writer's lock file describes this submit:
// the op and path, or the command name, or the job file, and never the
// data.
func describeJob(args []string, jobFile string) string {
	switch {
	case jobFile != "":
		return "scribe submit --job " + jobFile
	case len(args) >= 2:
		return "scribe submit " + args[0] + " " + args[1]
	}
	return "scribe submit"
}

// failed turns a failed submit's error into the command line's: a signal
// (sig ended) is exit 130 naming the job, which may still be applied, if
// it was sent (job not nil); the rest is submitError's.
func (c *SubmitCommand) failed(sig context.Context, err error, r client.Route, store string, job *queue.Job) error {
	return c.failedAt(sig, err, r, target{store: store}, job)
}

// failedAt is failed for the store t names: its messages name it as the
// command line did (--store, or --store-id with a remote queue).
func (c *SubmitCommand) failedAt(sig context.Context, err error, r client.Route, t target, job *queue.Job) error {
	if sig.Err() == nil {
		hint := ""
		if t.store != "" {
			hint = busyHint(t.store, err, r == client.RouteDirect)
		}
		if hint == "" {
			hint = lockFileHint(err)
		}
		return withHint(submitError(err, r), hint)
	}
	switch {
	case job == nil:
		err = fmt.Errorf("interrupted before the job was sent: nothing was queued or written")
	case errors.Is(err, client.ErrBusy):
		err = fmt.Errorf("interrupted while waiting for the store lock: job %s was not written", job.ID)
	default:
		err = fmt.Errorf("interrupted: job %s may still be applied; see its outcome with: scribe status %s %s (or wait for it: scribe wait %s %s)",
			job.ID, t.ref(), job.ID, t.ref(), job.ID)
	}
	return &exitError{code: exitInterrupted, err: err}
}

// submitError maps a --wait that ran out to exit 75, and adds the CLI's
// own hints (commands, flags) to the client's errors, which name none.
func submitError(err error, r client.Route) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", errWaitTimeout, err)
	case errors.Is(err, client.ErrStranded):
		return fmt.Errorf("%w; start scribe serve to apply them, or write with --route direct to go past them", err)
	case errors.Is(err, client.ErrExecNeedsDaemon) && r == client.RouteDirect:
		return fmt.Errorf("%w; submit it without --route direct, with scribe serve running or --autostart", err)
	case errors.Is(err, client.ErrExecNeedsDaemon):
		return fmt.Errorf("%w; start scribe serve, or use --autostart (or SCRIBE_AUTOSTART=1)", err)
	}
	return err
}

// busyHint says what to do about a busy store lock in err (none for
// another error): wait for it, and, when the daemon holds it, why it
// still does after its jobs are done. direct says the daemon was avoided
// on purpose (--route direct), which queueing would not.
func busyHint(store string, err error, direct bool) string {
	var holder *queue.Holder
	var be *client.BusyError
	var le *lock.LockedError
	switch {
	case errors.As(err, &be):
		holder = be.Holder
	case errors.As(err, &le):
		holder = le.Holder
	default:
		return ""
	}
	if holder == nil || holder.Mode != queue.ModeDaemon {
		return "retry, or wait for the lock with --wait=DUR (such as --wait=10s), or --wait for no bound"
	}
	// How long the daemon keeps the lock: its discovery file says, when
	// it is the daemon that holds the lock.
	idle := fmt.Sprintf("about %s by default", daemon.DefaultIdleRelease)
	if real, err := queue.ResolveStore(store); err == nil {
		if d, err := queue.ReadDiscovery(real); err == nil && d.PID == holder.PID && d.IdleReleaseMS > 0 {
			idle = (time.Duration(d.IdleReleaseMS) * time.Millisecond).String()
		}
	}
	hint := "the daemon keeps the store lock for its idle-release period (" + idle + ") after its last batch; " +
		"retry after that, or wait for the lock with --wait=DUR (such as --wait=5s)"
	if direct {
		hint += "; without --route direct the job would queue through the daemon"
	}
	return hint
}

// envBool is a boolean environment variable: false when unset or not a
// boolean.
func envBool(name string) bool {
	b, _ := strconv.ParseBool(os.Getenv(name))
	return b
}

// envDuration is a duration environment variable, def when unset or not a
// positive duration.
func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
