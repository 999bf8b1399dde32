package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testMain is a command line of a few commands, its output recorded.
func testMain(t *testing.T) (*Main, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Version: "1.2.3"}
	m.Commands = []Command{
		{
			Name:  "echo",
			Forms: []Form{{Args: "[--json] [--id ID] WORD...", Summary: "print the words"}, {Args: "--other", Summary: "another form"}},
			Help:  "Prints its words, one a line.",
			JSON:  true,
			Setup: func(m *Main, fs *FlagSet) func(context.Context, []string) error {
				asJSON := fs.JSON("the words")
				id := fs.String("id", "", "an `ID`")
				return func(_ context.Context, args []string) error {
					if len(args) == 0 {
						return Usagef("want a WORD")
					}
					if *asJSON {
						return WriteJSON(m.Stdout, map[string]any{"id": *id, "words": args})
					}
					for _, a := range args {
						m.Stdout.Write([]byte(a + "\n"))
					}
					return nil
				}
			},
		},
		{
			Name:  "wait",
			Forms: []Form{{Args: "[--wait[=DUR]] -- CMD", Summary: "a strict command"}},
			Setup: func(m *Main, fs *FlagSet) func(context.Context, []string) error {
				fs.Strict()
				var w Wait
				fs.WaitVar(&w, "wait", "wait at most `DUR`")
				return func(_ context.Context, args []string) error {
					return WriteJSON(m.Stdout, map[string]any{"on": w.On, "bound": w.Bound.String(), "args": args})
				}
			},
		},
		HelpCommand(),
		VersionCommand(),
		CompletionCommand(),
	}
	return m, &stdout, &stderr
}

// run runs args as main does: stdout, stderr and the exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	m, stdout, stderr := testMain(t)
	code := m.Exit(m.Run(t.Context(), args))
	return stdout.String(), stderr.String(), code
}

// Help asked for is on stdout with exit 0; a usage error is one line on
// stderr, with where to look, and exit 2.
func TestHelpAndUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"-h"}, "  scribe echo       [--json] [--id ID] WORD...  print the words\n", ExitOK},
		{[]string{"--help"}, "scribe version", ExitOK},
		{[]string{"help"}, "scribe completion bash|zsh|fish", ExitOK},
		{[]string{"echo", "-h"}, "Usage: scribe echo [--json] [--id ID] WORD...\n       scribe echo --other\n\nPrints its words", ExitOK},
		{[]string{"echo", "x", "--help"}, "  --id ID\n      an ID\n", ExitOK},
		{[]string{"help", "echo"}, "Usage: scribe echo", ExitOK},
		{[]string{"wait", "--help"}, "  --wait[=DUR]\n      wait at most DUR\n", ExitOK},
		{[]string{}, "Usage:", ExitUsage},
		{[]string{"frob"}, "scribe: unknown command \"frob\"; see scribe --help\n", ExitUsage},
		{[]string{"ecoh"}, "scribe: unknown command \"ecoh\" (did you mean echo?); see scribe --help\n", ExitUsage},
		{[]string{"help", "frob"}, `unknown command "frob"`, ExitUsage},
		{[]string{"echo", "--idd", "x", "y"}, "scribe: unknown flag --idd (did you mean --id?); see scribe echo --help\n", ExitUsage},
		{[]string{"echo", "--bogus", "y"}, "scribe: unknown flag --bogus; see scribe echo --help\n", ExitUsage},
		{[]string{"echo", "-json", "y"}, "scribe: unknown flag -json: a long flag takes two dashes, --json; see scribe echo --help\n", ExitUsage},
		{[]string{"echo", "y", "--id"}, "scribe: flag --id needs a value; see scribe echo --help\n", ExitUsage},
		{[]string{"echo", "--json=maybe", "y"}, "--json \"maybe\": want true or false", ExitUsage},
		{[]string{"wait", "--wait=soon", "--", "true"}, "--wait \"soon\": want true, false or a positive duration", ExitUsage},
		{[]string{"echo"}, "scribe: want a WORD; see scribe echo --help\n", ExitUsage},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := run(t, tc.args...)
			assert.Equal(t, tc.code, code)
			if tc.code == ExitOK {
				assert.Contains(t, stdout, tc.want)
				assert.Empty(t, stderr)
				return
			}
			assert.Contains(t, stderr, tc.want)
			if !jsonAsked(tc.args) {
				assert.Empty(t, stdout)
			}
			if len(tc.args) > 0 {
				assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			}
		})
	}
}

