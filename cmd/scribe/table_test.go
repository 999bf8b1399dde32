package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/cmd/internal/caller"
	"github.com/scribehq/scribe/cmd/internal/cli"
)

// The doc comment lists the table of commands, as --help does.
func TestDocListsTheTable(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var doc []string
	for _, line := range strings.Split(string(b), "\n") {
		if l, ok := strings.CutPrefix(line, "//\t"); ok && (strings.HasPrefix(l, "scribe ") || strings.TrimSpace(l) != "" && strings.HasPrefix(l, " ")) {
			doc = append(doc, l)
		}
	}
	assert.Equal(t, cli.List(commands()), doc, "doc.go's list of commands is not the table's")
}

// --help lists every command of the table, and each answers --help.
func TestHelpListsEveryCommand(t *testing.T) {
	var out bytes.Buffer
	m := newMain(nil, &out, &out)
	require.NoError(t, m.Run(t.Context(), []string{"--help"}))
	for _, c := range commands() {
		assert.Contains(t, out.String(), "\n  scribe "+c.Name+" ", c.Name)
		if c.Forwarded {
			continue // its help is scribed's, in place of this process: the black-box tests run it
		}
		var help, errb bytes.Buffer
		m := newMain(nil, &help, &errb)
		assert.Equal(t, cli.ExitOK, cli.ExitCode(m.Run(t.Context(), []string{c.Name, "--help"})), c.Name)
		assert.Contains(t, help.String(), "Usage:", c.Name)
		assert.Contains(t, help.String(), "scribe "+c.Name, c.Name)
		assert.Empty(t, errb.String(), c.Name)
	}
	for _, name := range []string{"wait", "jobs", "completion"} {
		assert.Contains(t, out.String(), "\n  scribe "+name+" ", "once left out")
	}
}

// The light commands live apart from the heavy ones, in packages that link
// neither nats-server, nor prometheus, nor the MCP SDK; this binary runs
// those and forwards the others to scribed.
func TestLightCommandsStayLight(t *testing.T) {
	const mod = "github.com/scribehq/scribe/cmd/internal/"
	light := map[string]bool{"submit": true, "status": true, "wait": true, "cancel": true, "jobs": true, "lock": true, "stop": true,
		"recover": true, "version": true, "completion": true, "help": true}
	for _, c := range commands() {
		assert.Equal(t, !light[c.Name], c.Heavy, "%s: Heavy says in which package it belongs", c.Name)
		assert.Equal(t, c.Heavy || c.Name == "completion", c.Forwarded, "%s: scribed runs the heavy commands, and completion, which knows their flags", c.Name)
	}
	for _, c := range []cli.Command{caller.Submit(), caller.Status(), caller.Wait(), caller.Cancel(), caller.Jobs(), caller.Lock(), caller.Stop(),
		caller.Recover(), cli.VersionCommand(), cli.CompletionCommand(), cli.HelpCommand()} {
		assert.True(t, light[c.Name], "%s is in a light package", c.Name)
	}
	for _, pkgs := range [][]string{{mod + "cli", mod + "caller", mod + "config"}, {"."}} {
		out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).Output()
		require.NoError(t, err)
		deps := strings.Fields(string(out))
		require.Contains(t, deps, "github.com/scribehq/scribe/client", "the list is real")
		for _, d := range deps {
			for _, heavy := range []string{"github.com/nats-io/nats-server/", "github.com/prometheus/", "github.com/modelcontextprotocol/", "github.com/google/jsonschema-go/"} {
				assert.False(t, strings.HasPrefix(d, heavy), "%v links %s", pkgs, d)
			}
			for _, heavy := range []string{"github.com/scribehq/scribe/embednats", "github.com/scribehq/scribe/writer/daemon", "github.com/scribehq/scribe/cmd/internal/server"} {
				assert.NotEqual(t, heavy, d, "%v links it", pkgs)
			}
		}
	}
}
