package server

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
)

// What serve's flags still parse with: the standard flag package, until
// serve is on the command line's framework (cmd/internal/cli). Its help
// and its bad flags read as the other commands': the flags are written
// by cli's help, and a bad flag is one line with a hint.

// Exit codes serve and its config file use.
const (
	exitOK       = cli.ExitOK
	exitRejected = cli.ExitRejected
	exitUsage    = cli.ExitUsage
)

// usageError is a usage error (exit 2).
func usageError(format string, args ...any) error { return cli.Usagef(format, args...) }

// exitCode is the exit code of err.
func exitCode(err error) int { return cli.ExitCode(err) }

// What serve shares with the other commands: the command line's.
var (
	requireStore        = cli.RequireStore
	checkLockFileFolder = cli.CheckLockFileFolder
	shellQuote          = cli.ShellQuote
)

// newFlagSet returns serve's flag set, which reports errors instead of
// exiting. Help goes to stdout when asked for, a usage error to stderr
// (parse decides).
func (m *serveCommand) newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	out := &flagOutput{stdout: m.Stdout, stderr: m.Stderr}
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(&out.help, "Usage: scribe %s %s\n\nFlags:\n", name, usage)
		pfs := cli.NewFlagSet(name)
		fs.VisitAll(func(f *flag.Flag) {
			pfs.AddFlag(pflag.PFlagFromGoFlag(f))
			if ph := placeholder(f); ph != "" {
				pfs.SetPlaceholder(f.Name, ph)
			}
		})
		pfs.WriteUsages(&out.help)
	}
	return fs
}

// placeholder is how serve's help names a flag's value, as the other
// commands' help does: DUR for a duration, else the word of its usage in
// back quotes, in capitals ("" for a boolean).
func placeholder(f *flag.Flag) string {
	if g, ok := f.Value.(flag.Getter); ok {
		if _, ok := g.Get().(time.Duration); ok {
			return "DUR"
		}
	}
	word, _ := flag.UnquoteUsage(f)
	switch word {
	case "":
		return ""
	case "value", "int":
		return "N" // no word in back quotes: the type's
	case "folder":
		return "DIR"
	case "always":
		return "MODE" // --sync: always, or an interval
	case "job":
		return "BYTES" // --max-job-bytes: the largest job
	}
	return strings.ToUpper(word)
}

// flagOutput holds what a flag set prints while it parses, until parse
// knows whether it was asked for (stdout) or is an error (stderr).
type flagOutput struct {
	stdout, stderr io.Writer
	buf            bytes.Buffer // the flag package's message
	help           bytes.Buffer // the usage, if it was printed
}

func (o *flagOutput) Write(p []byte) (int, error) { return o.buf.Write(p) }

// parse parses flags, turning a bad flag into a usage error of one line.
// Flags may come after arguments, up to "--".
func parse(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		rest, err := parseOnce(fs, args)
		if err != nil {
			return err
		}
		n := len(args) - len(rest)
		if len(rest) == 0 || n > 0 && args[n-1] == "--" {
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

// parseOnce is one fs.Parse, its help sent where it belongs.
func parseOnce(fs *flag.FlagSet, args []string) ([]string, error) {
	err := fs.Parse(args)
	out, _ := fs.Output().(*flagOutput)
	switch {
	case errors.Is(err, flag.ErrHelp):
		if out != nil {
			_, _ = out.stdout.Write(out.help.Bytes())
		}
		return nil, cli.Exit(exitOK, nil)
	case err != nil:
		msg, _, _ := strings.Cut(strings.TrimSpace(out.buf.String()), "\n")
		msg = strings.Replace(msg, "flag provided but not defined: -", "unknown flag --", 1)
		return nil, usageError("%s; see scribe %s --help", msg, fs.Name())
	}
	if out != nil {
		out.buf.Reset()
	}
	return fs.Args(), nil
}

// given reports whether the flag name was set on fs's command line.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// natsFlags are serve's connection flags, defined with the client
// commands' (cli.Remote).
type natsFlags struct{ queue.Remote }

// registerConn adds the connection flags to fs.
func (f *natsFlags) registerConn(fs *flag.FlagSet) { cli.RemoteConnGo(fs, &f.Remote) }