// Flags may follow arguments, up to "--"; a strict flag set stops at
// the first argument.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		strict bool
		json   bool
		id     string
		rest   []string
		code   int // of the error; 0 for none
	}{
		{name: "flags first", args: []string{"--json", "J"}, json: true, rest: []string{"J"}},
		{name: "flag after", args: []string{"J", "--json"}, json: true, rest: []string{"J"}},
		{name: "flags around", args: []string{"--id", "x", "A", "--json", "B"}, json: true, id: "x", rest: []string{"A", "B"}},
		{name: "with =", args: []string{"--id=x", "A"}, id: "x", rest: []string{"A"}},
		{name: "dashes end flags", args: []string{"A", "--", "--json", "-x"}, rest: []string{"A", "--json", "-x"}},
		{name: "a lone dash is an argument", args: []string{"-", "--json"}, json: true, rest: []string{"-"}},
		{name: "no arguments", args: nil, rest: []string{}},
		{name: "a bad flag after", args: []string{"A", "--bogus"}, code: ExitUsage},
		{name: "strict stops at the first argument", args: []string{"A", "--json"}, strict: true, rest: []string{"A", "--json"}},
		{name: "strict, data that looks like a flag", args: []string{"--id", "x", "put", "f", "-n"}, strict: true, id: "x", rest: []string{"put", "f", "-n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := NewFlagSet("t")
			if tc.strict {
				fs.Strict()
			}
			asJSON := fs.JSON("it")
			id := fs.String("id", "", "")
			err := fs.Parse(tc.args)
			if tc.code != 0 {
				require.Error(t, err)
				assert.Equal(t, tc.code, ExitCode(err))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.json, *asJSON)
			assert.Equal(t, tc.id, *id)
			assert.Equal(t, tc.rest, append([]string{}, fs.Args()...))
		})
	}
}

// --wait is bare (no bound), =DUR, or DUR as the next word when it is a
// duration.
func TestParseWait(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		on    bool
		bound time.Duration
		json  bool
		rest  []string
		usage string
	}{
		{name: "none", args: []string{"append", "f", "x"}, rest: []string{"append", "f", "x"}},
		{name: "bare", args: []string{"--wait", "append", "f", "x"}, on: true, rest: []string{"append", "f", "x"}},
		{name: "with =", args: []string{"--wait=10s", "append", "f", "x"}, on: true, bound: 10 * time.Second, rest: []string{"append", "f", "x"}},
		{name: "next word", args: []string{"--wait", "10s", "append", "f", "x"}, on: true, bound: 10 * time.Second, rest: []string{"append", "f", "x"}},
		{name: "flags after the bound", args: []string{"--wait", "10s", "--json", "append", "f", "x"}, on: true, bound: 10 * time.Second, json: true, rest: []string{"append", "f", "x"}},
		{name: "lock's dashes", args: []string{"--wait", "10s", "--", "tar", "-cf", "x"}, on: true, bound: 10 * time.Second, rest: []string{"tar", "-cf", "x"}},
		{name: "lock, bare", args: []string{"--wait", "--", "10s"}, on: true, rest: []string{"10s"}},
		{name: "=true then a duration", args: []string{"--wait=true", "10s"}, on: true, rest: []string{"10s"}},
		{name: "not a duration", args: []string{"--wait", "soon"}, on: true, rest: []string{"soon"}},
		{name: "DATA that looks like a duration", args: []string{"--wait", "append", "f", "10s"}, on: true, rest: []string{"append", "f", "10s"}},
		{name: "zero", args: []string{"--wait", "0s", "append", "f"}, usage: "--wait 0s: want a positive duration"},
		{name: "false", args: []string{"--wait=false", "append", "f"}, rest: []string{"append", "f"}},
		{name: "a bad bound", args: []string{"--wait=-1s", "append", "f"}, usage: "want true, false or a positive duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := NewFlagSet("t")
			fs.Strict()
			var w Wait
			fs.WaitVar(&w, "wait", "")
			asJSON := fs.Bool("json", false, "")
			err := fs.Parse(tc.args)
			if tc.usage != "" {
				require.Error(t, err)
				assert.Equal(t, ExitUsage, ExitCode(err))
				assert.Contains(t, err.Error(), tc.usage)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.on, w.On)
			assert.Equal(t, tc.bound, w.Bound)
			assert.Equal(t, tc.json, *asJSON)
			assert.Equal(t, tc.rest, fs.Args())
		})
	}
}

