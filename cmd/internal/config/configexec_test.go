package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/exec"
	"github.com/scribehq/scribe/writer/lock"
)

// execFixture is a folder with a config file's path, an executable
// bin/tool (also the only thing on PATH) and a file bin/data that is not
// executable.
type execFixture struct {
	dir, path, tool, data string
}

func newExecFixture(t *testing.T) execFixture {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	f := execFixture{dir: dir, path: filepath.Join(dir, "config.toml"), tool: filepath.Join(bin, "tool"), data: filepath.Join(bin, "data")}
	require.NoError(t, os.WriteFile(f.tool, []byte("#!/bin/sh\necho tool\n"), 0o755))
	require.NoError(t, os.WriteFile(f.data, []byte("data\n"), 0o644))
	t.Setenv("PATH", bin)
	return f
}

func TestDecodeConfigExec(t *testing.T) {
	f := newExecFixture(t)
	doc := `batch = 10

# the allowlist
[exec.mine]
program = "tool"
args = ["--quiet", "-n"]
allow_args = ['[a-z]+', '--since=[0-9]+']
dir = "sub/dir"
timeout = "10m"
grace = "2s"
max_output = 1024
rerun_safe = true
busy_exit_codes = [75, 3]
lock_file = "locks/mine.lock"
env = { LC_ALL = "C", A = "1" }

[exec."other.tool"]
program = "bin/tool"
timeout = "1s"

[exec.third]
program = "` + f.tool + `"
timeout = "90s"
[exec.third.env]
B = "x = y"
`
	c, err := Decode(f.path, []byte(doc))
	require.NoError(t, err)
	want := []exec.Command{
		{
			Name: "mine", Program: f.tool, Args: []string{"--quiet", "-n"}, AllowArgs: []string{"[a-z]+", "--since=[0-9]+"},
			Dir: "sub/dir", Timeout: 10 * time.Minute, Grace: 2 * time.Second, MaxOutput: 1024, RerunSafe: true,
			BusyExitCodes: []int{75, 3}, LockFile: filepath.Join(f.dir, "locks", "mine.lock"), Env: []string{"A=1", "LC_ALL=C"},
		},
		{Name: "other.tool", Program: f.tool, Timeout: time.Second, Grace: exec.DefaultGrace, MaxOutput: exec.DefaultMaxOutput},
		{Name: "third", Program: f.tool, Timeout: 90 * time.Second, Grace: exec.DefaultGrace, MaxOutput: exec.DefaultMaxOutput, Env: []string{"B=x = y"}},
	}
	require.Len(t, c.Commands, len(want))
	for i := range want {
		assert.EqualExportedValues(t, want[i], c.Commands[i])
	}
	assert.Equal(t, int64(10), *c.Batch)
	for key, line := range map[string]int{
		"exec": 4, "exec.mine": 4, "exec.mine.program": 5, "exec.mine.timeout": 9, "exec.mine.env": 15,
		`exec."other.tool"`: 17, `exec."other.tool".timeout`: 19, "exec.third.env": 24,
	} {
		assert.Equal(t, line, c.Lines[key], key)
	}

	var out bytes.Buffer
	printCommands(&out, c)
	assert.Contains(t, out.String(), "\n[exec.mine]                              # file "+f.path+":4\n")
	assert.Contains(t, out.String(), "\nprogram = \""+f.tool+"\"")
	assert.Regexp(t, `\ngrace = "5s" +# default\n`, out.String())
	assert.Contains(t, out.String(), "\n[exec.\"other.tool\"]")
	assert.Contains(t, out.String(), `env = { A = "1", LC_ALL = "C" }`)
	// What --check-config prints is a config file that decodes to the same.
	again, err := Decode(f.path, out.Bytes())
	require.NoError(t, err, out.String())
	for i := range want {
		assert.EqualExportedValues(t, want[i], again.Commands[i])
	}
}

