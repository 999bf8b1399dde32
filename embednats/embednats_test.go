package embednats_test

import (
	"bufio"
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
	"github.com/scribehq/scribe/writer"
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

// start starts and announces a server on store, closed at cleanup.
func start(t testing.TB, cfg embednats.Config) *embednats.Server {
	t.Helper()
	srv, err := embednats.Start(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	require.NoError(t, srv.Announce())
	return srv
}

// connect connects to the server d names as a submitter would: over TLS
// pinned to d's certificate, with opts (credentials) added.
func connect(t testing.TB, d queue.Discovery, opts ...nats.Option) (*nats.Conn, error) {
	t.Helper()
	tc, err := d.TLSConfig()
	require.NoError(t, err)
	return nats.Connect(d.URL, append([]nats.Option{nats.Secure(tc), nats.MaxReconnects(0)}, opts...)...)
}

// logBuffer is a slog.Logger writing into a buffer safe to read while the
// server logs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// snapshot records every entry under dir: its mode, and its content or
// symlink target, so that a test can assert nothing changed.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			v += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		out[rel] = v
		return nil
	}))
	return out
}

func chmod(t testing.TB, path string, mode fs.FileMode) {
	t.Helper()
	require.NoError(t, os.Chmod(path, mode)) // Chmod, unlike Mkdir, ignores the umask
}

func writeFile(t testing.TB, path, content string, mode fs.FileMode) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), mode))
	chmod(t, path, mode)
}

// nobody is a uid that is not ours, for files "owned by another user".
const nobody = 65534

// Start refuses a store whose .scribe folder, or a file in it the daemon
// trusts, another user could change, names the path and the reason, and
// writes nothing: not even the evidence is removed.
func TestStartRefusesInsecureMeta(t *testing.T) {
	root := os.Geteuid() == 0
	cases := []struct {
		name     string
		setup    func(t *testing.T, meta string) // meta exists (0700, with a daemon.lock) unless setup changes that
		rootOnly bool
		path     string // offending path, relative to .scribe ("" is .scribe itself)
		problem  string
	}{
		{"world-writable folder", func(t *testing.T, meta string) { chmod(t, meta, 0o777) }, false, "", "is world-writable"},
		{"world-writable sticky folder", func(t *testing.T, meta string) { chmod(t, meta, 0o1777) }, false, "", "is world-writable"},
		{"group-writable folder", func(t *testing.T, meta string) { chmod(t, meta, 0o770) }, false, "", "is group-writable"},
		{"folder owned by another user", func(t *testing.T, meta string) {
			require.NoError(t, os.Chown(meta, nobody, nobody))
		}, true, "", "is owned by uid 65534"},
		{"folder is a symlink", func(t *testing.T, meta string) {
			elsewhere := filepath.Join(filepath.Dir(filepath.Dir(meta)), "elsewhere")
			require.NoError(t, os.Rename(meta, elsewhere))
			require.NoError(t, os.Symlink(elsewhere, meta))
		}, false, "", "is a symlink"},
		{"folder is a file", func(t *testing.T, meta string) {
			require.NoError(t, os.RemoveAll(meta))
			writeFile(t, meta, "x", 0o600)
		}, false, "", "is not a folder"},
		{"group-writable discovery file", func(t *testing.T, meta string) {
			writeFile(t, filepath.Join(meta, "daemon.json"), `{"url":"nats://evil:4222"}`, 0o660)
		}, false, "daemon.json", "is group-writable"},
		{"world-writable discovery file", func(t *testing.T, meta string) {
			writeFile(t, filepath.Join(meta, "daemon.json"), `{"url":"nats://evil:4222"}`, 0o606)
		}, false, "daemon.json", "is world-writable"},
		{"discovery file owned by another user", func(t *testing.T, meta string) {
			p := filepath.Join(meta, "daemon.json")
			writeFile(t, p, `{}`, 0o600)
			require.NoError(t, os.Chown(p, nobody, nobody))
		}, true, "daemon.json", "is owned by uid 65534"},
		{"discovery file is a symlink", func(t *testing.T, meta string) {
			target := filepath.Join(filepath.Dir(filepath.Dir(meta)), "planted.json")
			writeFile(t, target, `{}`, 0o600)
			require.NoError(t, os.Symlink(target, filepath.Join(meta, "daemon.json")))
		}, false, "daemon.json", "is a symlink"},
		{"discovery temp file is a symlink", func(t *testing.T, meta string) {
			target := filepath.Join(filepath.Dir(filepath.Dir(meta)), "victim.txt")
			writeFile(t, target, "precious", 0o600)
			require.NoError(t, os.Symlink(target, filepath.Join(meta, "daemon.json.tmp")))
		}, false, "daemon.json.tmp", "is a symlink"},
		{"group-writable daemon lock", func(t *testing.T, meta string) {
			chmod(t, filepath.Join(meta, "daemon.lock"), 0o660)
		}, false, "daemon.lock", "is group-writable"},
		{"world-writable queue folder", func(t *testing.T, meta string) {
			js := filepath.Join(meta, "jetstream")
			require.NoError(t, os.Mkdir(js, 0o700))
			chmod(t, js, 0o777)
		}, false, "jetstream", "is world-writable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.rootOnly && !root {
				t.Skip("chown to another user needs root")
			}
			store := newStore(t)
			meta := filepath.Join(store, queue.MetaDir)
			require.NoError(t, os.Mkdir(meta, 0o700))
			writeFile(t, filepath.Join(meta, "daemon.lock"), "", 0o600)
			c.setup(t, meta)
			parent := filepath.Dir(store)
			before := snapshot(t, parent)

			srv, err := embednats.Start(t.Context(), embednats.Config{Store: store})
			if srv != nil {
				_ = srv.Close()
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, embednats.ErrInsecure)
			var ie *embednats.InsecureError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, filepath.Join(meta, c.path), ie.Path)
			assert.Contains(t, err.Error(), filepath.Join(meta, c.path))
			assert.Contains(t, err.Error(), c.problem)
			assert.Equal(t, before, snapshot(t, parent), "Start must write nothing when it refuses")
		})
	}
}

