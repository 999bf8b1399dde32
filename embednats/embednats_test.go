package embednats_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/embednats"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer/daemon"
)

// newStore makes an empty store folder and returns its real path.
func newStore(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	require.NoError(t, os.Mkdir(dir, 0o755))
	real, err := queue.ResolveStore(dir)
	require.NoError(t, err)
	return real
}

// start serves store as a daemon does: it takes the store's daemon lock,
// starts the server under it and announces it. Both are closed at cleanup,
// the server first.
func start(t testing.TB, store string, cfg embednats.Config) *embednats.Server {
	t.Helper()
	srv, _ := serve(t, store, cfg)
	return srv
}

// serve is start, also returning the daemon lock.
func serve(t testing.TB, store string, cfg embednats.Config) (*embednats.Server, *discovery.Lock) {
	t.Helper()
	lk, err := discovery.Take(t.Context(), store, cfg.Logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Close() })
	srv, err := embednats.Start(t.Context(), lk, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	d := srv.Discovery()
	require.NoError(t, lk.Announce(&d))
	return srv, lk
}

// connect connects to the server d names as a submitter would: over TLS
// pinned to d's certificate, with opts (credentials) added.
func connect(t testing.TB, d queue.Discovery, opts ...nats.Option) (*nats.Conn, error) {
	t.Helper()
	pinned, err := d.Pinned()
	require.NoError(t, err)
	return nats.Connect(d.URL, append([]nats.Option{pinned, nats.MaxReconnects(0)}, opts...)...)
}

func chmod(t testing.TB, path string, mode fs.FileMode) {
	t.Helper()
	require.NoError(t, os.Chmod(path, mode)) // Chmod, unlike Mkdir, ignores the umask
}

// Serving makes the .scribe folder owner-only (creating it so, or tightening
// one that others could read), and the files it writes are owner-only.
func TestStartMakesMetaOwnerOnly(t *testing.T) {
	for _, pre := range []fs.FileMode{0, 0o755, 0o750, 0o711} {
		name := "created"
		if pre != 0 {
			name = "was " + pre.String()
		}
		t.Run(name, func(t *testing.T) {
			store := newStore(t)
			meta := filepath.Join(store, queue.MetaDir)
			if pre != 0 {
				require.NoError(t, os.Mkdir(meta, 0o700))
				chmod(t, meta, pre)
			}
			start(t, store, embednats.Config{})
			for _, c := range []struct {
				path string
				mode fs.FileMode
			}{
				{meta, 0o700 | fs.ModeDir},
				{queue.Layout{Root: store}.Discovery(), 0o600},
				{queue.Layout{Root: store}.DaemonLock(), 0o600},
			} {
				fi, err := os.Lstat(c.path)
				require.NoError(t, err)
				assert.Equal(t, c.mode.String(), fi.Mode().String(), c.path)
			}
		})
	}
}

// Every start makes new credentials and a new certificate, and the old
// ones stop working: a client that pins a previous start's certificate
// refuses the server before it sends anything.
func TestCredentialsChangeOnEveryStart(t *testing.T) {
	store := newStore(t)
	var discs []queue.Discovery
	for range 3 {
		srv, lk := serve(t, store, embednats.Config{})
		d, err := queue.ReadDiscovery(store)
		require.NoError(t, err)
		assert.Equal(t, srv.Discovery(), *d)
		assert.Equal(t, "client", d.User)
		assert.Len(t, d.Password, 48, "192 random bits, hex")
		for _, old := range discs {
			assert.NotEqual(t, old.Password, d.Password)
			assert.NotEqual(t, old.TLSCertSHA256, d.TLSCertSHA256)
			assert.NotEqual(t, old.TLSCert, d.TLSCert)
			_, err := connect(t, *d, nats.UserInfo(old.User, old.Password))
			assert.ErrorIs(t, err, nats.ErrAuthorization, "a previous start's credentials must be refused")
			pinnedOld := *d
			pinnedOld.TLSCert, pinnedOld.TLSCertSHA256 = old.TLSCert, old.TLSCertSHA256
			_, err = connect(t, pinnedOld, nats.UserInfo(d.User, d.Password))
			var cv *tls.CertificateVerificationError
			assert.ErrorAs(t, err, &cv, "a previous start's certificate must not verify this server")
		}
		discs = append(discs, *d)
		require.NoError(t, srv.Close())
		require.NoError(t, lk.Close())
		assert.NoFileExists(t, queue.Layout{Root: store}.Discovery(), "Close removes the discovery file it wrote")
	}
}

