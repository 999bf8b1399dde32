package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The systemd unit of docs/running.md is sandboxed: systemd-analyze rates
// its exposure under 5 (the figure the doc gives), where the bare unit
// rated 9.6.
func TestDocsUnitSandbox(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
		"outcome": {true, false, false}, "status": {true, false, false}, "cancel": {false, true, true},
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

// docShell is the sh block of doc (a path from the repository's root)
// that contains marker.
func docShell(t *testing.T, doc, marker string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", doc))
	require.NoError(t, err)
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], marker) {
			return m[1]
		}
	}
	t.Fatalf("no sh block of %s holds %q", doc, marker)
	return ""
}

// runShell runs script with bash, HOME set to home and the scribe under
// test first on PATH. Its output goes to files, not pipes, so that a
// daemon it leaves running does not hold the run open.
func runShell(t *testing.T, home, script string) (stdout, stderr string, code int) {
	t.Helper()
	dir := t.TempDir()
	outPath, errPath := filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")
	out, err := os.Create(outPath)
	require.NoError(t, err)
	defer out.Close()
	errf, err := os.Create(errPath)
	require.NoError(t, err)
	defer errf.Close()
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "HOME="+home, "PATH="+filepath.Dir(scribeBin)+":"+os.Getenv("PATH"),
		"SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_AUTOSTART=")
	cmd.Stdout, cmd.Stderr = out, errf
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil {
		require.ErrorAs(t, err, &ee)
		code = ee.ExitCode()
	}
	o, err := os.ReadFile(outPath)
	require.NoError(t, err)
	e, err := os.ReadFile(errPath)
	require.NoError(t, err)
	return string(o), string(e), code
}

// The README's first steps run as written on a fresh home.
func TestDocsReadmeFirstSteps(t *testing.T) {
	t.Parallel()
	home, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	script := docShell(t, "README.md", "scribe serve --store ~/notes &")
	script = strings.ReplaceAll(script, "/tmp/notes.tar", filepath.Join(home, "notes.tar"))
	store := filepath.Join(home, "notes")
	t.Cleanup(func() { scribe(t, "", "stop", "--store", store) })
	stdout, stderr, code := runShell(t, home, script)
	require.Equal(t, 0, code, "stdout %s\nstderr %s", stdout, stderr)
	assert.Equal(t, "a line\n", readFile(t, filepath.Join(store, "log.txt")))
	assert.Contains(t, stdout, "store "+store)
	assert.FileExists(t, filepath.Join(home, "notes.tar"))
}

// The shared-lock example of docs/locking.md prints what it says, even
// right after the daemon's last batch, while the daemon still holds the
// lock for its idle-release period.
func TestDocsSharedLockExample(t *testing.T) {
	t.Parallel()
	home, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	store := filepath.Join(home, "notes")
	require.NoError(t, os.Mkdir(store, 0o755))
	startDaemon(t, store, "--lock-file", filepath.Join(store, ".index.lock"))
	script := docShell(t, "docs/locking.md", "flock ~/notes/.index.lock")
	var want []string
	for _, l := range strings.Split(script, "\n") {
		if c, ok := strings.CutPrefix(l, "# scribe: "); ok {
			c, _, _ = strings.Cut(c, "   (exit")
			want = append(want, "scribe: "+strings.ReplaceAll(c, "/home/me", home))
		}
	}
	require.Len(t, want, 2, script)
	r := scribe(t, "", "submit", "--store", store, "--wait", "append", "log.txt", "")
	require.Equal(t, 0, r.code, r.stderr)

	stdout, stderr, code := runShell(t, home, script)
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, strings.Join(want, "\n")+"\n", stderr)
	assert.Contains(t, stdout, "reindexing")
	assert.Equal(t, "queued, applied once the tool lets go\n", readFile(t, filepath.Join(store, "log.txt")))
}

// The every-key example of docs/config.md is one serve takes without a
// warning; a creds key without a cluster is warned about, not silently
// ignored.
func TestDocsConfigCreds(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "docs", "config.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```toml\n(.*?)```").FindSubmatch(b)
	require.NotNil(t, m)
	for _, c := range []struct {
		name, file, warn string
	}{
		{"the example", string(m[1]), ""},
		{"creds without a cluster", "creds = \"nats/daemon.creds\"\n", `level=WARN msg="creds is ignored: it is the daemon's credentials for a queue on a NATS server or cluster`},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := newStore(t)
			writeConfig(t, store, c.file, 0o600)
			r := scribe(t, "", "serve", "--store", store, "--check-config")
			require.Equal(t, 0, r.code, r.stderr)
			if c.warn == "" {
				assert.NotContains(t, r.stderr, "WARN")
				return
			}
			assert.Contains(t, r.stderr, c.warn)
			assert.Contains(t, r.stderr, "creds="+filepath.Join(store, ".scribe", "nats", "daemon.creds"))
		})
	}
}

// The Node.js example's job digest gives docs/protocol.md's vectors for
// exec args, as Go does (queue's TestExecDigestVectors).
func TestDocsNodeDigestVectors(t *testing.T) {
	t.Parallel()
	node, dir := nodeExample(t)
	b, err := os.ReadFile(filepath.Join("..", "docs", "protocol.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)is the byte 0x7F\\):\n\n```text\n(.*?)```").FindSubmatch(b)
	require.NotNil(t, m, "the vectors' block")
	var args, want []string
	for _, v := range strings.Split(strings.TrimSpace(string(m[1])), "\n\n") {
		l := strings.Split(v, "\n")
		require.Len(t, l, 3, v)
		sent := strings.ReplaceAll(l[0], "<DEL>", `\u007f`)
		hashed := strings.ReplaceAll(l[1], "<DEL>", "\x7f")
		args, want = append(args, sent, hashed), append(want, l[2], l[2])
	}
	script := `import { jobDigest } from "./scribe.mjs";
import { readFileSync } from "node:fs";
for (const a of JSON.parse(readFileSync(0, "utf8"))) console.log(jobDigest({ ops: [{ op: "exec", name: "mine", args: JSON.parse(a) }] }));`
	in, err := json.Marshal(args)
	require.NoError(t, err)
	cmd := exec.Command(node, "--input-type=module", "-e", script)
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(string(in))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, strings.Join(want, "\n")+"\n", string(out))
	assert.Len(t, want, 4, "two vectors, as sent and as hashed")
}
