package server

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/cmd/internal/cli"
)

// run runs a command of this package as main does, stdin given: stdout,
// stderr and the exit code.
func run(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	m := &cli.Main{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut, Version: "test",
		Commands: []cli.Command{MCP(), Bench()}}
	code = m.Exit(m.Run(t.Context(), args))
	return out.String(), errOut.String(), code
}

// The command's flags: bad ones are usage errors, before any protocol;
// with good ones it serves until stdin ends, then exits 0.
func TestMCPCommand(t *testing.T) {
	t.Setenv("SCRIBE_STORE", "")
	t.Setenv("SCRIBE_ROUTE", "")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no store", nil, cli.ExitUsage, "--store is required"},
		{"bad route", []string{"--store", t.TempDir(), "--route", "sometimes"}, cli.ExitUsage, "unknown route"},
		{"bad wait", []string{"--store", t.TempDir(), "--wait", "0s"}, cli.ExitUsage, "--wait 0s"},
		{"arguments", []string{"--store", t.TempDir(), "extra"}, cli.ExitUsage, "takes no arguments"},
		{"autostart with direct", []string{"--store", t.TempDir(), "--route", "direct", "--autostart"}, cli.ExitUsage, "give one or the other"},
		{"autostart off with direct", []string{"--store", t.TempDir(), "--route", "direct", "--autostart=false"}, cli.ExitOK, "stdin closed, exiting"},
		{"missing store", []string{"--store", filepath.Join(t.TempDir(), "nope")}, cli.ExitRejected, "nope"},
		{"stdin closed at once", []string{"--store", t.TempDir()}, cli.ExitOK, "stdin closed, exiting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, "", append([]string{"mcp"}, tc.args...)...)
			assert.Equal(t, tc.code, code, stderr)
			assert.Empty(t, stdout, "nothing but protocol on stdout")
			assert.Contains(t, stderr, tc.want)
		})
	}
}

// docs/mcp.md documents every flag of the command, as its help spells it.
func TestMCPDocsFlags(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/mcp.md")
	require.NoError(t, err)
	stdout, stderr, code := run(t, "", "mcp", "--help")
	require.Equal(t, cli.ExitOK, code, stderr)
	flags := regexp.MustCompile(`(?m)^  (--[a-z-]+(?: [A-Z]+)?)$`).FindAllStringSubmatch(stdout, -1)
	require.NotEmpty(t, flags, "the usage lists flags: %s", stdout)
	for _, f := range flags {
		assert.Contains(t, string(doc), "| `"+f[1]+"` |", "docs/mcp.md's flag table lacks %s as the help spells it", f[1])
	}
}
