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
	"slices"
	"strconv"
	"time"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// queueTimeout bounds a submit without --wait: finding the daemon and
// queueing the job.
const queueTimeout = 30 * time.Second

// SubmitCommand queues a job (or, without a daemon, applies it directly).
type SubmitCommand struct{ *Main }

// waitFlag is --wait: a bool flag ("wait for the outcome, however long")
// that also takes a bound ("--wait=10s").
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

// Run parses flags, builds the job and submits it.
func (c *SubmitCommand) Run(ctx context.Context, args []string) error {
	fs := c.newFlagSet("submit", "--store DIR [flags] OP PATH [DATA|-]\n"+
		"       scribe submit --store DIR [flags] --job FILE\n"+
		"       scribe submit --store DIR [flags] exec NAME [ARGS...]\n\n"+
		"OP is put, append, merge or delete (no DATA). DATA is taken verbatim (no newline added);\n"+
		"with - or absent it is read from stdin, at most 1 MiB.\n"+
		"exec runs the command NAME of the daemon's allowlist with ARGS, passed as they are (even\n"+
		"those starting with -); it needs a daemon (or --autostart). With --wait and without --json,\n"+
		"the command's output is printed as its own: stdout on stdout, stderr on stderr")
	store := storeFlag(fs)
	var wait waitFlag
	fs.Var(&wait, "wait", "wait for the outcome, without bound; --wait=DUR (with =: \"--wait 10s\" reads 10s as OP) bounds the wait, and a direct write's wait for the lock; exit 75 when it runs out")
	id := fs.String("id", "", "job `ID`: 1-128 characters of [A-Za-z0-9_-], the idempotency key, protecting against a repeat while its outcome is kept (serve --retention); the same ID for a different job is rejected id_conflict (default: a new random one)")
	jobFile := fs.String("job", "", "read a multi-op job from `FILE` (- for stdin)")
	ifMatch := fs.String("if-match", "", "precondition: `absent`, or sha256:<lower-case hex> of the file's content (not with --job: put if_match in the job file)")
	coalesce := fs.String("coalesce", "", "exec jobs only: coalescing `key`; while a job with this key and command waits in the queue, not yet started, this one joins it and gets its outcome")
	asJSON := fs.Bool("json", false, "print the outcome (or the queued job ID) as JSON")
	route := fs.String("route", os.Getenv("SCRIBE_ROUTE"), "`prefer` (daemon if any, else direct), require (daemon only) or direct (default $SCRIBE_ROUTE, else prefer)")
	lockFile := fs.String("lock-file", "", "store lock `file` for direct writes (default <store>/.scribe/lock)")
	autostart := fs.Bool("autostart", envBool("SCRIBE_AUTOSTART"), "when no daemon serves the store, start one (detached, logging to <store>/.scribe/daemon.log) and submit through it (default $SCRIBE_AUTOSTART, else autostart in <store>/.scribe/config.toml)")
	exitIdle := fs.Duration("exit-idle", envDuration("SCRIBE_EXIT_IDLE", client.DefaultExitIdle), "with --autostart: the started daemon exits once idle this `long` (default $SCRIBE_EXIT_IDLE, else exit_idle in <store>/.scribe/config.toml, else 5m)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *exitIdle <= 0 {
		return usageError("--exit-idle %s: want a positive duration", *exitIdle)
	}
	if err := requireStore(*store); err != nil {
		return err
	}
	r, err := client.ParseRoute(*route)
	if err != nil {
		return usageError("%v", err)
	}
	job, err := c.buildJob(fs.Args(), *jobFile, *ifMatch, *coalesce)
	if err != nil {
		return err
	}
	if *id != "" {
		job.ID = *id
	}
	if r != client.RouteDirect { // the direct route starts no daemon
		if *autostart, *exitIdle, err = c.autostartSettings(fs, *store, *autostart, *exitIdle); err != nil {
			return err
		}
	}

	// Bound the command: by --wait=DUR, or, without --wait, by
	// queueTimeout (a hook must not hang on a daemon that went away).
	// Plain --wait waits for the outcome however long it takes.
	bound := queueTimeout
	if wait.on {
		bound = wait.d
	}
	if bound > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	opts := []client.Option{client.WithRoute(r), client.WithLockFile(*lockFile)}
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
	cl, err := client.Open(ctx, *store, opts...)
	if err != nil {
		return submitError(err, r)
	}
	defer cl.Close()

	if !wait.on && cl.Daemon() != nil {
		if err := cl.Submit(ctx, job); err != nil {
			return submitError(err, r)
		}
		if *asJSON {
			return writeJSON(c.Stdout, map[string]string{"id": job.ID, "status": "queued"})
		}
		fmt.Fprintln(c.Stdout, job.ID)
		return nil
	}
	out, err := cl.Apply(ctx, job)
	if err != nil {
		return submitError(err, r)
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
// of the file is serve's (ReadCallerConfig).
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
	cfg, err := ReadCallerConfig(path)
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

// buildJob reads the job from --job, or builds it from OP PATH [DATA|-]
// or exec NAME [ARGS...]; coalesce is --coalesce.
func (c *SubmitCommand) buildJob(args []string, jobFile, ifMatch, coalesce string) (*queue.Job, error) {
	job, err := c.readJob(args, jobFile, ifMatch)
	if err != nil {
		return nil, err
	}
	if coalesce != "" {
		// A --job file's job may be anything: queue validation refuses
		// a key on a file job (exit 1, as for any invalid job file).
		if jobFile == "" && !job.IsExec() {
			return nil, usageError("--coalesce is for exec jobs only (exec NAME [ARGS...])")
		}
		job.Coalesce = coalesce
	}
	return job, nil
}

// readJob reads the job from --job, or builds it from the arguments.
func (c *SubmitCommand) readJob(args []string, jobFile, ifMatch string) (*queue.Job, error) {
	if jobFile != "" {
		if len(args) > 0 {
			return nil, usageError("--job takes no OP arguments, got %q", args)
		}
		if ifMatch != "" {
			return nil, usageError("--if-match applies to a single op; put if_match in the job file's ops")
		}
		var b []byte
		var err error
		if jobFile == "-" {
			b, err = io.ReadAll(io.LimitReader(c.Stdin, queue.MaxJobBytes+1))
		} else {
			b, err = os.ReadFile(jobFile)
		}
		if err != nil {
			return nil, fmt.Errorf("read job: %w", err)
		}
		var job queue.Job
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&job); err != nil {
			return nil, queue.Reject(queue.ReasonBadInput, "job file is not a valid job: %v", err)
		}
		if dec.More() {
			return nil, queue.Reject(queue.ReasonBadInput, "job file has more after the job")
		}
		return &job, nil
	}
	if len(args) > 0 && args[0] == string(queue.OpExec) {
		if len(args) < 2 {
			return nil, usageError("want exec NAME [ARGS...]: the name of a command of the daemon's allowlist")
		}
		if ifMatch != "" {
			return nil, usageError("--if-match is for file ops, not exec")
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
	op := queue.Op{Kind: queue.OpKind(args[0]), Path: args[1], IfMatch: ifMatch}
	if op.Kind != queue.OpDelete {
		if len(args) == 3 && args[2] != "-" {
			op.Data = []byte(args[2])
		} else {
			b, err := io.ReadAll(io.LimitReader(c.Stdin, queue.MaxJobBytes+1))
			if err != nil {
				return nil, fmt.Errorf("read data: %w", err)
			}
			op.Data = b
		}
	} else if len(args) == 3 {
		return nil, usageError("delete takes no data")
	}
	return &queue.Job{V: queue.Version, Ops: []queue.Op{op}}, nil
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
