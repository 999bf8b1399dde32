package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// Version is the scribe version, reported by the daemon.
var Version = devVersion

// Exit codes: a contract with scripts (docs/cli.md).
const (
	exitOK       = 0
	exitRejected = 1 // the job was rejected, or the command failed
	exitUsage    = 2
	exitNoDaemon = 69 // EX_UNAVAILABLE: --route require and no daemon
	exitBusy     = 75 // EX_TEMPFAIL: store lock held, queue full, or wait timed out
	// exitInterrupted is a shell's code for SIGINT (128+2): submit --wait
	// interrupted, its job perhaps queued still.
	exitInterrupted = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal takes the default action: exit at once
	}()
	m := &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	err := m.Run(ctx, os.Args[1:])
	stop()
	code := exitCode(err)
	if err != nil {
		var ex *exitError
		if !errors.As(err, &ex) || ex.err != nil {
			fmt.Fprintln(os.Stderr, "scribe:", err)
		}
		if hint := stuckHint(err); hint != "" {
			fmt.Fprintln(os.Stderr, "scribe:", hint)
		}
		if hint := errHint(err); hint != "" {
			fmt.Fprintln(os.Stderr, "scribe:", hint)
		}
	}
	os.Exit(code)
}

// Main is the scribe command line, with its standard streams.
type Main struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Run runs a subcommand.
func (m *Main) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		m.usageTo(m.Stderr)
		return usageError("no command")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "serve":
		return (&ServeCommand{m}).Run(ctx, args)
	case "submit":
		return (&SubmitCommand{m}).Run(ctx, args)
	case "status":
		return (&StatusCommand{m}).Run(ctx, args)
	case "wait":
		return (&WaitCommand{m}).Run(ctx, args)
	case "jobs":
		return (&JobsCommand{m}).Run(ctx, args)
	case "lock":
		return (&LockCommand{m}).Run(ctx, args)
	case "recover":
		return (&RecoverCommand{m}).Run(ctx, args)
	case "mcp":
		return (&MCPCommand{m}).Run(ctx, args)
	case "demo":
		return (&DemoCommand{m}).Run(ctx, args)
	case "bench":
		return (&BenchCommand{m}).Run(ctx, args)
	case "help", "-h", "--help":
		if cmd == "help" && len(args) > 0 {
			return m.Run(ctx, []string{args[0], "-h"}) // "help CMD" is "CMD -h"
		}
		m.usageTo(m.Stdout) // asked for: stdout, exit 0
		return nil
	case "stop":
		return (&StopCommand{m}).Run(ctx, args)
	case "version", "--version", "-version":
		return (&VersionCommand{m}).Run(ctx, args)
	}
	m.usageTo(m.Stderr)
	return usageError("unknown command %q", cmd)
}

// usageTo writes the commands' summary to w: stdout when asked for
// (help, -h), stderr with a usage error.
func (m *Main) usageTo(w io.Writer) {
	fmt.Fprint(w, strings.TrimLeft(`
scribe: one writer for many callers.

Usage:
  scribe serve  --store DIR [flags]                 run the daemon for a store
  scribe submit --store DIR [flags] OP PATH [DATA|-] queue one op (DATA -: from stdin; see submit -h)
  scribe submit --store DIR [flags] --job FILE       queue a multi-op job (FILE may be -)
  scribe submit --store DIR [flags] exec NAME [ARGS] run an allowlisted command in the daemon
  scribe status --store DIR [--json] [JOB_ID]        daemon status, or a job's outcome
  scribe lock   --store DIR [--wait[=DUR]] -- CMD ARGS run CMD holding the store lock
  scribe recover --store DIR [--abandon]            finish, or give up, an interrupted batch
  scribe stop   --store DIR [--timeout DUR]          stop the store's daemon gracefully
  scribe mcp    --store DIR [flags]                 serve the store's writes as MCP tools on stdio
  scribe demo                                        show the queue at work on a temporary store
  scribe bench  [flags]                              measure scribe against flock, side by side
  scribe version

Run "scribe COMMAND -h" or "scribe help COMMAND" for a command's flags. --store defaults
to $SCRIBE_STORE. Flags may follow arguments, except after submit's OP and lock's --.
Exit codes: 0 done, 1 rejected or failed, 2 usage, 69 no daemon (--route require),
75 busy (store lock held, queue full, or wait timed out), 130 interrupted (the job
may still be applied: scribe status ID).
`, "\n"))
}

// exitError carries an exit code and an optional message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// errWaitTimeout means a --wait ran out.
var errWaitTimeout = errors.New("wait timed out")

