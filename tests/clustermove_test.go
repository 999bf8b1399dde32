package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
)

// startOperatorNATS starts a NATS server with JetStream and the accounts
// of docs/cluster.md for store id, and returns its URL.
func startOperatorNATS(t *testing.T, id string) string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "nats.conf")
	port := testkit.FreePorts(t, 1)[0]
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\nmax_payload: 1114112\njetstream { store_dir: %q }\n%s",
		port, filepath.Join(t.TempDir(), "js"), natsAccountsConf(id))), 0o600))
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	startNATSProcess(t, natsServerBin(t), conf).waitReady(t, url)
	return url
}

// A store moved from the embedded queue to an operator's NATS keeps its
// queued jobs: jobs queued while an outside program held the store lock
// stay in the embedded queue when its daemon stops; `scribe serve
// --nats-url` moves them into the NATS server's stream before its writer
// starts, and each is applied once, in order. A job queued through the
// cluster afterwards applies after them.
func TestClusterMoveKeepsQueuedJobs(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	real, err := filepath.EvalSymlinks(store)
	require.NoError(t, err)
	id := queue.StoreID(real)

	d := startDaemon(t, store)
	release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock"))
	const n = 20
	for i := range n {
		r := scribe(t, "", "submit", "--store", store, "--id", fmt.Sprintf("q-%d", i), "append", "log", fmt.Sprintf("%d\n", i))
		require.Equal(t, 0, r.code, r.stderr)
	}
	d.stop(t) // the jobs wait in the embedded queue: the lock is held
	release()
	assert.Empty(t, readFile(t, filepath.Join(store, "log")), "nothing applied before the move")

	url := startOperatorNATS(t, id)

	c := spawnDaemon(t, store, []string{"SCRIBE_NATS_PASSWORD=" + natsDaemonPass}, "--nats-url", url, "--user", natsDaemonUser)
	var want strings.Builder
	for i := range n {
		fmt.Fprintf(&want, "%d\n", i)
	}
	require.Eventually(t, func() bool { return readFile(t, filepath.Join(store, "log")) == want.String() }, 30*time.Second, 20*time.Millisecond,
		"the moved jobs, each once, in order; log:\n%s", c.log.String())
	assert.Contains(t, c.log.String(), "moved the store's queued jobs into the shared queue")

	env := []string{"SCRIBE_NATS_PASSWORD=" + natsSubmitPass(id)}
	r := runWith(t, scribeBin, env, nil, "submit", "--nats-url", url, "--user", natsSubmitUser(id), "--store-id", id, "--wait=10s", "append", "log", "after\n")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, want.String()+"after\n", readFile(t, filepath.Join(store, "log")))
	// Resubmitting a moved job's ID changes nothing.
	r = runWith(t, scribeBin, env, nil, "submit", "--nats-url", url, "--user", natsSubmitUser(id), "--store-id", id, "--id", "q-3", "--wait=10s", "append", "log", "3\n")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, want.String()+"after\n", readFile(t, filepath.Join(store, "log")))
}

// A daemon's queue on a NATS server can be set in its config file
// (nats_url, replicas, claim_ttl), its credentials from the environment;
// settings of the embedded queue in the same file are refused with it,
// and the client's $SCRIBE_NATS_URL never moves a daemon's queue.
func TestClusterFromConfigFile(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	real, err := filepath.EvalSymlinks(store)
	require.NoError(t, err)
	id := queue.StoreID(real)
	conf, url := singleNodeConfig(t, id)
	p := startNATSProcess(t, natsServerBin(t), conf)
	p.waitReady(t, url)
	env := []string{"SCRIBE_NATS_USER=" + natsDaemonUser, "SCRIBE_NATS_PASSWORD=" + natsDaemonPass}

	writeConfig(t, store, fmt.Sprintf("nats_url = %q\nsync = \"1s\"\n", url), 0o600)
	r := runWith(t, scribeBin, env, nil, "serve", "--store", store)
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "--sync: for the embedded queue only, not with --nats-url or --nats-config")

	// The client's variable alone is no daemon setting: the embedded
	// queue it is.
	writeConfig(t, store, "", 0o600)
	d := startDaemonEnv(t, store, append(env, "SCRIBE_NATS_URL="+url))
	disc, err := queue.ReadDiscovery(real)
	require.NoError(t, err)
	assert.Empty(t, disc.Queue, "SCRIBE_NATS_URL moved the daemon's queue")
	d.stop(t)

	writeConfig(t, store, fmt.Sprintf("nats_url = %q\nreplicas = 1\nclaim_ttl = \"2s\"\n", url), 0o600)
	d = startDaemonEnv(t, store, env)
	disc, err = queue.ReadDiscovery(real)
	require.NoError(t, err)
	assert.Equal(t, queue.QueueNATS, disc.Queue)
	assert.Equal(t, url, disc.URL)
	assert.Contains(t, d.log.String(), "claim_ttl=2s")
	r = runWith(t, scribeBin, []string{"SCRIBE_NATS_USER=" + natsSubmitUser(id), "SCRIBE_NATS_PASSWORD=" + natsSubmitPass(id)}, nil,
		"submit", "--store", store, "--wait=10s", "--newline", "append", "log", "through the file's queue")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "through the file's queue\n", readFile(t, filepath.Join(store, "log")))
}

// Moving a store's queue keeps each job's class: a high job queued behind
// more normal jobs than the writer takes at once is still decided first
// from the NATS server's stream.
func TestClusterMoveKeepsPriorities(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	real, err := filepath.EvalSymlinks(store)
	require.NoError(t, err)
	id := queue.StoreID(real)

	d := startDaemon(t, store)
	release := holdWithFlock(t, filepath.Join(store, ".scribe", "lock"))
	normal := names("n", 3*256)
	submitAppends(t, store, queue.PriorityNormal, normal...)
	queueAppends(t, store, "high", "h1")
	d.stop(t) // the jobs wait in the embedded queue: the lock is held
	release()

	url := startOperatorNATS(t, id)
	c := spawnDaemon(t, store, []string{"SCRIBE_NATS_PASSWORD=" + natsDaemonPass}, "--nats-url", url, "--user", natsDaemonUser)
	order := filepath.Join(store, "order.txt")
	require.Eventually(t, func() bool { return len(strings.Fields(readFile(t, order))) == len(normal)+1 }, 60*time.Second, 20*time.Millisecond,
		"every moved job applied; log:\n%s", c.log.String())
	assert.Equal(t, append([]string{"h1"}, normal...), strings.Fields(readFile(t, order)))
}
