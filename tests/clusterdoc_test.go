package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The three-node example of docs/cluster.md runs as written, in an empty
// folder with scribe on PATH: three `scribe serve --nats-config` nodes
// form a cluster, the third serves the store, and a submit as from
// another host (by URL, user and store ID) is applied.
func TestClusterDocsExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "docs", "cluster.md"))
	require.NoError(t, err)
	doc := string(b)
	i := strings.Index(doc, "## Three nodes on one machine")
	require.GreaterOrEqual(t, i, 0)
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(doc[i:])
	require.NotNil(t, m, "no sh block under Three nodes on one machine")

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", m[1])
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(scribeBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_NATS_URL=", "SCRIBE_STORE_ID=")
	// Its own process group: whatever the script leaves running (it
	// failed half way) is killed with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		for _, log := range []string{"n1.log", "n2.log", "n3.log"} {
			t.Logf("%s:\n%s", log, readFile(t, filepath.Join(dir, log)))
		}
	}
	require.NoError(t, err, out.String())
	assert.Contains(t, out.String(), "written through the cluster\n")
	assert.Regexp(t, `daemon pid \d+`, out.String(), "the status comes from the store's daemon")
	assert.Equal(t, "written through the cluster\n", readFile(t, filepath.Join(dir, "store", "notes.md")))
}