// Connecting needs the credentials of the discovery file; nothing else
// gets in.
func TestConnectNeedsCredentials(t *testing.T) {
	srv := start(t, newStore(t), embednats.Config{})
	d := srv.Discovery()
	cases := []struct {
		name string
		opts []nats.Option
		ok   bool
	}{
		{"no credentials", nil, false},
		{"wrong password", []nats.Option{nats.UserInfo(d.User, d.Password+"x")}, false},
		{"empty password", []nats.Option{nats.UserInfo(d.User, "")}, false},
		{"the daemon's user with the client's password", []nats.Option{nats.UserInfo("daemon", d.Password)}, false},
		{"a token", []nats.Option{nats.Token(d.Password)}, false},
		{"the discovery file's credentials", []nats.Option{nats.UserInfo(d.User, d.Password)}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nc, err := connect(t, d, c.opts...)
			if nc != nil {
				nc.Close()
			}
			if c.ok {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, nats.ErrAuthorization)
			}
		})
	}
}

// nonLoopbackIP returns an address of this machine that is not loopback,
// or nil if it has none.
func nonLoopbackIP(t testing.TB) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	return nil
}

// The listener is on 127.0.0.1 unless told otherwise, and then the daemon
// warns.
func TestListenerIsLoopback(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		var log embednats.LogBuffer
		srv := start(t, newStore(t), embednats.Config{Logger: log.Logger()})
		u, err := url.Parse(srv.Discovery().URL)
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1", u.Hostname())
		c, err := net.DialTimeout("tcp", u.Host, time.Second)
		require.NoError(t, err, "the listener answers on loopback")
		c.Close()
		if ip := nonLoopbackIP(t); ip != nil {
			_, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), u.Port()), time.Second)
			assert.Error(t, err, "the listener must not answer on %s", ip)
		} else {
			t.Log("no non-loopback address to try")
		}
		assert.NotContains(t, log.String(), "not on a loopback address")
	})
	t.Run("all interfaces warns", func(t *testing.T) {
		var log embednats.LogBuffer
		srv := start(t, newStore(t), embednats.Config{Host: "0.0.0.0", Logger: log.Logger()})
		assert.Contains(t, log.String(), "level=WARN")
		assert.Contains(t, log.String(), "not on a loopback address")
		u, err := url.Parse(srv.Discovery().URL)
		require.NoError(t, err)
		port, err := strconv.Atoi(u.Port())
		require.NoError(t, err)
		assert.Positive(t, port)
	})
}

// The two sides of the bus: the daemon's in-process connection manages the
// store's stream; the submitters' credentials may queue jobs and ask for
// status, and are refused the JetStream API.
func TestDaemonAndSubmitterPermissions(t *testing.T) {
	store := newStore(t)
	ctx := t.Context()
	lk, err := discovery.Take(ctx, store, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Close() })
	srv, err := embednats.Start(ctx, lk, embednats.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	w, err := daemon.NewWriter(ctx, daemon.WriterConfig{Store: store, Conn: srv.Conn()})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Close() })
	d := srv.Discovery()
	require.NoError(t, lk.Announce(&d))
	stream := queue.StreamName(d.StoreID)

	// The daemon's side.
	djs, err := jetstream.New(srv.Conn())
	require.NoError(t, err)
	info, err := djs.Stream(ctx, stream)
	require.NoError(t, err, "the daemon's connection manages its stream")
	assert.Equal(t, stream, info.CachedInfo().Config.Name)
	_, err = djs.Consumer(ctx, stream, queue.ConsumerName)
	assert.NoError(t, err)
	assert.Contains(t, srv.Conn().NewInbox(), embednats.DaemonInboxPrefix+".")

	// The submitters' side.
	var mu sync.Mutex
	var async []error
	nc, err := connect(t, d, nats.UserInfo(d.User, d.Password),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			defer mu.Unlock()
			async = append(async, err)
		}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	job := &queue.Job{ID: "perm-1", Store: d.StoreID, Ops: []queue.Op{{Kind: queue.OpPut, Path: "f.txt", Data: []byte("x")}}}
	b, err := queue.Encode(job)
	require.NoError(t, err)
	_, err = queue.Publish(ctx, js, d.StoreID, queue.JobsSubject(d.StoreID), job.ID, b)
	require.NoError(t, err, "a submitter may queue jobs")
	require.Eventually(t, func() bool {
		m, err := nc.Request(queue.StatusSubject(d.StoreID), []byte(job.ID), time.Second)
		if err != nil {
			return false
		}
		var l queue.Lookup
		return assert.NoError(t, json.Unmarshal(m.Data, &l)) && l.Found && l.Outcome.Applied()
	}, 10*time.Second, 20*time.Millisecond, "a submitter may ask the status service")

	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = js.Stream(short, stream)
	assert.Error(t, err, "a submitter may not read stream info")
	assert.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range async {
			if errors.Is(e, nats.ErrPermissionViolation) {
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond, "the server reports a permissions violation")
}

