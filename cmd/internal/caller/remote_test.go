package caller

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/daemon"
)

// natsEnv are the variables the connection flags default to.
var natsEnv = []string{
	queue.EnvNATSURL, queue.EnvNATSCreds, queue.EnvNATSUser, queue.EnvNATSPassword, queue.EnvNATSToken,
	queue.EnvNATSNKey, queue.EnvNATSCA, queue.EnvNATSCert, queue.EnvNATSKey, queue.EnvStoreID,
}

// clearNATSEnv unsets the connection variables for the test.
func clearNATSEnv(t *testing.T) {
	t.Helper()
	for _, name := range natsEnv {
		t.Setenv(name, "") // restored at cleanup
		require.NoError(t, os.Unsetenv(name))
	}
}

// Settings that cannot work together are usage errors (exit 2), found
// before anything is sent; a queue that cannot be reached is exit 69,
// naming its URL.
func TestNATSFlagsUsage(t *testing.T) {
	clearNATSEnv(t)
	store := t.TempDir()
	real, err := queue.ResolveStore(store)
	require.NoError(t, err)
	id := queue.StoreID(real)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "nats://" + ln.Addr().String()
	require.NoError(t, ln.Close())

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string // on stderr
	}{
		{"store ID without a URL", nil, []string{"submit", "--store-id", id, "put", "a", "b"}, cli.ExitUsage, "give --nats-url"},
		{"no store", nil, []string{"submit", "--nats-url", closed, "put", "a", "b"}, cli.ExitUsage, "--store-id or --store is required"},
		{"bad store ID", nil, []string{"status", "--nats-url", closed, "--store-id", "ABC"}, cli.ExitUsage, `--store-id "ABC"`},
		{"store and store ID disagree", nil, []string{"jobs", "--nats-url", closed, "--store", store, "--store-id", "0123456789abcdef"}, cli.ExitUsage, "not --store-id 0123456789abcdef"},
		{"store that is not here", nil, []string{"wait", "--nats-url", closed, "--store", filepath.Join(store, "none"), "job-1"}, cli.ExitRejected, "does not exist"},
		{"two ways to authenticate", nil, []string{"submit", "--nats-url", closed, "--store-id", id, "--token", "t", "--user", "u", "put", "a", "b"}, cli.ExitUsage, "give one of"},
		{"password without user", map[string]string{queue.EnvNATSPassword: "p"}, []string{"status", "--nats-url", closed, "--store-id", id}, cli.ExitUsage, "a password without a user"},
		{"half a client certificate", nil, []string{"status", "--nats-url", closed, "--store-id", id, "--tls-cert", "c.pem"}, cli.ExitUsage, "both its cert and its key"},
		{"route direct", nil, []string{"submit", "--nats-url", closed, "--store-id", id, "--route", "direct", "put", "a", "b"}, cli.ExitUsage, "--route direct"},
		{"route direct from the environment", map[string]string{"SCRIBE_ROUTE": "direct"}, []string{"submit", "--nats-url", closed, "--store-id", id, "put", "a", "b"}, cli.ExitUsage, "--route direct"},
		{"autostart", nil, []string{"submit", "--nats-url", closed, "--store-id", id, "--autostart", "put", "a", "b"}, cli.ExitUsage, "--autostart"},
		{"missing creds file", nil, []string{"status", "--nats-url", closed, "--store-id", id, "--creds", filepath.Join(store, "none.creds")}, cli.ExitUsage, "none.creds"},
		{"unreachable", nil, []string{"submit", "--nats-url", closed, "--store-id", id, "put", "a", "b"}, cli.ExitNoDaemon, closed},
		{"unreachable, by the environment; $SCRIBE_STORE gives way to --store-id",
			map[string]string{queue.EnvNATSURL: closed, "SCRIBE_STORE": filepath.Join(store, "none")}, []string{"status", "--store-id", id}, cli.ExitNoDaemon, closed},
		{"unreachable, with the folder here", nil, []string{"jobs", "--nats-url", closed, "--store", store}, cli.ExitNoDaemon, "cannot be reached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, stderr, code := runCLI(t, strings.NewReader(""), tc.args...)
			assert.Equal(t, tc.code, code, stderr)
			assert.Contains(t, stderr, tc.want)
		})
	}
}

