package caller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/lock"
)

// queueTimeout bounds a submit without --wait: finding the daemon and
// queueing the job.
const queueTimeout = 30 * time.Second

// submit is `scribe submit`, on the command line's streams.
type submit struct{ *cli.Main }

// Submit is `scribe submit`: a job queued through the store's daemon or,
// without one, applied directly.
func Submit() cli.Command {
	return cli.Command{
		Name: "submit",
		Forms: []cli.Form{
			{Args: "--store DIR [flags] OP PATH [DATA|-]", Summary: "queue one op (DATA -: from stdin)"},
			{Args: "--store DIR [flags] --job FILE", Summary: "queue a multi-op job (FILE may be -)"},
			{Args: "--store DIR [flags] exec NAME [ARGS]", Summary: "run an allowlisted command in the daemon"},
		},
		FirstArgs: []string{"put", "append", "merge", "delete", "exec"},
		Help: "OP is put, append, merge or delete (no DATA); PATH is relative to the store (a leading\n" +
			"./ is dropped). DATA is taken verbatim: no newline is added, unless --newline. With - it\n" +
			"is read from stdin. Without DATA it is read from stdin too, but only when stdin is not a\n" +
			"terminal (a pipe, a file); on a terminal that is a usage error: give DATA, or -. Hooks\n" +
			"should always pass DATA or -: their stdin is the caller's event.\n" +
			"A job is at most 1 MiB (1048576 bytes) encoded, DATA included; a larger one is rejected\n" +
			"too_large (exit 1).\n" +
			"Flags go before OP: DATA may start with -. A duration right after a bare --wait is its\n" +
			"bound: --wait 10s is --wait=10s.\n" +
			"exec runs the command NAME of the daemon's allowlist with ARGS, passed as they are (even\n" +
			"those starting with -); it needs a daemon (or --autostart). With --wait and without --json,\n" +
			"the command's output is printed as its own: stdout on stdout, stderr on stderr.\n" +
			"Interrupted (Ctrl-C) after the job was sent, it exits 130 naming the job: it may still be\n" +
			"applied (scribe status ID).\n" + cli.RemoteHelp,
		Setup: func(m *cli.Main, fs *cli.FlagSet) func(context.Context, []string) error {
			fs.Strict()
			store := fs.Store()
			remote := fs.Remote()
			var wait cli.Wait
			fs.WaitVar(&wait, "wait", "wait for the outcome: bare, without bound (a direct write still fails at once on a busy lock); "+
				"--wait=DUR, or --wait DUR, waits at most `DUR`, for the lock too, and exits 75 when it runs out")
			newline := fs.Bool("newline", false, "end DATA with a newline: add \"\\n\" unless it ends with one (put, append, merge)")
			id := fs.String("id", "", "job `ID`: 1-128 characters of [A-Za-z0-9_-], the idempotency key, protecting against a repeat while its outcome is kept (serve --retention); the same ID for a different job is rejected id_conflict (default: a new random one)")
			jobFile := fs.String("job", "", "read a multi-op job from `FILE` (- for stdin)")
			fs.CompleteFile("job")
			ifMatch := fs.String("if-match", "", "precondition `COND`: absent, or sha256:<lower-case hex> of the file's content (not with --job: put if_match in the job file)")
			coalesce := fs.String("coalesce", "", "exec jobs only: coalescing `KEY`; while a job with this key waits in the queue, not yet started, this one joins it and gets its outcome, if it asks for the same run: the same command, arguments, dir and timeout")
			priority := fs.String("priority", "normal", "queue class `P`: high (decided before the normal jobs queued ahead of it) or normal; a direct write ignores it")
			fs.CompleteWords("priority", "high", "normal")
			asJSON := fs.JSON("the outcome (or, without --wait, the queued job's ID)")
			route := fs.Route()
			lockFile := fs.LockFile()
			auto := fs.Autostart()
			c := &submit{m}
			return func(ctx context.Context, args []string) error {
				if err := auto.Check(); err != nil {
					return err
				}
				r, err := client.ParseRoute(*route)
				if err != nil {
					return cli.Usagef("%v", err)
				}
				if r == client.RouteDirect && !fs.Changed("nats-url") {
					// A direct write asked for (a `scribe lock` child's) writes the
					// folder here, whatever queue the environment names.
					remote.URL = ""
				}
				t, err := remote.Resolve(*store)
				if err != nil {
					return err
				}
				locks, err := lockFile.Options(m, t.Store)
				if err != nil {
					return err
				}
				if err := t.CheckRoute(auto, r); err != nil {
					return err
				}
				prio, err := queue.ParsePriority(*priority)
				if err == nil && *priority == "" {
					err = errors.New("empty: give high or normal, or leave it out")
				}
				if err != nil {
					return cli.Usagef("--priority: %v", err)
				}
				// An empty value (an unset shell variable) would silently
				// mean no precondition, or a new ID instead of a retry's.
				if fs.Changed("if-match") && *ifMatch == "" {
					return cli.Usagef("--if-match is empty: give absent or sha256:<hex>, or leave it out for no precondition")
				}
				if fs.Changed("id") && *id == "" {
					return cli.Usagef("--id is empty: give the job's ID, or leave it out for a new one")
				}
				if fs.Changed("coalesce") && *coalesce == "" {
					return cli.Usagef("--coalesce is empty: give the coalescing key, or leave it out for a run of the job's own")
				}
				jf := jobFlags{file: *jobFile, ifMatch: *ifMatch, coalesce: *coalesce, newline: *newline}
				if fs.Changed("priority") {
					jf.priority = &prio
				}
				job, err := c.buildJob(args, jf)
				if err != nil {
					return err
				}
				if *id != "" {
					job.ID = *id
				}
				var start *client.Autostart
				// A remote queue's daemon is its operator's to start; the
				// direct route starts no daemon.
				if t.Remote == nil && r != client.RouteDirect {
					if start, err = auto.Settle(m, *store); err != nil {
						return err
					}
				}
				return c.submit(ctx, t, r, job, wait, *jobFile, locks, *asJSON, start, args)
			}
		},
	}
}

