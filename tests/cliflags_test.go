package tests

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
)

// demanded reports whether a writer waits for store's lock: it holds a
// shared flock on the store's demand file while it waits.
func demanded(t testing.TB, store string) bool {
	t.Helper()
	f, err := os.Open(queue.Layout{Root: store}.Demand())
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	require.NoError(t, err)
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// A bad flag is one line on stderr that says what is wrong and where to
// look, and exit 2; with --json, stdout holds it as JSON too.
func TestCLIBadFlagIsOneLine(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "--store", store, "--wiat", "put", "f", "x"}, "scribe: unknown flag --wiat (did you mean --wait?); see scribe submit --help\n"},
		{[]string{"status", "--store", store, "--bogus"}, "scribe: unknown flag --bogus; see scribe status --help\n"},
		{[]string{"submit", "-store", store, "put", "f", "x"}, "scribe: unknown flag -store: a long flag takes two dashes, --store; see scribe submit --help\n"},
		{[]string{"wait", "--store", store, "--timeout", "soon", "j"}, "scribe: --timeout \"soon\": want a duration such as 10s or 1m30s; see scribe wait --help\n"},
		{[]string{"lock", "--store", store, "--lock-file"}, "scribe: flag --lock-file needs a value; see scribe lock --help\n"},
		{[]string{"serve", "--store", store, "--bogus"}, "scribe: unknown flag --bogus; see scribe serve --help\n"},
		{[]string{"sumbit"}, "scribe: unknown command \"sumbit\" (did you mean submit?); see scribe --help\n"},
	} {
		r := scribe(t, "", tc.args...)
		assert.Equal(t, 2, r.code, "%v", tc.args)
		assert.Equal(t, tc.want, r.stderr, "%v", tc.args)
		assert.Empty(t, r.stdout, "%v", tc.args)
	}
	assert.NoFileExists(t, store+"/f")

	r := scribe(t, "", "jobs", "--store", store, "--json", "--sate", "applied")
	assert.Equal(t, 2, r.code)
	var failure struct{ Error string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &failure), r.stdout)
	assert.Equal(t, "unknown flag --sate (did you mean --state?); see scribe jobs --help", failure.Error)
}

// --help lists every command, and each command's help spells its flags
// as they are typed, with placeholders that say what they take.
func TestCLIHelpAndPlaceholders(t *testing.T) {
	t.Parallel()
	r := scribe(t, "", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, r.stderr)
	for _, name := range []string{"serve", "submit", "status", "wait", "jobs", "lock", "recover", "stop", "mcp", "demo", "bench", "completion", "help", "version"} {
		assert.Contains(t, r.stdout, "\n  scribe "+name+" ", name)
	}
	for cmd, flags := range map[string][]string{
		"submit": {"--wait[=DUR]", "--exit-idle DUR", "--route ROUTE", "--store DIR", "--lock-file FILE", "--json"},
		"lock":   {"--wait DUR", "--lock-file FILE"},
		"mcp":    {"--wait DUR", "--exit-idle DUR", "--lock-file FILE"},
		"serve":  {"--idle-release DUR", "--sync MODE", "--exit-idle DUR", "--store DIR"},
	} {
		r := scribe(t, "", cmd, "--help")
		require.Equal(t, 0, r.code, r.stderr)
		for _, f := range flags {
			assert.Contains(t, r.stdout, "\n  "+f+"\n", "%s --help", cmd)
		}
	}
	// --lock-file means one thing, said one way, wherever it is taken.
	var said []string
	for _, cmd := range []string{"submit", "status", "wait", "jobs", "lock", "recover", "mcp"} {
		r := scribe(t, "", cmd, "--help")
		_, after, ok := strings.Cut(r.stdout, "\n  --lock-file FILE\n")
		require.True(t, ok, "%s takes --lock-file", cmd)
		line, _, _ := strings.Cut(after, "\n  ")
		said = append(said, line)
	}
	for _, s := range said[1:] {
		assert.Equal(t, said[0], s)
	}
}

