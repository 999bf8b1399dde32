package tests

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
)

// impostor is what another local user can run on a port the daemon used:
// a NATS server of its own that takes any credentials, acknowledges every
// job as JetStream would and answers with forged "applied" outcomes (and
// forged journal look-ups), behind a TCP listener that records every byte
// a client sends it.
type impostor struct {
	*testkit.Relay
	ns      *server.Server
	nc      *nats.Conn
	storeID string

	mu        sync.Mutex
	passwords []string    // credentials clients presented
	seen      []*nats.Msg // messages clients published
	forged    int
}

// Check records the credentials of every connection and lets it in.
func (im *impostor) Check(c server.ClientAuthentication) bool {
	if o := c.GetOpts(); o != nil && (o.Password != "" || o.Username != "") {
		im.mu.Lock()
		im.passwords = append(im.passwords, o.Username+":"+o.Password)
		im.mu.Unlock()
	}
	return true
}

// startImpostor binds addr (the daemon's old address) with a recording
// listener in front of a fake NATS server; with cert, the fake server
// speaks TLS with that certificate.
func startImpostor(t *testing.T, addr, storeID string, cert *tls.Certificate) *impostor {
	t.Helper()
	im := &impostor{storeID: storeID}
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		CustomClientAuthentication: im}
	if cert != nil {
		opts.TLS = true
		opts.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
	}
	var err error
	im.ns, err = server.NewServer(opts)
	require.NoError(t, err)
	im.ns.Start()
	t.Cleanup(im.ns.Shutdown)
	require.True(t, im.ns.ReadyForConnections(10*time.Second))
	im.Relay = testkit.StartRelay(t, addr, im.ns.Addr().String())

	im.nc, err = nats.Connect("", nats.InProcessServer(im.ns), nats.NoEcho())
	require.NoError(t, err)
	t.Cleanup(im.nc.Close)
	_, err = im.nc.Subscribe(">", im.answer)
	require.NoError(t, err)
	require.NoError(t, im.nc.Flush())
	return im
}

// answer plays the daemon: a PubAck and a forged outcome for every job, a
// forged "found, applied" for every look-up.
func (im *impostor) answer(m *nats.Msg) {
	im.mu.Lock()
	im.seen = append(im.seen, m)
	im.forged++
	seq := im.forged
	im.mu.Unlock()
	forge := func(id string) *queue.Outcome {
		return &queue.Outcome{V: queue.Version, ID: id, Status: queue.StatusApplied, Epoch: 99, Seq: uint64(seq), Mode: "daemon", At: time.Now().UTC()}
	}
	switch m.Subject {
	case queue.JobsSubject(im.storeID):
		var j struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(m.Data, &j)
		if m.Reply != "" {
			_ = m.Respond(fmt.Appendf(nil, `{"stream":%q,"seq":%d}`, queue.StreamName(im.storeID), seq))
		}
		if b, err := queue.EncodeOutcome(forge(j.ID)); err == nil {
			_ = im.nc.Publish(queue.OutcomeSubject(im.storeID, j.ID), b)
		}
	case queue.StatusSubject(im.storeID):
		if m.Reply != "" && len(m.Data) > 0 {
			b, _ := json.Marshal(queue.Lookup{Found: true, Outcome: forge(string(m.Data))})
			_ = m.Respond(b)
		}
	}
}

// leaked reports whether anything a client sent the impostor contains s.
func (im *impostor) leaked(s string) bool {
	if im.Carried(s) {
		return true
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	for _, p := range im.passwords {
		if strings.Contains(p, s) {
			return true
		}
	}
	for _, m := range im.seen {
		if strings.Contains(m.Subject, s) || bytes.Contains(m.Data, []byte(s)) {
			return true
		}
	}
	return false
}

// heard returns what clients told the impostor, for failure messages.
func (im *impostor) heard() string {
	im.mu.Lock()
	defer im.mu.Unlock()
	var subjects []string
	for _, m := range im.seen {
		subjects = append(subjects, m.Subject)
	}
	return fmt.Sprintf("%d connections, credentials %q, subjects %q, %d bytes sent", im.Connections(), im.passwords, subjects, len(im.Received()))
}

// selfSignedCert makes a certificate for 127.0.0.1 that is not the
// daemon's.
func selfSignedCert(t testing.TB) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "not the daemon"},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:        true, BasicConstraintsValid: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// applied is one job of the long-lived client's loop and what Apply said.
type applied struct {
	id  string
	out *queue.Outcome
	err error
}

