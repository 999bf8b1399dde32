package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// A Form is one way to call a command: what follows "scribe NAME", and
// what it does, in one line.
type Form struct {
	Args    string
	Summary string
}

// Command is an entry of the table of commands, which dispatch, `scribe
// --help`, shell completion and cmd/scribe's doc comment all read.
type Command struct {
	// Name is the word after scribe.
	Name string
	// Forms are the command's synopses; the first one's summary is the
	// command's.
	Forms []Form
	// Help is what `scribe NAME --help` prints between the usage lines
	// and the flags.
	Help string
	// FirstArgs are the words the first argument may be, for completion
	// (submit's ops, say); nil for any.
	FirstArgs []string
	// Setup defines the command's flags on fs and returns what runs the
	// command with the arguments left once they are parsed. Help, a bad
	// flag and completion are the framework's.
	Setup func(m *Main, fs *FlagSet) func(ctx context.Context, args []string) error
	// Run runs a command that parses its own arguments, help included,
	// instead of Setup; completion knows none of its flags.
	Run func(ctx context.Context, m *Main, args []string) error
	// JSON says that with --json, stdout holds JSON whatever happens: a
	// failure before anything was printed prints {"error", "hint"}.
	JSON bool
	// Heavy says that the command links what a hook's binary must not:
	// nats-server, prometheus or the MCP SDK. Heavy commands live in
	// packages apart from the light ones, so that a binary of the light
	// ones links without them.
	Heavy bool
	// Forwarded says that this binary hands the command to scribed, the
	// binary of the whole table (Forward).
	Forwarded bool
}

// Summary is the command's one-line summary.
func (c *Command) Summary() string {
	if len(c.Forms) == 0 {
		return ""
	}
	return c.Forms[0].Summary
}

// Main is the command line: its standard streams, what main gives the
// commands, and the table of commands.
type Main struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Version is scribe's version.
	Version string
	// Commands is the table of commands, in the order --help lists them.
	Commands []Command
	// CallerConfig reads the keys a caller takes from a store's config
	// file at path (docs/config.md#autostart), and only those, printing
	// their problems on stderr; nil reads nothing. The file is serve's,
	// and so is its decoder.
	CallerConfig func(path string, stderr io.Writer, keys ...string) (*CallerConfig, error)
	// Scribed finds scribed, the binary that runs the daemon and the
	// commands this one forwards (FindScribed), reporting on stderr what
	// it does to find it; nil in scribed itself, which runs them all.
	Scribed func(stderr io.Writer) (string, error)

	configs map[string]configRead // callerConfig's, by path and keys
}

// configRead is one read of a config file by CallerConfig.
type configRead struct {
	cfg *CallerConfig
	err error
}

// CallerConfig is what a caller that may start a daemon takes from a
// store's config file; a nil field is not set there.
type CallerConfig struct {
	Autostart *bool
	ExitIdle  *time.Duration
	// LockFile is the store's lock file (lock_file), absolute.
	LockFile *string
}

// Lookup is the command name, or nil.
func (m *Main) Lookup(name string) *Command {
	for i := range m.Commands {
		if m.Commands[i].Name == name {
			return &m.Commands[i]
		}
	}
	return nil
}

// Run runs the command args name: help (-h, --help, help [COMMAND]) on
// stdout, a usage error on stderr.
func (m *Main) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		m.writeUsage(m.Stderr)
		return Usagef("no command")
	}
	name, args := args[0], args[1:]
	switch name {
	case "-h", "--help":
		m.writeUsage(m.Stdout)
		return nil
	case "--version":
		name = "version"
	}
	c := m.Lookup(name)
	if c == nil {
		return m.unknown(name)
	}
	if c.JSON && jsonAsked(args) {
		return m.guardJSON(ctx, c, args)
	}
	return m.run(ctx, c, args)
}

// unknown is the error for an unknown command.
func (m *Main) unknown(name string) error {
	near, bestD := "", 3
	for _, c := range m.Commands {
		if d := distance(name, c.Name); d < bestD && !strings.HasPrefix(name, "-") {
			near, bestD = c.Name, d
		}
	}
	if near != "" {
		return Usagef("unknown command %q (did you mean %s?); see scribe --help", name, near)
	}
	return Usagef("unknown command %q; see scribe --help", name)
}

// run parses c's flags and runs it.
func (m *Main) run(ctx context.Context, c *Command, args []string) error {
	if c.Run != nil {
		return c.Run(ctx, m, args)
	}
	fs := NewFlagSet(c.Name)
	run := c.Setup(m, fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, errHelp) {
			c.writeHelp(m.Stdout, fs)
			return nil
		}
		return err
	}
	err := run(ctx, fs.Args())
	// A usage error says where to look: the command's help, unless it
	// names a place itself.
	var ex *ExitError
	if errors.As(err, &ex) && ex.usage && ex.Err != nil && !strings.Contains(ex.Err.Error(), "--help") {
		return &ExitError{Code: ex.Code, Err: fmt.Errorf("%w; see scribe %s --help", ex.Err, c.Name), usage: true}
	}
	return err
}

// Flags is c's flag set, as Setup defines it, for completion and checks;
// nil for a command that parses its own arguments.
func (m *Main) Flags(c *Command) *FlagSet {
	if c.Setup == nil {
		return nil
	}
	fs := NewFlagSet(c.Name)
	c.Setup(m, fs)
	return fs
}