// submit submits job to t's store and prints its outcome, or its ID once
// queued.
func (c *submit) submit(ctx context.Context, t cli.Target, r client.Route, job *queue.Job, wait cli.Wait, jobFile string, locks []client.Option, asJSON bool, start *client.Autostart, args []string) error {
	// Bound the command: by --wait=DUR, or, without --wait, by
	// queueTimeout (a hook must not hang on a daemon that went away).
	// Plain --wait waits for the outcome however long it takes. sig is
	// only ever ended by a signal: then the job's fate is told apart
	// from a wait that ran out.
	sig := ctx
	bound := queueTimeout
	if wait.On {
		bound = wait.Bound
	}
	if bound > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	// A job file bound to another store is not this store's to apply
	// (the client would bind it to its own): refused before anything,
	// a daemon started on demand included.
	if job.Store != "" {
		if id, err := t.StoreID(); err == nil && job.Store != id {
			return queue.Reject(queue.ReasonWrongStore, "job is for store %s, this is %s", job.Store, id)
		}
	}
	// The lock file shows a direct writer's command to those it makes
	// wait: the op and path, never the data (which may be long, private,
	// or hold newlines).
	opts := append([]client.Option{client.WithRoute(r), client.WithCommand(describeJob(args, jobFile))}, locks...)
	// A direct write waits for the lock only within a bound (waiting is
	// opt-in and bounded): plain --wait stays fail-fast there.
	if wait.Bound > 0 {
		opts = append(opts, client.WithWait(wait.Bound))
	}
	if start != nil {
		opts = append(opts, client.WithAutostart(*start))
	}
	cl, err := t.Open(ctx, opts...)
	if err != nil {
		return c.failedAt(sig, err, r, t, nil)
	}
	defer cl.Close()
	if err := cl.FellBack(); err != nil {
		// Said before the write, which may still be refused (stranded
		// jobs, an exec job): the direct route's own message follows.
		hint := "" // a daemon that could not start: its log says why
		if refused := (*client.DaemonRefusedError)(nil); errors.As(err, &refused) && refused.Code == cli.ExitUsage {
			hint = fmt.Sprintf(" (check the settings with: scribe serve %s --check-config)", t.Ref())
		}
		fmt.Fprintf(c.Stderr, "scribe: %v; without a daemon, the job takes the direct route%s\n", err, hint)
	}

	if !wait.On && cl.Queued() {
		if err := cl.Submit(ctx, job); err != nil {
			return c.failedAt(sig, err, r, t, job)
		}
		if asJSON {
			return cli.WriteJSON(c.Stdout, map[string]string{"id": job.ID, "status": "queued"})
		}
		fmt.Fprintln(c.Stdout, job.ID)
		return nil
	}
	out, err := cl.Apply(ctx, job)
	if err != nil {
		return c.failedAt(sig, err, r, t, job)
	}
	switch {
	case asJSON:
		if err := cli.WriteJSON(c.Stdout, out); err != nil {
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
func (c *submit) writeExecOutput(out *queue.Outcome) {
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

// jobFlags are the flags that shape the job: --job, --if-match,
// --coalesce, --newline, --priority.
type jobFlags struct {
	file, ifMatch, coalesce string
	newline                 bool
	priority                *queue.Priority // nil: not given (a --job file's, or normal)
}

// buildJob reads the job from --job, or builds it from OP PATH [DATA|-]
// or exec NAME [ARGS...].
func (c *submit) buildJob(args []string, f jobFlags) (*queue.Job, error) {
	job, err := c.readJob(args, f)
	if err != nil {
		return nil, err
	}
	if f.coalesce != "" {
		// A --job file's job may be anything: queue validation refuses
		// a key on a file job (exit 1, as for any invalid job file).
		if f.file == "" && !job.IsExec() {
			return nil, cli.Usagef("--coalesce is for exec jobs only (exec NAME [ARGS...])")
		}
		job.Coalesce = f.coalesce
	}
	if f.priority != nil {
		job.Priority = *f.priority // over a --job file's
	}
	return job, nil
}

// readJob reads the job from --job, or builds it from the arguments.
func (c *submit) readJob(args []string, f jobFlags) (*queue.Job, error) {
	if f.file != "" {
		return c.readJobFile(args, f)
	}
	if len(args) > 0 && args[0] == string(queue.OpExec) {
		if len(args) < 2 {
			return nil, cli.Usagef("want exec NAME [ARGS...]: the name of a command of the daemon's allowlist")
		}
		if f.ifMatch != "" {
			return nil, cli.Usagef("--if-match is for file ops, not exec")
		}
		if f.newline {
			return nil, cli.Usagef("--newline is for DATA, not exec")
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
		return nil, cli.Usagef("want OP PATH [DATA|-] or exec NAME [ARGS...], got %d arguments", len(args))
	}
	// An unknown OP is a typo on this command line, not a job to
	// reject: no job is built. (A --job file's unknown op is rejected
	// unknown_op, as on the wire.)
	kind := queue.OpKind(args[0])
	switch kind {
	case queue.OpPut, queue.OpAppend, queue.OpMerge, queue.OpDelete:
	default:
		return nil, cli.Usagef("unknown op %q: want put, append, merge, delete or exec", args[0])
	}
	op := queue.Op{Kind: kind, Path: queue.TrimDotSlash(args[1]), IfMatch: f.ifMatch}
	if kind == queue.OpDelete {
		if len(args) == 3 {
			return nil, cli.Usagef("delete takes no data")
		}
		if f.newline {
			return nil, cli.Usagef("--newline is for DATA: delete takes none")
		}
		return &queue.Job{V: queue.Version, Ops: []queue.Op{op}}, nil
	}
	switch {
	case len(args) == 3 && args[2] != "-":
		op.Data = []byte(args[2])
	case len(args) == 2 && isTerminalReader(c.Stdin):
		// DATA comes from stdin when absent, but a person at a terminal
		// who forgot DATA would otherwise hang, typing into a job they
		// did not mean.
		return nil, cli.Usagef("%s %s: DATA is missing; give DATA, or - to read it from stdin (stdin is a terminal)", args[0], args[1])
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
func (c *submit) readJobFile(args []string, f jobFlags) (*queue.Job, error) {
	if len(args) > 0 {
		return nil, cli.Usagef("--job takes no OP arguments, got %q", args)
	}
	if f.ifMatch != "" {
		return nil, cli.Usagef("--if-match applies to a single op; put if_match in the job file's ops")
	}
	if f.newline {
		return nil, cli.Usagef("--newline applies to DATA; in a job file, end the data with \\n")
	}
	var b []byte
	var err error
	if f.file == "-" {
		b, err = readLimited(c.Stdin, "the job file from stdin")
	} else {
		b, err = readJobPath(f.file)
	}
	if err != nil {
		return nil, err // a rejection (too_large) says so itself, as one decided would
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
	if err := queue.CheckGivenEmpty(b); err != nil {
		return nil, queue.Reject(queue.ReasonBadInput, "job file is not a valid job: %v", err)
	}
	if err := queue.CheckText(b[:dec.InputOffset()]); err != nil {
		return nil, queue.Reject(queue.ReasonBadInput, "job file is not a valid job: %v", err)
	}
	return &job, nil
}

// readJobPath reads the job file path, refusing one too large as
// readLimited does, before it is all in memory.
func readJobPath(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read job: %w", err)
	}
	defer f.Close()
	return readLimited(f, "the job file "+path)
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
		return nil, queue.Reject(queue.ReasonTooLarge, "%s is at least %d bytes, more than any job may hold (%d bytes encoded, the most a daemon can take)", what, len(b), queue.MaxJobBytesLimit)
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
func (c *submit) failed(sig context.Context, err error, r client.Route, store string, job *queue.Job) error {
	return c.failedAt(sig, err, r, cli.Target{Store: store}, job)
}

// failedAt is failed for the store t names: its messages name it as the
// command line did (--store, or --store-id with a remote queue).
func (c *submit) failedAt(sig context.Context, err error, r client.Route, t cli.Target, job *queue.Job) error {
	if sig.Err() == nil {
		hint := ""
		if t.Store != "" {
			hint = busyHint(t.Store, err, r == client.RouteDirect)
		}
		if hint == "" {
			hint = lockFileHint(err)
		}
		return cli.WithHint(submitError(err, r), hint)
	}
	switch {
	case job == nil:
		err = fmt.Errorf("interrupted before the job was sent: nothing was queued or written")
	case errors.Is(err, client.ErrBusy):
		err = fmt.Errorf("interrupted while waiting for the store lock: job %s was not written", job.ID)
	default:
		err = fmt.Errorf("interrupted: job %s may still be applied; see its outcome with: scribe status %s %s (or wait for it: scribe wait %s %s)",
			job.ID, t.Ref(), job.ID, t.Ref(), job.ID)
	}
	return cli.Exit(cli.ExitInterrupted, err)
}

// submitError maps a --wait that ran out to exit 75, and adds the CLI's
// own hints (commands, flags) to the client's errors, which name none.
func submitError(err error, r client.Route) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", cli.ErrWaitTimeout, err)
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
		return "retry, or wait for the lock with --wait=DUR (such as --wait=10s)"
	}
	// How long the daemon keeps the lock: its discovery file says, when
	// it is the daemon that holds the lock.
	idle := fmt.Sprintf("about %s by default", queue.DefaultIdleRelease)
	if real, err := queue.ResolveStore(store); err == nil {
		if d, err := queue.ReadDiscovery(real); err == nil && d.PID == holder.PID && d.IdleReleaseMS > 0 {
			idle = (time.Duration(d.IdleReleaseMS) * time.Millisecond).String()
		}
	}
	hint := "the daemon keeps the store lock while it applies jobs or runs an exec command, and for its idle-release period (" + idle + ") after; " +
		"retry after that, or wait for the lock with --wait=DUR (such as --wait=5s)"
	if direct {
		hint += "; without --route direct the job would queue through the daemon"
	}
	return hint
}
