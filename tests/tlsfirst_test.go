package tests

import (
	"crypto/tls"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
)

// onlyClientHellos checks that what clients, now gone, sent through the
// relay to a server that is not the daemon is TLS handshake records and
// nothing else: they began with TLS before reading anything (TLS-first
// clients), and the server, which cannot complete that handshake, got no
// CONNECT, no credential and no job.
func onlyClientHellos(t testing.TB, r *testkit.Relay, password string) {
	t.Helper()
	r.Settled(t)
	sent := r.Received()
	if assert.NotEmpty(t, sent, "the client sent nothing: it waited for the server's INFO instead of beginning with TLS") {
		// A TLS record: content type 22 (handshake), version 3.x.
		assert.Equal(t, []byte{0x16, 0x03}, sent[:min(2, len(sent))], "the client's first bytes are not a TLS handshake: %q", sent[:min(16, len(sent))])
	}
	for rest := sent; len(rest) >= 5; {
		n := 5 + (int(rest[3])<<8 | int(rest[4]))
		if !assert.Equal(t, byte(0x16), rest[0], "a record that is not a TLS handshake: %q", rest[:min(16, len(rest))]) || n > len(rest) {
			break
		}
		rest = rest[n:]
	}
	assert.NotContains(t, string(sent), "CONNECT")
	assert.NotContains(t, string(sent), password)
}

// Promise 7, TLS first: a client whose discovery file names a server that
// speaks plain NATS (it sends its INFO in clear, as nats-server does, and
// would take any credentials) sends it a TLS ClientHello and nothing
// else, neither reading its INFO nor sending CONNECT, and says why it gave
// up. The same for scribe submit, whose job is not queued anywhere.
func TestImpostorPlainNATSGetsOnlyAClientHello(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	real, err := queue.ReadDiscovery(store)
	require.NoError(t, err)
	t.Cleanup(func() { writeDiscovery(t, store, real) }) // the daemon removes its own file at exit

	im := startImpostor(t, "127.0.0.1:0", real.StoreID, nil)
	fake := *real
	fake.URL = "tls://" + im.Addr()
	writeDiscovery(t, store, &fake)

	_, err = client.Open(t.Context(), store, client.WithRoute(client.RouteRequire), client.WithConnectTimeout(500*time.Millisecond))
	require.Error(t, err)
	assert.ErrorIs(t, err, client.ErrUnverified)
	assert.ErrorIs(t, err, client.ErrUnavailable)
	assert.Contains(t, err.Error(), "it does not begin with TLS")
	assert.Contains(t, err.Error(), `"INFO `, "the error shows what the server sent")
	onlyClientHellos(t, im.Relay, real.Password)
	assert.Positive(t, im.Connections())

	res := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait=1s", "append", "f.txt", "x")
	assert.Equal(t, 75, res.code, res.stderr)
	assert.Contains(t, res.stderr, "it does not begin with TLS")
	onlyClientHellos(t, im.Relay, real.Password)
	assert.False(t, im.leaked(real.Password), "the impostor got the password: %s", im.heard())
	assert.False(t, im.leaked("f.txt"), "the impostor got the job: %s", im.heard())
	assert.NoFileExists(t, filepath.Join(store, "f.txt"))

	writeDiscovery(t, store, real)
	ok := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "append", "f.txt", "x")
	assert.Equal(t, 0, ok.code, ok.stderr)
}

// operatorTLSFirst is an operator's NATS server set to TLS first with no
// fallback (handshake_first: true), JetStream on, with a certificate of
// its own whose PEM is in the returned CA file. Its users have every
// permission: the test is about the handshake, not the permissions.
func operatorTLSFirst(t *testing.T) (url, caFile string) {
	t.Helper()
	cert := selfSignedCert(t)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600))
	opts := &server.Options{
		ServerName: "operator", Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), SyncAlways: true,
		TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		TLSHandshakeFirst: true, TLSTimeout: 5,
		Users: []*server.User{{Username: natsDaemonUser, Password: natsDaemonPass}, {Username: "submitter", Password: "submitter-pass"}},
	}
	ns, err := server.NewServer(opts)
	require.NoError(t, err)
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.True(t, ns.ReadyForConnections(10*time.Second))
	return "tls://" + ns.Addr().String(), caFile
}

// On an operator's server set to handshake_first, the daemon and its
// clients connect with --tls-first (or $SCRIBE_NATS_TLS_FIRST=true, or
// the config file's tls_first), and a client without it cannot; with it,
// a server that speaks plain NATS at that URL gets a ClientHello and
// nothing else.
func TestOperatorServerTLSFirst(t *testing.T) {
	t.Parallel()
	url, ca := operatorTLSFirst(t)
	store := newStore(t)
	startDaemonEnv(t, store, daemonEnv, "--nats-url", url, "--user", natsDaemonUser, "--tls-ca", ca, "--tls-first")
	id := queue.StoreID(store)
	env := []string{"SCRIBE_NATS_PASSWORD=submitter-pass"}
	submit := func(env []string, url string, extra ...string) result {
		t.Helper()
		r, err := runProcess(scribeBin, env, nil, append([]string{"submit", "--nats-url", url, "--user", "submitter",
			"--store-id", id, "--tls-ca", ca}, extra...)...)
		require.NoError(t, err)
		return r
	}

	r := submit(env, url, "--tls-first", "--wait=30s", "--id", "first-1", "append", "f.txt", "1\n")
	assert.Equal(t, 0, r.code, r.stderr)
	r = submit(append(env, queue.EnvNATSTLSFirst+"=true"), url, "--wait=30s", "--id", "first-2", "append", "f.txt", "2\n")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "1\n2\n", readFile(t, filepath.Join(store, "f.txt")))

	r = submit(append(env, queue.EnvNATSTLSFirst+"=yes please"), url, "--wait=1s", "--id", "first-3", "append", "f.txt", "3\n")
	assert.Equal(t, 2, r.code, "a variable that is not a boolean is a usage error: %s", r.stderr)
	assert.Contains(t, r.stderr, queue.EnvNATSTLSFirst)
	r = submit(env, url, "--wait=1s", "--id", "first-4", "append", "f.txt", "4\n")
	assert.NotEqual(t, 0, r.code, "a client that waits for INFO in clear gets nothing from a TLS-first server: %s", r.stderr)

	im := startImpostor(t, "127.0.0.1:0", id, nil)
	r = submit(env, "tls://"+im.Addr(), "--tls-first", "--wait=1s", "--id", "first-5", "append", "f.txt", "5\n")
	assert.NotEqual(t, 0, r.code, r.stderr)
	onlyClientHellos(t, im.Relay, "submitter-pass")
	assert.False(t, im.leaked("submitter-pass"), "the impostor got the password: %s", im.heard())
	assert.Equal(t, "1\n2\n", readFile(t, filepath.Join(store, "f.txt")))
}