// lock --wait is spelt as submit's, =DUR or DUR as the next word; a bare
// --wait is refused, since waiting for the store lock is always bounded,
// and the help says --wait DUR.
func TestCLILockWaitSpellings(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	for _, wait := range [][]string{{"--wait=5s"}, {"--wait", "5s"}} {
		r := scribe(t, "", append(append([]string{"lock", "--store", store}, wait...), "--", "true")...)
		assert.Equal(t, 0, r.code, "%v: %s", wait, r.stderr)
	}
	r := scribe(t, "", "lock", "--store", store, "--wait", "--", "true")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "--wait needs a bound")
	r = scribe(t, "", "lock", "--help")
	assert.Contains(t, r.stdout, "[--wait DUR]")
	assert.NotContains(t, r.stdout, "--wait[=DUR]")
}

// The completion scripts come from the binary for the three shells; a
// fourth is a usage error.
func TestCLICompletionScripts(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{
		"bash": "complete -o default -F _scribe scribe",
		"zsh":  "compdef _scribe scribe",
		"fish": "complete -c scribe",
	} {
		r := scribe(t, "", "completion", shell)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, want, shell)
		assert.Contains(t, r.stdout, "submit", shell)
	}
	r := scribe(t, "", "completion", "tcsh")
	assert.Equal(t, 2, r.code)
	assert.Empty(t, r.stdout)
}

// docs/cli.md's lines that load completion run as written, each in its
// shell (when installed), and leave scribe's completion defined there.
func TestCLICompletionDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/cli.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)\n## Shell completion\n.*?```sh\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/cli.md has no ## Shell completion section with a ```sh block")
	checks := map[string]string{
		"bash": "complete -p scribe",
		"zsh":  "print -r -- $_comps[scribe]",
		"fish": "complete -c scribe | string match -q -- '*submit*'; and echo defined",
	}
	wants := map[string]string{"bash": "complete -o default -F _scribe scribe", "zsh": "_scribe", "fish": "defined"}
	env := append(os.Environ(), "PATH="+filepath.Dir(scribeBin)+":"+os.Getenv("PATH"), "HOME="+t.TempDir())
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(m[1])), "\n") {
		code, _, _ := strings.Cut(line, "#")
		code = strings.TrimSpace(code)
		// "source <(scribe completion SHELL)", or "scribe completion SHELL | source".
		_, after, _ := strings.Cut(code, "scribe completion ")
		shell, _, _ := strings.Cut(strings.TrimRight(after, ") "), " ")
		require.Contains(t, checks, shell, "a line for an unknown shell: %s", line)
		seen++
		path, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("%s is not installed: %s not run", shell, code)
			continue
		}
		args := []string{"-c", code + "\n" + checks[shell]}
		switch shell {
		case "zsh":
			args = []string{"-f", "-c", "autoload -Uz compinit && compinit -u -D\n" + code + "\n" + checks[shell]}
		case "fish":
			args = []string{"--no-config", "-c", code + "; " + checks[shell]}
		}
		cmd := exec.Command(path, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s: %s", shell, code, out)
		assert.Contains(t, string(out), wants[shell], "%s: %s", shell, code)
	}
	assert.Equal(t, 3, seen, "a line for each shell")
}

// recover takes the store lock the store's daemon takes, as lock does:
// with the daemon on a lock file of its own, a holder of that lock keeps
// recover out (exit 75), where recover once took <store>/.scribe/lock and
// went ahead beside it.
func TestCLIRecoverTakesTheDaemonsLock(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	lockFile := filepath.Join(t.TempDir(), "tool.lock")
	startDaemon(t, store, "--lock-file", lockFile)
	release := holdStore(t, "--store", store) // the daemon's lock file, as lock finds it
	r := scribe(t, "", "recover", "--store", store)
	assert.Equal(t, 75, r.code, "recover beside a holder of the daemon's lock: %s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stderr, lockFile)
	r = scribe(t, "", "recover", "--store", store, "--lock-file", queue.Layout{Root: store}.Lock())
	assert.Equal(t, 2, r.code, "another lock file than the daemon's: %s", r.stderr)
	assert.Contains(t, r.stderr, "give --lock-file "+lockFile)
	assert.Equal(t, 0, release())
	r = scribe(t, "", "recover", "--store", store)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "nothing to recover")
}