// Every placeholder of the help reads as one: a word in capitals.
func TestSpelling(t *testing.T) {
	fs := NewFlagSet("t")
	fs.Store()
	fs.LockFile()
	fs.Route()
	fs.JSON("it")
	fs.Autostart()
	fs.Remote()
	var w Wait
	fs.WaitVar(&w, "wait", "at most `DUR`")
	var help bytes.Buffer
	fs.WriteUsages(&help)
	for _, want := range []string{"--store DIR\n", "--lock-file FILE\n", "--route ROUTE\n", "--json\n", "--autostart\n",
		"--exit-idle DUR\n", "--nats-url URL\n", "--store-id ID\n", "--password PASSWORD\n", "--wait[=DUR]\n", "-h, --help\n"} {
		assert.Contains(t, help.String(), "  "+want)
	}
	assert.Equal(t, 1, strings.Count(help.String(), "--lock-file"), "one --lock-file, one description")
}

func TestJSONAsked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--json"}, true},
		{[]string{"-json"}, false}, // a usage error, answered as one
		{[]string{"--store", "s", "job", "--json"}, true},
		{[]string{"--json=true"}, true},
		{[]string{"--json=false"}, false},
		{[]string{"--json=maybe"}, true}, // a usage error, answered in JSON
		{[]string{"--", "--json"}, false},
		{[]string{"json"}, false},
		{[]string{"--jsonl"}, false},
	} {
		assert.Equal(t, tc.want, jsonAsked(tc.args), "%q", tc.args)
	}
}

// With --json, a command that fails before printing prints {"error"}; one
// that printed, or succeeded, or was asked for help, gets nothing more.
func TestGuardJSON(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		wantError string // "": stdout is what the command printed, or its help
	}{
		{"bad flag", []string{"echo", "--json", "--bogus"}, "unknown flag --bogus; see scribe echo --help"},
		{"usage error", []string{"echo", "--json"}, "want a WORD; see scribe echo --help"},
		{"success", []string{"echo", "--json", "a"}, ""},
		{"help", []string{"echo", "--json", "-h"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, _, _ := run(t, tc.args...)
			var f jsonFailure
			if tc.wantError == "" {
				assert.NotContains(t, stdout, `"error"`)
				return
			}
			require.NoError(t, json.Unmarshal([]byte(stdout), &f), stdout)
			assert.Equal(t, tc.wantError, f.Error)
		})
	}
}

