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
