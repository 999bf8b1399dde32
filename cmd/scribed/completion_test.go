package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/cmd/internal/cli"
)

// completionScript is `scribe completion SHELL`, in a file.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	var out, errb bytes.Buffer
	m := newMain(nil, &out, &errb)
	require.NoError(t, m.Run(t.Context(), []string{"completion", shell}), errb.String())
	path := filepath.Join(t.TempDir(), "scribe."+shell)
	require.NoError(t, os.WriteFile(path, out.Bytes(), 0o600))
	return path
}

// shellOrSkip is the path of a shell, or skips the test without it.
func shellOrSkip(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed", name)
	}
	return path
}

// completions runs a shell's completion of words (the last one being
// completed) with the script loaded, and returns the candidates.
func completions(t *testing.T, shell, script string, words ...string) []string {
	t.Helper()
	var cmd *exec.Cmd
	switch shell {
	case "bash":
		// The completion function bash calls, with the words it sets.
		cmd = exec.Command(shellOrSkip(t, "bash"), "--norc", "--noprofile", "-c",
			`source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _scribe; printf '%s\n' "${COMPREPLY[@]}"`, script)
		cmd.Args = append(cmd.Args, words...)
	case "zsh":
		// The completion function zsh calls, with the words it sets;
		// compadd (a builtin of completion widgets only) prints what it
		// is given that matches the word, as it would offer it.
		cmd = exec.Command(shellOrSkip(t, "zsh"), "-f", "-c", `
compadd() {
  while (( $# )); do
    case $1 in --) shift; break ;; -[dJVXxPSpsiIWFMo]) shift 2 ;; -*) shift ;; *) break ;; esac
  done
  local w; for w in "$@"; do [[ $w == ${words[CURRENT]}* ]] && print -r -- $w; done; return 0
}
_files() { print -r -- :files }
_directories() { print -r -- :dirs }
compset() { : }
source "$0"; words=("$@"); CURRENT=$#; _scribe; return 0`, script)
		cmd.Args = append(cmd.Args, words...)
	case "fish":
		// fish completes a command line itself: complete -C.
		line := strings.Join(words, " ")
		cmd = exec.Command(shellOrSkip(t, "fish"), "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, line)
	}
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", shell, out)
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l, _, _ = strings.Cut(l, "\t"); l != "" { // fish: candidate<TAB>description
			got = append(got, l)
		}
	}
	return got
}

// Each shell's script, loaded in the shell, completes commands, flags
// and the values completion knows, from the table.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			shellOrSkip(t, shell)
			script := completionScript(t, shell)
			assert.Equal(t, []string{"submit"}, completions(t, shell, script, "scribe", "su"))
			assert.Equal(t, []string{"--route"}, completions(t, shell, script, "scribe", "submit", "--ro"))
			route := completions(t, shell, script, "scribe", "submit", "--route", "")
			slices.Sort(route)
			assert.Equal(t, []string{"direct", "prefer", "require"}, route)
			assert.Contains(t, completions(t, shell, script, "scribe", "jobs", "--state", "q"), "queued")
			assert.Contains(t, completions(t, shell, script, "scribe", "submit", "ap"), "append", "the first argument")
			assert.Contains(t, completions(t, shell, script, "scribe", "completion", "z"), "zsh")
			assert.Contains(t, completions(t, shell, script, "scribe", "st"), "status")
			assert.Contains(t, completions(t, shell, script, "scribe", "st"), "stop")
		})
	}
}

// A shell that is not one of the three is a usage error.
func TestCompletionUnknownShell(t *testing.T) {
	var out, errb bytes.Buffer
	m := newMain(nil, &out, &errb)
	err := m.Run(t.Context(), []string{"completion", "tcsh"})
	assert.Equal(t, cli.ExitUsage, cli.ExitCode(err))
	assert.ErrorContains(t, err, `unknown shell "tcsh"`)
	assert.Empty(t, out.String())
}