// Promise 7: a long-lived client whose daemon dies while another user
// binds the daemon's port never talks to that impostor: it sends it no
// credential and no job, believes none of its outcomes, and follows the
// real daemon when it is back (new port, new certificate), where each of
// its jobs is applied exactly once.
func TestImpostorOnTheDaemonsPort(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		tls  bool
	}{
		{"plain NATS", false},
		{"TLS with a certificate of its own", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cert *tls.Certificate
			if c.tls {
				cc := selfSignedCert(t)
				cert = &cc
			}
			impostorRun(t, cert)
		})
	}
}

func impostorRun(t *testing.T, cert *tls.Certificate) {
	store := newStore(t)
	d1 := startDaemon(t, store)
	disc1, err := queue.ReadDiscovery(store)
	require.NoError(t, err)
	u, err := url.Parse(disc1.URL)
	require.NoError(t, err)

	ctx := t.Context()
	cl, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })

	// The long-lived client: Apply in a loop until told to stop.
	var (
		mu      sync.Mutex
		results []applied
		nApply  atomic.Int64
		stop    = make(chan struct{})
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond) // pace, so the log stays short
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			id := fmt.Sprintf("imp-%04d", i)
			job := &queue.Job{ID: id, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "log.txt", Data: []byte("line " + id + "\n")}}}
			actx, cancel := context.WithTimeout(ctx, 90*time.Second)
			out, err := cl.Apply(actx, job)
			cancel()
			mu.Lock()
			results = append(results, applied{id, out, err})
			mu.Unlock()
			if err == nil && out.Applied() {
				nApply.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	})
	require.Eventually(t, func() bool { return nApply.Load() >= 3 }, 30*time.Second, 10*time.Millisecond)

	d1.kill(t)
	im := startImpostor(t, u.Host, disc1.StoreID, cert)

	// A daemon starting on the store takes the daemon lock before it
	// removes its killed predecessor's discovery file: in that window the
	// stale file, naming the impostor's port, is trusted. Hold the lock
	// the same way, and let the client try.
	release := holdWithFlock(t, queue.Layout{Root: store}.DaemonLock())
	assert.Eventually(t, func() bool { return im.Connections() >= 3 || im.leaked(disc1.Password) },
		30*time.Second, 10*time.Millisecond, "the client should try the stale address (and be refused)")
	release()

	before := nApply.Load()
	startDaemon(t, store)
	disc2, err := queue.ReadDiscovery(store)
	require.NoError(t, err)
	require.NotEqual(t, disc1.URL, disc2.URL, "the impostor holds the old port")
	require.NotEqual(t, disc1.TLSCertSHA256, disc2.TLSCertSHA256, "a new certificate on every start")
	require.Eventually(t, func() bool { return nApply.Load() >= before+5 }, 60*time.Second, 10*time.Millisecond,
		"the client follows the restarted daemon")
	close(stop)
	<-done

	assert.False(t, im.leaked(disc1.Password), "the impostor got the client password: %s", im.heard())
	assert.False(t, im.leaked("imp-"), "the impostor got jobs: %s", im.heard())
	assert.False(t, im.leaked("line "), "the impostor got job data: %s", im.heard())
	if d := cl.Daemon(); assert.NotNil(t, d) {
		assert.Equal(t, disc2.URL, d.URL, "the client talks to the restarted daemon")
		assert.Equal(t, disc2.PID, d.PID)
		assert.Equal(t, disc2.TLSCertSHA256, d.TLSCertSHA256, "and pins its new certificate")
	}

	content := readFile(t, filepath.Join(store, "log.txt"))
	mu.Lock()
	defer mu.Unlock()
	for _, r := range results {
		if !assert.NoError(t, r.err, "job %s", r.id) {
			continue
		}
		assert.Equal(t, r.id, r.out.ID)
		if assert.True(t, r.out.Applied(), "job %s: %+v", r.id, r.out) {
			assert.Equal(t, 1, strings.Count(content, "line "+r.id+"\n"),
				"job %s reported applied (epoch %d) must be in the store exactly once", r.id, r.out.Epoch)
		}
	}
	assert.Equal(t, len(results), strings.Count(content, "\n"), "every line in the store is one of the client's jobs, once")
	t.Logf("%d jobs; impostor: %s", len(results), im.heard())
}

// writeDiscovery replaces a store's discovery file, as the owner could.
func writeDiscovery(t testing.TB, store string, d *queue.Discovery) {
	t.Helper()
	b, err := json.MarshalIndent(d, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(queue.Layout{Root: store}.Discovery(), b, 0o600))
}