// Every network client must speak TLS, and the server proves itself with
// the certificate of the discovery file: made for this start, ECDSA P-256,
// for the loopback names, its key nowhere on disk. Credentials sent in
// clear are refused before they are checked.
func TestListenerRequiresPinnedTLS(t *testing.T) {
	store := newStore(t)
	srv := start(t, store, embednats.Config{})
	d := srv.Discovery()
	u, err := url.Parse(d.URL)
	require.NoError(t, err)
	assert.Equal(t, "tls", u.Scheme)
	assert.Equal(t, "127.0.0.1", u.Hostname())

	block, rest := pem.Decode([]byte(d.TLSCert))
	require.NotNil(t, block)
	assert.Equal(t, "CERTIFICATE", block.Type)
	assert.Empty(t, bytes.TrimSpace(rest))
	assert.Equal(t, queue.CertFingerprint(block.Bytes), d.TLSCertSHA256)
	assert.Len(t, d.TLSCertSHA256, 64)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	require.True(t, ok, "an ECDSA key, got %T", cert.PublicKey)
	assert.Equal(t, elliptic.P256(), pub.Curve)
	var ips []string
	for _, ip := range cert.IPAddresses {
		ips = append(ips, ip.String())
	}
	assert.ElementsMatch(t, []string{"127.0.0.1", "::1"}, ips)
	assert.Equal(t, []string{"localhost"}, cert.DNSNames)
	assert.True(t, cert.NotBefore.Before(time.Now()))
	assert.True(t, cert.NotAfter.After(time.Now().AddDate(5, 0, 0)))
	for _, host := range []string{"127.0.0.1", "::1", "localhost"} {
		assert.NoError(t, cert.VerifyHostname(host))
	}

	// The key stays in the daemon's memory.
	require.NoError(t, filepath.WalkDir(filepath.Join(store, queue.MetaDir), func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		assert.NotContains(t, string(b), "PRIVATE KEY", p)
		return nil
	}))

	// In clear, the server says nothing (TLS comes first: no INFO before
	// the handshake) and lets no credentials in; it hangs up.
	c, err := net.DialTimeout("tcp", u.Host, time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
	_, err = fmt.Fprintf(c, "CONNECT {\"user\":%q,\"pass\":%q,\"verbose\":false}\r\nPING\r\n", d.User, d.Password)
	require.NoError(t, err)
	reply, err := io.ReadAll(c)
	require.NoError(t, err, "the server closes the connection")
	assert.NotContains(t, string(reply), "INFO", "nothing in clear")
	assert.NotContains(t, string(reply), "PONG", "a connection in clear must not get in")

	// A client that waits for INFO before its TLS handshake (nats.go
	// without TLSHandshakeFirst) never hears it, even pinned.
	tc, err := d.TLSConfig()
	require.NoError(t, err)
	_, err = nats.Connect(d.URL, nats.Secure(tc), nats.UserInfo(d.User, d.Password), nats.MaxReconnects(0))
	assert.Error(t, err, "a client that is not TLS-first")

	// A client that does not pin this certificate (the system's roots)
	// refuses the server; one that pins it gets in.
	_, err = nats.Connect(d.URL, nats.TLSHandshakeFirst(), nats.UserInfo(d.User, d.Password), nats.MaxReconnects(0))
	var cv *tls.CertificateVerificationError
	assert.ErrorAs(t, err, &cv)
	nc, err := connect(t, d, nats.UserInfo(d.User, d.Password))
	require.NoError(t, err)
	defer nc.Close()
	state, err := nc.TLSConnectionState()
	require.NoError(t, err)
	assert.Equal(t, d.TLSCertSHA256, queue.CertFingerprint(state.PeerCertificates[0].Raw))
	assert.Equal(t, tls.X25519, state.CurveID, "on loopback, the key exchange without the post-quantum share")
}

