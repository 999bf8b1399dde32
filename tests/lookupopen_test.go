package tests

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/writer/journal"
)

// A look-up that comes while the daemon is taking the store, its journal
// open but its session not yet ready (SCRIBE_PAUSE_AT holds it there
// 3 s), is answered once the session is. It used to fail: the daemon's
// read-only open of the journal for the look-up waited for its own
// session's lock and gave up after half a second ("open journal ...:
// timeout"), so a status, a wait or an MCP outcome that came at that
// instant got an error instead of the job's state.
func TestLookupWhileDaemonOpensJournal(t *testing.T) {
	t.Parallel()
	flockBin, err := exec.LookPath("flock")
	require.NoError(t, err, "flock(1) from util-linux is needed")
	store := newStore(t)
	startDaemonEnv(t, store, []string{"SCRIBE_PAUSE_AT=journal:3s"})
	r := scribe(t, "", "submit", "--store", store, "--id", "held", "append", "log.txt", "x\n")
	require.Equal(t, 0, r.code, r.stderr)

	// The daemon holds the journal's lock from the moment it opened it.
	path := journal.Path(store)
	require.Eventually(t, func() bool {
		if _, err := os.Stat(path); err != nil {
			return false
		}
		return exec.Command(flockBin, "--nonblock", "--shared", path, "true").Run() != nil
	}, 30*time.Second, 5*time.Millisecond, "the daemon never opened the journal")

	// A look-up by ID, as MCP's outcome tool and client.Status make it.
	cl, err := client.Open(t.Context(), store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	defer func() { _ = cl.Close() }()
	_, err = cl.Status(t.Context(), "held")
	assert.NoError(t, err, "a look-up while the daemon opens its journal")
	require.Equal(t, 0, scribe(t, "", "wait", "--store", store, "--timeout", "30s", "held").code)
	assert.Equal(t, "x\n", readFile(t, store+"/log.txt"))
}