// Start makes the .scribe folder owner-only (creating it so, or tightening
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
			start(t, embednats.Config{Store: store})
			for _, c := range []struct {
				path string
				mode fs.FileMode
			}{
				{meta, 0o700 | fs.ModeDir},
				{queue.DiscoveryPath(store), 0o600},
				{queue.DaemonLockPath(store), 0o600},
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
		srv := start(t, embednats.Config{Store: store})
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
		assert.NoFileExists(t, queue.DiscoveryPath(store), "Close removes the discovery file it wrote")
	}
}

// Connecting needs the credentials of the discovery file; nothing else
// gets in.
func TestConnectNeedsCredentials(t *testing.T) {
	srv := start(t, embednats.Config{Store: newStore(t)})
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
		var log logBuffer
		srv := start(t, embednats.Config{Store: newStore(t), Logger: log.logger()})
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
		var log logBuffer
		srv := start(t, embednats.Config{Store: newStore(t), Host: "0.0.0.0", Logger: log.logger()})
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
	srv, err := embednats.Start(ctx, embednats.Config{Store: store})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	w, err := writer.New(ctx, writer.Config{Store: store, Conn: srv.Conn()})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Close() })
	require.NoError(t, srv.Announce())
	d := srv.Discovery()
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
	_, err = queue.Publish(ctx, js, d.StoreID, job.ID, b)
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
	srv := start(t, embednats.Config{Store: store})
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

	// In clear, the server asks for TLS and ignores the credentials.
	c, err := net.DialTimeout("tcp", u.Host, time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "INFO "), line)
	var info struct {
		TLSRequired bool `json:"tls_required"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "INFO ")), &info))
	assert.True(t, info.TLSRequired, line)
	_, err = fmt.Fprintf(c, "CONNECT {\"user\":%q,\"pass\":%q,\"verbose\":false}\r\nPING\r\n", d.User, d.Password)
	require.NoError(t, err)
	reply, _ := io.ReadAll(r)
	assert.NotContains(t, string(reply), "PONG", "a connection in clear must not get in")

	// A client that does not pin this certificate (the system's roots)
	// refuses the server; one that pins it gets in.
	_, err = nats.Connect(d.URL, nats.UserInfo(d.User, d.Password), nats.MaxReconnects(0))
	var cv *tls.CertificateVerificationError
	assert.ErrorAs(t, err, &cv)
	nc, err := connect(t, d, nats.UserInfo(d.User, d.Password))
	require.NoError(t, err)
	defer nc.Close()
	state, err := nc.TLSConnectionState()
	require.NoError(t, err)
	assert.Equal(t, d.TLSCertSHA256, queue.CertFingerprint(state.PeerCertificates[0].Raw))
}

// A listener on another address gets a certificate that names it, so that
// clients can check the name in the URL as well as the pin.
func TestCertificateNamesTheHost(t *testing.T) {
	srv := start(t, embednats.Config{Store: newStore(t), Host: "0.0.0.0"})
	d := srv.Discovery()
	tc, err := d.TLSConfig()
	require.NoError(t, err)
	block, _ := pem.Decode([]byte(d.TLSCert))
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.NoError(t, cert.VerifyHostname("0.0.0.0"))
	assert.NoError(t, cert.VerifyHostname("127.0.0.1"))
	nc, err := nats.Connect(d.URL, nats.Secure(tc), nats.UserInfo(d.User, d.Password), nats.MaxReconnects(0))
	require.NoError(t, err, d.URL)
	nc.Close()
}