func exitCode(err error) int {
	var ex *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ex):
		return ex.code
	case errors.Is(err, queue.ErrInsecure):
		// Before the others: a .scribe another user could change fails
		// every command the same way, serve's, however it was reached
		// (an autostart, a fallback, a look-up); retrying changes nothing.
		return exitRejected
	case errors.Is(err, client.ErrNoDaemon):
		return exitNoDaemon
	case errors.Is(err, client.ErrOtherLockFile):
		return exitUsage // the flag (or its absence) is wrong; retrying will not help
	case errors.Is(err, client.ErrBusy), errors.Is(err, client.ErrQueueFull), errors.Is(err, errWaitTimeout),
		errors.Is(err, client.ErrUnavailable), errors.Is(err, discovery.ErrRunning):
		return exitBusy
	}
	return exitRejected // a rejection (queue.ErrRejected), or any other failure
}

// newFlagSet returns a flag set that reports errors instead of exiting.
// What it prints goes to stdout when asked for (-h, --help) and to
// stderr with a usage error (parse decides).
func (m *Main) newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(&flagOutput{stdout: m.Stdout, stderr: m.Stderr})
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: scribe %s %s\n\nFlags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// flagOutput holds what a flag set prints while it parses, until parse
// knows whether it was asked for (stdout) or is an error (stderr).
type flagOutput struct {
	stdout, stderr io.Writer
	buf            bytes.Buffer
}

func (o *flagOutput) Write(p []byte) (int, error) { return o.buf.Write(p) }

// flush sends what was held to stdout (help) or stderr.
func (o *flagOutput) flush(help bool) {
	w := o.stderr
	if help {
		w = o.stdout
	}
	if w != nil {
		_, _ = w.Write(o.buf.Bytes())
	}
	o.buf.Reset()
}

// parse parses flags, turning a bad flag into a usage error. Flags may
// come after arguments ("status JOB --json"), up to "--"; a command
// whose arguments may start with "-", or are passed on as they are,
// uses parseStrict.
func parse(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		rest, err := parseOnce(fs, args)
		if err != nil {
			return err
		}
		if len(rest) == 0 || stoppedAtDashes(args, rest) {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Leave the arguments in fs.Args(): "--" ends flags, so this sets
	// no flag, whatever the arguments look like.
	return fs.Parse(append([]string{"--"}, positional...))
}

// parseStrict parses flags up to the first argument, as the flag package
// does: for commands whose arguments may start with "-" (submit's DATA)
// or are passed on as they are (lock's CMD, submit's exec ARGS).
func parseStrict(fs *flag.FlagSet, args []string) error {
	_, err := parseOnce(fs, args)
	return err
}

// parseOnce is one fs.Parse, its output sent where it belongs.
func parseOnce(fs *flag.FlagSet, args []string) ([]string, error) {
	err := fs.Parse(args)
	out, _ := fs.Output().(*flagOutput)
	if out != nil {
		out.flush(errors.Is(err, flag.ErrHelp))
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, &exitError{code: exitOK}
	case err != nil:
		return nil, &exitError{code: exitUsage}
	}
	return fs.Args(), nil
}

// stoppedAtDashes reports whether parsing args stopped at a "--" (which
// the flag package consumes), leaving rest.
func stoppedAtDashes(args, rest []string) bool {
	n := len(args) - len(rest)
	return n > 0 && args[n-1] == "--"
}

// logger is the CLI's logger: text on stderr at the given level.
func (m *Main) logger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// isTerminal reports whether w is a terminal, for progress display.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// storeFlag adds the common --store flag, defaulting to $SCRIBE_STORE.
func storeFlag(fs *flag.FlagSet) *string {
	return fs.String("store", os.Getenv("SCRIBE_STORE"), "store `folder` (default $SCRIBE_STORE)")
}

// requireStore checks that a store was named (--store, or
// $SCRIBE_STORE) and that its folder exists: scribe never creates one,
// since a typo would become a new, empty store.
func requireStore(store string) error {
	if store == "" {
		return usageError("--store is required (or set $SCRIBE_STORE)")
	}
	fi, err := os.Stat(store)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("store %s does not exist; create the folder first: mkdir -p %s", store, shellQuote(store))
	case err == nil && !fi.IsDir():
		return fmt.Errorf("store %s is not a folder", store)
	}
	return nil // other errors: the command reports them where it uses the store
}

// shellQuote quotes s for a sh command line when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@%,=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// hintedError adds a second line to an error's message: what to do about
// it, in the command line's words (flags, commands), which the library's
// errors never use.
type hintedError struct {
	err  error
	hint string
}

func (e *hintedError) Error() string { return e.err.Error() }
func (e *hintedError) Unwrap() error { return e.err }

// withHint wraps err with a hint line; an empty hint leaves err as it is.
func withHint(err error, hint string) error {
	if err == nil || hint == "" {
		return err
	}
	return &hintedError{err: err, hint: hint}
}

// errHint is the hint a hintedError in err carries, if any.
func errHint(err error) string {
	var h *hintedError
	if errors.As(err, &h) {
		return h.hint
	}
	return ""
}