// A listener on another address gets a certificate that names it, so that
// clients can check the name in the URL as well as the pin.
func TestCertificateNamesTheHost(t *testing.T) {
	srv := start(t, newStore(t), embednats.Config{Host: "0.0.0.0"})
	d := srv.Discovery()
	block, _ := pem.Decode([]byte(d.TLSCert))
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.NoError(t, cert.VerifyHostname("0.0.0.0"))
	assert.NoError(t, cert.VerifyHostname("127.0.0.1"))
	nc, err := connect(t, d, nats.UserInfo(d.User, d.Password))
	require.NoError(t, err, d.URL)
	defer nc.Close()
	state, err := nc.TLSConnectionState()
	require.NoError(t, err)
	assert.Equal(t, tls.X25519MLKEM768, state.CurveID, "off loopback, Go's default: the post-quantum hybrid")
}

// A submitter that publishes where it may not, again and again, is
// refused each time, but cannot flood the daemon's log: one WARN line,
// no ERROR.
func TestViolationsDoNotFloodTheLog(t *testing.T) {
	var logs embednats.LogBuffer
	info := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv := start(t, newStore(t), embednats.Config{Logger: info})
	d := srv.Discovery()
	nc, err := connect(t, d, nats.UserInfo(d.User, d.Password))
	require.NoError(t, err)
	defer nc.Close()
	refused := make(chan error, 100)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { refused <- err })
	const n = 30
	for range n {
		require.NoError(t, nc.Publish("$JS.API.STREAM.DELETE.x", nil))
	}
	require.NoError(t, nc.Flush())
	for range n {
		select {
		case err := <-refused:
			assert.ErrorIs(t, err, nats.ErrPermissionViolation)
		case <-time.After(10 * time.Second):
			t.Fatal("the server did not refuse every publish")
		}
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "Publish Violation"), logs.String())
	assert.Contains(t, logs.String(), "level=WARN")
	assert.NotContains(t, logs.String(), "level=ERROR")
}

// A start says nothing at WARN: TLS first, with no fallback for other
// clients, is the daemon's choice, not a fault nats-server should warn of.
func TestStartLogsNoWarning(t *testing.T) {
	var logs embednats.LogBuffer
	info := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv := start(t, newStore(t), embednats.Config{Logger: info})
	d := srv.Discovery()
	nc, err := connect(t, d, nats.UserInfo(d.User, d.Password))
	require.NoError(t, err)
	nc.Close()
	assert.NotContains(t, logs.String(), "level=WARN")
}

// An in-process client that sends its ClientHello after the server's
// wait for it deadlocks with the server on their pipe until a timeout;
// the daemon tries again and starts.
func TestInProcessConnectDeliveredLateIsRetried(t *testing.T) {
	made := embednats.DeliverInProcessLate(t, 1, 200*time.Millisecond)
	srv := start(t, newStore(t), embednats.Config{})
	require.NoError(t, srv.Conn().Flush())
	assert.GreaterOrEqual(t, made.Load(), int32(2), "the first, late, connection failed and another was made")
}

// A port already in use fails the start with the server's own words, not
// after the ten seconds the wait for a server that is starting allows.
func TestStartOnAPortInUseFailsAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	store := t.TempDir()
	lk, err := discovery.Take(t.Context(), store, nil)
	require.NoError(t, err)
	defer lk.Close()
	_, err = embednats.Start(t.Context(), lk, embednats.Config{Port: l.Addr().(*net.TCPAddr).Port})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "start nats: Error listening on port: ")
	assert.NotContains(t, err.Error(), "not ready after")
}
