package tests

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// received is every byte clients sent through the relay so far.
func (r *relay) received() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.sent.Bytes())
}

// onlyClientHellos checks that what a client sent a server that is not the
// daemon is TLS handshake records and nothing else: it began with TLS
// before reading anything (a TLS-first client), and the server, which
// cannot complete that handshake, got no CONNECT, no credential and no
// job.
func onlyClientHellos(t testing.TB, sent []byte, password string) {
	t.Helper()
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
	store := newStore(t)
	startDaemon(t, store)
	real, err := queue.ReadDiscovery(store)
	require.NoError(t, err)
	t.Cleanup(func() { writeDiscovery(t, store, real) }) // the daemon removes its own file at exit

	im := startImpostor(t, "127.0.0.1:0", real.StoreID, nil)
	fake := *real
	fake.URL = "tls://" + im.ln.Addr().String()
	writeDiscovery(t, store, &fake)

	_, err = client.Open(t.Context(), store, client.WithRoute(client.RouteRequire), client.WithConnectTimeout(500*time.Millisecond))
	require.Error(t, err)
	assert.ErrorIs(t, err, client.ErrUnverified)
	assert.ErrorIs(t, err, client.ErrUnavailable)
	assert.Contains(t, err.Error(), "it does not begin with TLS")
	assert.Contains(t, err.Error(), `"INFO `, "the error shows what the server sent")
	onlyClientHellos(t, im.received(), real.Password)
	assert.Positive(t, im.connections())

	res := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait=1s", "append", "f.txt", "x")
	assert.Equal(t, 75, res.code, res.stderr)
	assert.Contains(t, res.stderr, "it does not begin with TLS")
	onlyClientHellos(t, im.received(), real.Password)
	assert.False(t, im.leaked(real.Password), "the impostor got the password: %s", im.heard())
	assert.False(t, im.leaked("f.txt"), "the impostor got the job: %s", im.heard())
	assert.NoFileExists(t, filepath.Join(store, "f.txt"))

	writeDiscovery(t, store, real)
	ok := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "append", "f.txt", "x")
	assert.Equal(t, 0, ok.code, ok.stderr)
}