// --route direct on the command line (a `scribe lock` child's) writes the
// folder directly, whatever queue the environment names.
func TestNATSFlagsRouteDirectBeatsEnvironment(t *testing.T) {
	clearNATSEnv(t)
	store := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Setenv(queue.EnvNATSURL, "nats://"+ln.Addr().String())
	require.NoError(t, ln.Close())
	_, stderr, code := runCLI(t, strings.NewReader(""), "submit", "--store", store, "--route", "direct", "put", "a.txt", "b")
	require.Equal(t, cli.ExitOK, code, stderr)
	b, err := os.ReadFile(filepath.Join(store, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "b", string(b))
}

// A host without the store's folder submits, waits, and asks status and
// jobs through the operator's NATS server by store ID, as the store's
// submitter (its password from the environment).
func TestRemoteCommands(t *testing.T) {
	clearNATSEnv(t)
	store := t.TempDir()
	real, err := queue.ResolveStore(store)
	require.NoError(t, err)
	id := queue.StoreID(real)
	url := startOperatorServer(t, store, id)
	t.Setenv(queue.EnvNATSPassword, "pw")
	conn := []string{"--nats-url", url, "--user", "submit-" + id, "--store-id", id}
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, strings.NewReader(""), append(append(args[:1:1], conn...), args[1:]...)...)
	}

	stdout, stderr, code := run("submit", "--id", "remote-1", "append", "log.txt", "one\n")
	require.Equal(t, cli.ExitOK, code, stderr)
	assert.Equal(t, "remote-1\n", stdout, "queued: the ID, at once")
	stdout, stderr, code = run("wait", "--timeout", "30s", "remote-1")
	require.Equal(t, cli.ExitOK, code, stderr)
	assert.Contains(t, stdout, "job remote-1: applied")

	stdout, stderr, code = run("submit", "--wait=30s", "--json", "--id", "remote-2", "append", "log.txt", "two\n")
	require.Equal(t, cli.ExitOK, code, stderr)
	var out queue.Outcome
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	assert.True(t, out.Applied())

	stdout, stderr, code = run("status", "remote-2")
	require.Equal(t, cli.ExitOK, code, stderr)
	assert.Contains(t, stdout, "job remote-2: applied")
	stdout, stderr, code = run("status", "--json")
	require.Equal(t, cli.ExitOK, code, stderr)
	var st client.StoreStatus
	require.NoError(t, json.Unmarshal([]byte(stdout), &st))
	assert.Equal(t, id, st.StoreID)
	assert.Equal(t, real, st.Store, "the daemon's path of the store")
	require.NotNil(t, st.Applied)
	assert.EqualValues(t, 2, *st.Applied)

	stdout, stderr, code = run("jobs", "--json")
	require.Equal(t, cli.ExitOK, code, stderr)
	var list jobsJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &list))
	assert.Len(t, list.Outcomes, 2)
	assert.NotNil(t, list.QueuedTotal, "the remote daemon lists its queue")
	assert.Nil(t, list.Note)

	// A job the journal does not know: wait runs out (75) naming the
	// store as the command line did.
	_, stderr, code = run("wait", "--timeout", "300ms", "remote-none")
	assert.Equal(t, cli.ExitBusy, code)
	assert.Contains(t, stderr, "scribe status --nats-url "+url+" --store-id "+id+" remote-none")

	b, err := os.ReadFile(filepath.Join(store, "log.txt"))
	require.NoError(t, err)
	assert.Equal(t, "one\ntwo\n", string(b))
}

// startOperatorServer starts a NATS server with JetStream in this
// process, as an operator would run it, with a daemon user and a
// submitter for the store (docs/cluster.md#permissions), and a writer for
// the store on it; it returns the server's URL.
func startOperatorServer(t *testing.T, store, id string) string {
	t.Helper()
	opts := &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true, JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{
			{Username: "daemon", Password: "daemon-pw"},
			{Username: "submit-" + id, Password: "pw", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{queue.JobsSubject(id), queue.StatusSubject(id)}},
				Subscribe: &server.SubjectPermission{Allow: []string{queue.ClientInboxPrefix(id) + ".>", queue.OutcomeSubject(id, "*")}},
			}},
		},
	}
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(srv.Shutdown)
	require.True(t, srv.ReadyForConnections(10*time.Second))
	url := "nats://127.0.0.1:" + strconv.Itoa(srv.Addr().(*net.TCPAddr).Port)
	nc, err := nats.Connect(url, nats.UserInfo("daemon", "daemon-pw"), nats.CustomInboxPrefix(queue.DaemonInboxPrefix))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	w, err := daemon.NewWriter(t.Context(), daemon.WriterConfig{Store: store, Conn: nc, Settings: daemon.Settings{IdleRelease: 50 * time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { _ = w.Close() })
	return url
}