func TestExitCodeAndHints(t *testing.T) {
	assert.Equal(t, ExitOK, ExitCode(nil))
	assert.Equal(t, ExitRejected, ExitCode(errors.New("x")))
	assert.Equal(t, ExitBusy, ExitCode(ErrWaitTimeout))
	assert.Equal(t, 3, ExitCode(Exit(3, nil)))
	err := WithHint(Usagef("bad"), "do this")
	assert.Equal(t, ExitUsage, ExitCode(err))
	assert.Equal(t, []string{"do this"}, hints(err))
	var stderr bytes.Buffer
	m := &Main{Stderr: &stderr}
	assert.Equal(t, ExitUsage, m.Exit(err))
	assert.Equal(t, "scribe: bad\nscribe: do this\n", stderr.String())
	stderr.Reset()
	assert.Equal(t, 7, m.Exit(Exit(7, nil)))
	assert.Empty(t, stderr.String(), "a code alone prints nothing")
}

func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		stdout, stderr, code := run(t, args...)
		assert.Equal(t, ExitOK, code)
		assert.Equal(t, "1.2.3\n", stdout)
		assert.Empty(t, stderr)
	}
	_, _, code := run(t, "version", "extra")
	assert.Equal(t, ExitUsage, code)
}

// --store is required, from the flag or $SCRIBE_STORE, and must be a
// folder that exists: scribe never creates one.
func TestRequireStore(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for _, tc := range []struct {
		store string
		code  int
		want  string
	}{
		{dir, ExitOK, ""},
		{"", ExitUsage, "--store is required (or set $SCRIBE_STORE)"},
		{filepath.Join(dir, "no such"), ExitRejected, "does not exist; create the folder first: mkdir -p '" + filepath.Join(dir, "no such") + "'"},
		{file, ExitRejected, "is not a folder"},
	} {
		err := RequireStore(tc.store)
		assert.Equal(t, tc.code, ExitCode(err), "%q", tc.store)
		if tc.want != "" && assert.Error(t, err) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
	t.Setenv("SCRIBE_STORE", dir)
	assert.Equal(t, dir, *NewFlagSet("t").Store(), "$SCRIBE_STORE is the default")
}

// A --lock-file whose folder does not exist is a usage error naming the
// folder.
func TestCheckLockFileFolder(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	assert.NoError(t, CheckLockFileFolder(""))
	assert.NoError(t, CheckLockFileFolder(filepath.Join(dir, "new.lock")))
	err := CheckLockFileFolder(filepath.Join(dir, "gone", "x.lock"))
	assert.Equal(t, ExitUsage, ExitCode(err))
	assert.EqualError(t, err, "--lock-file "+filepath.Join(dir, "gone", "x.lock")+": its folder "+filepath.Join(dir, "gone")+" does not exist")
	err = CheckLockFileFolder(filepath.Join(file, "x.lock"))
	assert.Equal(t, ExitUsage, ExitCode(err))
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/home/me/notes": "/home/me/notes",
		"a b":            "'a b'",
		"it's":           `'it'\''s'`,
		"":               "''",
		"~/x":            "'~/x'",
	} {
		assert.Equal(t, want, ShellQuote(in), in)
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"wait", "wait", 0}, {"wiat", "wait", 1}, {"wat", "wait", 1}, {"route", "ruote", 1}, {"json", "store", 4}, {"", "ab", 2}} {
		assert.Equal(t, tc.d, distance(tc.a, tc.b), "%s %s", tc.a, tc.b)
	}
}

// The list of commands has a line for each form, its summary in a
// column; a synopsis too long for it has its summary on the next line.
func TestList(t *testing.T) {
	m, _, _ := testMain(t)
	m.Commands[1].Forms = append(m.Commands[1].Forms, Form{Args: "--a-very-long-flag VALUE --and-another VALUE -- CMD", Summary: "a long one"})
	assert.Equal(t, []string{
		"scribe echo       [--json] [--id ID] WORD...  print the words",
		"scribe echo       --other                     another form",
		"scribe wait       [--wait[=DUR]] -- CMD       a strict command",
		"scribe wait       --a-very-long-flag VALUE --and-another VALUE -- CMD",
		"                                              a long one",
		"scribe help       [COMMAND]                   the commands, or a command's help",
		"scribe version                                the version (also --version)",
		"scribe completion bash|zsh|fish               print the shell completion script",
	}, List(m.Commands))
}
