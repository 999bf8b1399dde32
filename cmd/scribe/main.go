package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue/daemon"
)

// Version is the scribe version, reported by the daemon.
var Version = "0.1.0-dev"

// Exit codes: a contract with scripts (docs/cli.md).
const (
	exitOK       = 0
	exitRejected = 1 // the job was rejected, or the command failed
	exitUsage    = 2
	exitNoDaemon = 69 // EX_UNAVAILABLE: --route require and no daemon
	exitBusy     = 75 // EX_TEMPFAIL: store lock held, queue full, or wait timed out
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
		m.usage()
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
	case "lock":
		return (&LockCommand{m}).Run(ctx, args)
	case "recover":
		return (&RecoverCommand{m}).Run(ctx, args)
	case "demo":
		return (&DemoCommand{m}).Run(ctx, args)
	case "help", "-h", "--help":
		m.usage()
		return nil
	case "version":
		fmt.Fprintln(m.Stdout, Version)
		return nil
	}
	m.usage()
	return usageError("unknown command %q", cmd)
}

func (m *Main) usage() {
	fmt.Fprint(m.Stderr, strings.TrimLeft(`
scribe: one writer for many callers.

Usage:
  scribe serve  --store DIR [flags]                 run the daemon for a store
  scribe submit --store DIR [flags] OP PATH [DATA|-] queue one op (DATA from stdin if - or absent)
  scribe submit --store DIR [flags] --job FILE       queue a multi-op job (FILE may be -)
  scribe submit --store DIR [flags] exec NAME [ARGS] run an allowlisted command in the daemon
  scribe status --store DIR [--json] [JOB_ID]        daemon status, or a job's outcome
  scribe lock   --store DIR [--wait DUR] -- CMD ARGS run CMD holding the store lock
  scribe recover --store DIR [--abandon]            finish, or give up, an interrupted batch
  scribe demo                                        show the queue at work on a temporary store
  scribe version

Run "scribe COMMAND -h" for a command's flags.
Exit codes: 0 done, 1 rejected or failed, 2 usage, 69 no daemon (--route require),
75 busy (store lock held, queue full, or wait timed out).
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
	case errors.Is(err, client.ErrNoDaemon):
		return exitNoDaemon
	case errors.Is(err, client.ErrBusy), errors.Is(err, client.ErrQueueFull), errors.Is(err, errWaitTimeout),
		errors.Is(err, client.ErrUnavailable), errors.Is(err, daemon.ErrRunning):
		return exitBusy
	}
	return exitRejected // a rejection (queue.ErrRejected), or any other failure
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func (m *Main) newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(m.Stderr, "Usage: scribe %s %s\n\nFlags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags, turning a bad flag into a usage error.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &exitError{code: exitOK}
		}
		return &exitError{code: exitUsage}
	}
	return nil
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

func requireStore(store string) error {
	if store == "" {
		return usageError("--store is required")
	}
	return nil
}