func TestDecodeConfigExecProblems(t *testing.T) {
	f := newExecFixture(t)
	const head = "[exec.mine]\nprogram = \"tool\"\ntimeout = \"1m\"\n" // lines 1-3
	type problem struct {
		line int
		key  string
		text string // a substring of the problem
	}
	for _, tc := range []struct {
		name string
		doc  string
		want []problem
	}{
		{name: "exec not a table", doc: "exec = 5\n", want: []problem{{1, "exec", "wrong type: an integer, want a table"}}},
		{name: "exec an array of tables", doc: "\n[[exec]]\nprogram = \"tool\"\n", want: []problem{{2, "exec", "wrong type: an array"}}},
		{name: "command not a table", doc: "[exec]\nmine = \"tool\"\n", want: []problem{{2, "exec.mine", "wrong type: a string, want a table"}}},
		{name: "bad command name", doc: "[exec.\"my tool\"]\nprogram = \"tool\"\ntimeout = \"1m\"\n", want: []problem{{1, `exec."my tool"`, "command name"}}},
		{name: "unknown key", doc: head + "\nbogus = 1\n", want: []problem{{5, "exec.mine.bogus", "unknown key"}}},
		{name: "key of another case", doc: head + "Timeout = \"1m\"\n", want: []problem{{4, "exec.mine.Timeout", "unknown key"}}},
		{name: "missing program", doc: "\n[exec.mine]\ntimeout = \"1m\"\n", want: []problem{{2, "exec.mine.program", "missing"}}},
		{name: "missing timeout", doc: "[exec.mine]\nprogram = \"tool\"\n", want: []problem{{1, "exec.mine.timeout", "missing"}}},
		{name: "program not in PATH", doc: "[exec.mine]\nprogram = \"nosuchtool\"\ntimeout = \"1m\"\n", want: []problem{{2, "exec.mine.program", `"nosuchtool": not found in PATH`}}},
		{name: "program missing", doc: "[exec.mine]\nprogram = \"/nonexistent/tool\"\ntimeout = \"1m\"\n", want: []problem{{2, "exec.mine.program", "/nonexistent/tool: no such file"}}},
		{name: "program relative, missing", doc: "[exec.mine]\nprogram = \"./tool\"\ntimeout = \"1m\"\n", want: []problem{{2, "exec.mine.program", filepath.Join(f.dir, "tool") + ": no such file"}}},
		{name: "program not executable", doc: "[exec.mine]\nprogram = \"bin/data\"\ntimeout = \"1m\"\n", want: []problem{{2, "exec.mine.program", "not an executable file"}}},
		{name: "program a folder", doc: "[exec.mine]\nprogram = \"bin\"\ntimeout = \"1m\"\n", want: []problem{{2, "exec.mine.program", "not found in PATH"}}},
		{name: "program a folder by path", doc: "[exec.mine]\nprogram = \"./bin\"\ntimeout = \"1m\"\n", want: []problem{{2, "exec.mine.program", "not an executable file"}}},
		{name: "program empty", doc: "[exec.mine]\nprogram = \"\"\ntimeout = \"1m\"\n", want: []problem{{2, "exec.mine.program", "empty"}}},
		{name: "program not a string", doc: "[exec.mine]\nprogram = [\"tool\"]\ntimeout = \"1m\"\n", want: []problem{{2, "exec.mine.program", "wrong type: an array, want a string"}}},
		{name: "timeout zero", doc: head[:len(head)-len("timeout = \"1m\"\n")] + "timeout = \"0s\"\n", want: []problem{{3, "exec.mine.timeout", `"0s": want a positive duration`}}},
		{name: "timeout an integer", doc: "[exec.mine]\nprogram = \"tool\"\ntimeout = 60\n", want: []problem{{3, "exec.mine.timeout", "wrong type: an integer, want a duration string"}}},
		{name: "timeout not a duration", doc: "[exec.mine]\nprogram = \"tool\"\ntimeout = \"1 day\"\n", want: []problem{{3, "exec.mine.timeout", "not a duration"}}},
		{name: "args not an array", doc: head + "args = \"-n\"\n", want: []problem{{4, "exec.mine.args", "wrong type: a string, want an array of strings"}}},
		{name: "args not strings", doc: head + "args = [\"-n\", 1]\n", want: []problem{{4, "exec.mine.args", "element 1: wrong type: an integer, want a string"}}},
		{name: "allow_args bad regexp", doc: head + "allow_args = ['[a-z]+', '(a']\n", want: []problem{{4, "exec.mine.allow_args", `"(a": error parsing regexp`}}},
		{name: "dir escapes", doc: head + "dir = \"../elsewhere\"\n", want: []problem{{4, "exec.mine.dir", `".." segment`}}},
		{name: "dir absolute", doc: head + "dir = \"/tmp\"\n", want: []problem{{4, "exec.mine.dir", "absolute"}}},
		{name: "dir in .scribe", doc: head + "dir = \".scribe/x\"\n", want: []problem{{4, "exec.mine.dir", "inside .scribe/"}}},
		{name: "dir empty", doc: head + "dir = \"\"\n", want: []problem{{4, "exec.mine.dir", "empty"}}},
		{name: "grace negative", doc: head + "grace = \"-1s\"\n", want: []problem{{4, "exec.mine.grace", "positive"}}},
		{name: "max_output zero", doc: head + "max_output = 0\n", want: []problem{{4, "exec.mine.max_output", "want 1 to 262144"}}},
		{name: "max_output too large", doc: head + "max_output = 1_000_000\n", want: []problem{{4, "exec.mine.max_output", "want 1 to 262144"}}},
		{name: "max_output a string", doc: head + "max_output = \"16k\"\n", want: []problem{{4, "exec.mine.max_output", "wrong type: a string, want an integer"}}},
		{name: "rerun_safe a string", doc: head + "rerun_safe = \"yes\"\n", want: []problem{{4, "exec.mine.rerun_safe", "wrong type: a string, want a boolean"}}},
		{name: "busy exit code 0", doc: head + "busy_exit_codes = [75, 0]\n", want: []problem{{4, "exec.mine.busy_exit_codes", "0: want exit codes 1 to 255"}}},
		{name: "busy exit code 256", doc: head + "busy_exit_codes = [256]\n", want: []problem{{4, "exec.mine.busy_exit_codes", "256: want exit codes 1 to 255"}}},
		{name: "busy exit code a string", doc: head + "busy_exit_codes = [\"75\"]\n", want: []problem{{4, "exec.mine.busy_exit_codes", "element 0: wrong type: a string, want an integer"}}},
		{name: "lock_file empty", doc: head + "lock_file = \"\"\n", want: []problem{{4, "exec.mine.lock_file", "empty"}}},
		{name: "lock_file not a string", doc: head + "lock_file = true\n", want: []problem{{4, "exec.mine.lock_file", "wrong type: a boolean"}}},
		{name: "env not a table", doc: head + "env = [\"A=1\"]\n", want: []problem{{4, "exec.mine.env", "wrong type: an array, want a table"}}},
		{name: "env bad name inline", doc: head + "env = { \"1BAD\" = \"x\" }\n", want: []problem{{4, "exec.mine.env.1BAD", `"1BAD" is not an environment variable name`}}},
		{name: "env bad name in a table", doc: head + "[exec.mine.env]\nGOOD = \"1\"\n\"BAD-NAME\" = \"x\"\n", want: []problem{{6, "exec.mine.env.BAD-NAME", `"BAD-NAME" is not an environment variable name`}}},
		{name: "env value not a string", doc: head + "[exec.mine.env]\nN = 1\n", want: []problem{{5, "exec.mine.env.N", "wrong type: an integer, want a string"}}},
		{name: "env SCRIBE_ variable", doc: head + "env = { SCRIBE_STORE = \"/elsewhere\" }\n", want: []problem{{4, "exec.mine.env.SCRIBE_STORE", "the daemon's to set"}}},
		{
			name: "dotted keys at the top level",
			doc:  "exec.mine.program = \"tool\"\nbatch = 5\nexec.mine.timeout = 60\n",
			want: []problem{{3, "exec.mine.timeout", "wrong type"}},
		},
		{
			name: "a multi-line value is not taken for keys",
			doc:  head + "args = [\n  \"a\",\n  \"b = c\",\n]\nmax_output = -1\n",
			want: []problem{{8, "exec.mine.max_output", "want 1 to"}},
		},
		{
			name: "every problem of every command, by line",
			doc:  "[exec.b]\nprogram = \"tool\"\ntimeout = \"0s\"\n\n[exec.a]\nprogram = \"nosuchtool\"\nbogus = 1\n",
			want: []problem{
				{3, "exec.b.timeout", "positive"},
				{5, "exec.a.timeout", "missing"},
				{6, "exec.a.program", "not found"},
				{7, "exec.a.bogus", "unknown key"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(f.path, []byte(tc.doc))
			require.Error(t, err)
			var errs Errors
			require.True(t, errors.As(err, &errs), "%v", err)
			require.Len(t, errs, len(tc.want), "%v", err)
			for i, w := range tc.want {
				assert.Equal(t, w.line, errs[i].Line, "%v", errs[i])
				assert.Equal(t, w.key, errs[i].Key, "%v", errs[i])
				assert.Contains(t, errs[i].Problem, w.text)
				assert.True(t, strings.HasPrefix(errs[i].Error(), f.path+":"+itoa(w.line)+": "+w.key+": "), errs[i].Error())
			}
		})
	}
}

// A command's lock file may not be the store lock, however it is named,
// nor anything in the store's .scribe folder: the daemon holds those.
func TestCheckCommandLocks(t *testing.T) {
	f := newExecFixture(t)
	store := filepath.Join(f.dir, "store")
	meta := queue.Layout{Root: store}.Meta()
	require.NoError(t, os.MkdirAll(meta, 0o700))
	storeLock := lock.DefaultPath(store)
	require.NoError(t, os.WriteFile(storeLock, nil, 0o600))
	require.NoError(t, os.Symlink(meta, filepath.Join(f.dir, "meta-link")))
	require.NoError(t, os.Link(storeLock, filepath.Join(f.dir, "hard.lock")))
	shared := filepath.Join(f.dir, "shared.lock") // a --lock-file store lock
	for _, tc := range []struct {
		name      string
		lockFile  string // the command's, in the file
		storeLock string // --lock-file or the file's lock_file; "" for the default
		problem   string // "" for none
	}{
		{name: "its own lock", lockFile: "tool.lock"},
		{name: "the default store lock", lockFile: storeLock, problem: "is the store lock file"},
		{name: "the default store lock, relative", lockFile: "store/.scribe/../.scribe/lock", problem: "is the store lock file"},
		{name: "through a symlinked folder", lockFile: "meta-link/lock", problem: "is the store lock file"},
		{name: "a hard link to it", lockFile: "hard.lock", problem: "is the store lock file " + storeLock},
		{name: "a shared store lock", lockFile: "shared.lock", storeLock: shared, problem: "is the store lock file"},
		{name: "the default lock, while the store lock is elsewhere", lockFile: storeLock, storeLock: shared, problem: "in the store's .scribe folder"},
		{name: "the daemon lock", lockFile: "store/.scribe/daemon.lock", problem: "in the store's .scribe folder"},
		{name: "beside .scribe", lockFile: "store/.scribe-tool.lock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := "\n[exec.mine]\nprogram = \"tool\"\ntimeout = \"1m\"\nlock_file = " + strconv.Quote(tc.lockFile) + "\n"
			c, err := Decode(f.path, []byte(doc))
			require.NoError(t, err)
			err = c.CheckCommandLocks(StoreLockPaths(store, tc.storeLock))
			if tc.problem == "" {
				assert.NoError(t, err)
				return
			}
			var errs Errors
			require.True(t, errors.As(err, &errs), "%v", err)
			require.Len(t, errs, 1)
			assert.Equal(t, f.path+":5: exec.mine.lock_file: ", strings.TrimSuffix(errs[0].Error(), errs[0].Problem))
			assert.Contains(t, errs[0].Problem, tc.problem)
		})
	}
	assert.NoError(t, (*File)(nil).CheckCommandLocks(storeLock, meta), "no file, no commands")
}