// writeHelp writes c's help: its usage lines, its Help, its flags.
func (c *Command) writeHelp(w io.Writer, fs *FlagSet) {
	for i, f := range c.Forms {
		lead := "Usage: "
		if i > 0 {
			lead = "       "
		}
		fmt.Fprintln(w, strings.TrimRight(lead+"scribe "+c.Name+" "+f.Args, " "))
	}
	if h := strings.TrimSpace(c.Help); h != "" {
		fmt.Fprintf(w, "\n%s\n", h)
	}
	if fs != nil {
		fmt.Fprintf(w, "\nFlags:\n")
		fs.WriteUsages(w)
	}
}

// writeUsage writes what `scribe --help` prints: every command of the
// table, and what holds for all.
func (m *Main) writeUsage(w io.Writer) {
	fmt.Fprint(w, "scribe: one writer for many callers.\n\nUsage:\n")
	for _, line := range List(m.Commands) {
		fmt.Fprintln(w, "  "+line)
	}
	fmt.Fprint(w, `
Run "scribe COMMAND --help" or "scribe help COMMAND" for a command's flags. --store defaults
to $SCRIBE_STORE. Flags may follow arguments, except after submit's OP and lock's --.
Exit codes: 0 done, 1 rejected or failed, 2 usage, 69 no daemon (--route require),
75 busy (store lock held, queue full, or wait timed out), 130 interrupted (the job
may still be applied: scribe status ID).
`)
}

// listColumn is where List starts the summaries, at most: a synopsis
// longer than that has its summary on the next line.
const listColumn = 56

// List is the table of commands as `scribe --help` and cmd/scribe's doc
// comment show it: for each form, "scribe NAME ARGS", then its summary,
// in a column.
func List(cmds []Command) []string {
	width, col := 0, 0
	for _, c := range cmds {
		width = max(width, len(c.Name))
	}
	left := func(c Command, f Form) string {
		return strings.TrimRight(fmt.Sprintf("scribe %-*s %s", width, c.Name, f.Args), " ")
	}
	for _, c := range cmds {
		for _, f := range c.Forms {
			if n := utf8.RuneCountInString(left(c, f)); n <= listColumn {
				col = max(col, n+2)
			}
		}
	}
	var lines []string
	for _, c := range cmds {
		for _, f := range c.Forms {
			l := left(c, f)
			switch n := utf8.RuneCountInString(l); {
			case f.Summary == "":
				lines = append(lines, l)
			case n+2 > col:
				lines = append(lines, l, strings.Repeat(" ", col)+f.Summary)
			default:
				lines = append(lines, l+strings.Repeat(" ", col-n)+f.Summary)
			}
		}
	}
	return lines
}

// Main runs the command line args, SIGINT and SIGTERM ending its
// context, and returns the exit code: what a main package's main does,
// which exits next. The signals stay caught until then: stopping them
// waits for the runtime's signal loop to settle, a switch between
// threads that cost a hook process about 5% of its CPU.
func (m *Main) Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal takes the default action: exit at once
	}()
	return m.Exit(m.Run(ctx, args))
}

// Exit reports err as main does, on stderr: the error, then its hints,
// each on a line of its own after "scribe: ". It returns the exit code.
func (m *Main) Exit(err error) int {
	if err != nil {
		var ex *ExitError
		if !errors.As(err, &ex) || ex.Err != nil {
			fmt.Fprintln(m.Stderr, "scribe:", err)
		}
		for _, h := range hints(err) {
			fmt.Fprintln(m.Stderr, "scribe:", h)
		}
	}
	return ExitCode(err)
}

// Logger is a command's logger: text on stderr at level.
func (m *Main) Logger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, Usagef("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// IsTerminal reports whether w is a terminal, for progress display.
func IsTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// jsonFailure is what a command asked for JSON prints on stdout when it
// fails before printing anything else: a bad flag, a missing store, no
// daemon, an I/O error. The exit code says the same as without --json.
type jsonFailure struct {
	Error string `json:"error"`
	Hint  string `json:"hint,omitempty"`
}

// guardJSON runs c, asked for JSON, so that stdout holds valid JSON
// whatever happens: if it fails without having written to stdout,
// guardJSON prints a jsonFailure there.
func (m *Main) guardJSON(ctx context.Context, c *Command, args []string) error {
	out := &recordingWriter{w: m.Stdout}
	gm := *m
	gm.Stdout = out
	err := gm.run(ctx, c, args)
	if err == nil || out.wrote {
		return err
	}
	_ = WriteJSON(m.Stdout, jsonFailure{Error: err.Error(), Hint: hint(err)})
	return err
}

// jsonAsked reports whether args ask for JSON output: --json (or
// --json=true...) before any "--".
func jsonAsked(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, val, hasVal := strings.Cut(a, "=")
		if name != "--json" {
			continue
		}
		if !hasVal {
			return true
		}
		b, err := strconv.ParseBool(val)
		return err != nil || b // a bad value is a usage error: answer in JSON
	}
	return false
}

// recordingWriter records whether anything was written through it.
type recordingWriter struct {
	w     io.Writer
	wrote bool
}

func (r *recordingWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		r.wrote = true
	}
	return r.w.Write(p)
}

// WriteJSON writes v as indented JSON, as every --json does.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
