package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The systemd unit of docs/running.md is sandboxed: systemd-analyze rates
// its exposure under 5 (the figure the doc gives), where the bare unit
// rated 9.6.
func TestDocsUnitSandbox(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	unit := filepath.Join(t.TempDir(), "scribe@notes.service")
	require.NoError(t, os.WriteFile(unit, []byte(runningDocBlock(t, "ini")), 0o644))
	out, err := exec.Command(analyze, "security", "--offline=yes", unit).CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := regexp.MustCompile(`Overall exposure level for scribe@notes.service: ([0-9.]+)`).FindSubmatch(out)
	require.NotNil(t, m, "%s", out)
	score, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	assert.Less(t, score, 5.0)
	doc, err := os.ReadFile(filepath.Join("..", "docs", "running.md"))
	require.NoError(t, err)
	assert.Contains(t, string(doc), "The sandbox rates "+string(m[1])+" in `systemd-analyze security", "the doc gives the score")
}

// The MCP server says what its tools do, through the protocol: a fixed
// list (no list-changed notifications, no logging), read-only look-ups,
// and idempotent hints only where a repeat without an id changes nothing.
func TestDocsMCPAnnotations(t *testing.T) {
	s := startMCP(t, newStore(t))
	caps := s.cs.InitializeResult().Capabilities
	require.NotNil(t, caps.Tools)
	assert.False(t, caps.Tools.ListChanged)
	assert.Nil(t, caps.Logging)
	tools, err := s.cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	type hints struct{ readOnly, destructive, idempotent bool }
	want := map[string]hints{
		"append": {false, false, false}, "put": {false, true, true}, "merge": {false, true, true},
		"delete": {false, true, true}, "job": {false, true, false}, "exec": {false, true, false},
		"outcome": {true, false, false}, "status": {true, false, false},
	}
	for _, tool := range tools.Tools {
		a := tool.Annotations
		require.NotNil(t, a, tool.Name)
		got := hints{a.ReadOnlyHint, a.DestructiveHint != nil && *a.DestructiveHint, a.IdempotentHint}
		assert.Equal(t, want[tool.Name], got, tool.Name)
		require.NotNil(t, a.OpenWorldHint, tool.Name)
		assert.False(t, *a.OpenWorldHint, tool.Name)
		delete(want, tool.Name)
	}
	assert.Empty(t, want, "every tool listed")
	s.close(t)
}
