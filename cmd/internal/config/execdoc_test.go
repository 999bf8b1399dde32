package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/writer/exec"
)

// TestExecDocExample decodes the allowlist example of docs/exec.md, the
// one home of the [exec.NAME] schema, strictly: its command sets every key
// of an exec table, and the page's table documents each. The example names
// a home folder /home/me and runs /usr/bin/python3.
func TestExecDocExample(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("the example runs /usr/bin/python3")
	}
	doc, err := os.ReadFile("../../../docs/exec.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```toml\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "no ```toml block in docs/exec.md")
	home := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(home, ".mempalace"), 0o755))
	c, err := Decode(filepath.Join(t.TempDir(), "config.toml"), []byte(strings.ReplaceAll(string(m[1]), "/home/me", home)))
	require.NoError(t, err)
	require.Len(t, c.Commands, 1, "the example has one [exec.NAME] table")
	for _, k := range exec.Keys() {
		assert.Contains(t, c.Lines, "exec."+c.Commands[0].Name+"."+k, "the example's command does not set %s", k)
		assert.Contains(t, string(doc), "| `"+k+"` |", "docs/exec.md's table lacks %s", k)
	}
}