// relayDaemon puts a relay in front of the store's running daemon and
// points its discovery file at it, restoring the file at cleanup. It
// returns the relay, the daemon's own discovery and the relayed one.
func relayDaemon(t *testing.T, store string) (relay *testkit.Relay, real, viaRelay *queue.Discovery) {
	t.Helper()
	real, err := queue.ReadDiscovery(store)
	require.NoError(t, err)
	t.Cleanup(func() { writeDiscovery(t, store, real) })
	u, err := url.Parse(real.URL)
	require.NoError(t, err)
	relay = testkit.StartRelay(t, "127.0.0.1:0", u.Host)
	relayed := *real
	relayed.URL = "tls://" + relay.Addr()
	writeDiscovery(t, store, &relayed)
	return relay, real, &relayed
}

// A client whose discovery file does not pin the certificate the server
// presents refuses to connect, says why, and sends the server nothing: the
// file names another certificate, its fingerprint does not match its
// certificate, or it has none.
func TestImpostorCertificateMismatch(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	real, err := queue.ReadDiscovery(store)
	require.NoError(t, err)
	t.Cleanup(func() { writeDiscovery(t, store, real) }) // the daemon removes its own file at exit

	other := selfSignedCert(t)
	otherPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.Certificate[0]}))
	otherSum := queue.CertFingerprint(other.Certificate[0])
	cases := []struct {
		name  string
		edit  func(d *queue.Discovery)
		error string
	}{
		{"another certificate", func(d *queue.Discovery) { d.TLSCert, d.TLSCertSHA256 = otherPEM, otherSum },
			"it presented certificate " + real.TLSCertSHA256 + ", the discovery file names " + otherSum},
		{"another fingerprint", func(d *queue.Discovery) { d.TLSCertSHA256 = otherSum },
			"tls_cert_sha256"},
		{"no certificate", func(d *queue.Discovery) { d.TLSCert, d.TLSCertSHA256 = "", "" },
			"no tls_cert"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := *real
			c.edit(&d)
			// Point the file at a relay to the daemon, to see what the
			// client sends.
			u, err := url.Parse(real.URL)
			require.NoError(t, err)
			r := testkit.StartRelay(t, "127.0.0.1:0", u.Host)
			d.URL = "tls://" + r.Addr()
			writeDiscovery(t, store, &d)

			_, err = client.Open(t.Context(), store, client.WithRoute(client.RouteRequire), client.WithConnectTimeout(500*time.Millisecond))
			require.Error(t, err)
			assert.ErrorIs(t, err, client.ErrUnverified)
			assert.ErrorIs(t, err, client.ErrUnavailable)
			assert.Contains(t, err.Error(), "did not prove it is the store's daemon")
			assert.Contains(t, err.Error(), c.error)
			assert.False(t, r.Carried(real.Password), "the password went to a server that did not prove itself")

			res := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait=1s", "append", "f.txt", "x")
			assert.Equal(t, 75, res.code, res.stderr)
			assert.Contains(t, res.stderr, "did not prove it is the store's daemon")
			assert.Contains(t, res.stderr, c.error)
			assert.False(t, r.Carried(real.Password), "the password went to a server that did not prove itself")
			assert.NoFileExists(t, filepath.Join(store, "f.txt"))
		})
	}

	writeDiscovery(t, store, real)
	ok := scribe(t, "", "submit", "--store", store, "--route", "require", "--wait", "append", "f.txt", "x")
	assert.Equal(t, 0, ok.code, ok.stderr)
}

// What passes between a client and its daemon is TLS end to end: a relay
// in the middle sees neither the password nor a job. When the connection
// is lost with the daemon still there, the client goes back to the same
// daemon through discovery, and no job is lost or applied twice.
func TestImpostorRelay(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	r, real, viaRelay := relayDaemon(t, store)

	cl, err := client.Open(t.Context(), store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	apply := func(id string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		out, err := cl.Apply(ctx, &queue.Job{ID: id, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "log.txt", Data: []byte("secret-" + id + "\n")}}})
		require.NoError(t, err, id)
		assert.True(t, out.Applied(), "%s: %+v", id, out)
	}
	for i := range 3 {
		apply(fmt.Sprintf("relay-%d", i))
	}
	require.Equal(t, 1, r.Connections())
	r.Cut()
	for i := 3; i < 6; i++ {
		apply(fmt.Sprintf("relay-%d", i))
	}
	assert.Equal(t, 2, r.Connections(), "one redial, through discovery, to the same daemon")
	assert.Equal(t, viaRelay.URL, cl.Daemon().URL)
	assert.False(t, r.Carried(real.Password), "the password crossed the relay in clear")
	assert.False(t, r.Carried("secret-"), "job data crossed the relay in clear")
	assert.False(t, r.Carried("relay-"), "job IDs crossed the relay in clear")
	content := readFile(t, filepath.Join(store, "log.txt"))
	for i := range 6 {
		assert.Equal(t, 1, strings.Count(content, fmt.Sprintf("secret-relay-%d\n", i)))
	}
}
