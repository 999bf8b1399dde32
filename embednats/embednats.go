package embednats

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gofrs/flock"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/scribehq/scribe/queue"
)

// Config configures Start.
type Config struct {
	// Store is the store folder.
	Store string
	// Host is the listener's address; empty means 127.0.0.1.
	Host string
	// Port is the listener's port; 0 picks a free one.
	Port int
	// SyncInterval is how often JetStream fsyncs stored jobs; 0 means on
	// every write, so that a returned Submit survives power loss.
	SyncInterval time.Duration
	// Version is recorded in the discovery file.
	Version string
	// Logger receives the server's notices and errors; nil discards them.
	Logger *slog.Logger
}

// Server is a running embedded NATS server for one store.
type Server struct {
	ns        *server.Server
	conn      *nats.Conn
	lock      *flock.Flock
	discovery queue.Discovery
	path      string // discovery file
	announced bool   // the discovery file at path is ours
	closeOnce sync.Once
	closeErr  error
}

// DaemonInboxPrefix is the inbox prefix of the daemon's own connection.
// Submitters can subscribe only to "_INBOX.>", which does not cover it.
const DaemonInboxPrefix = "_SCRIBE_DAEMON"

// jetstreamDir is the queue's folder in .scribe.
const jetstreamDir = "jetstream"

// lockSettle bounds how long Start retries a busy daemon lock. A client
// probing the lock holds it for microseconds; a daemon holds it for its
// lifetime. Retrying for this long tells the two apart, so a probe never
// makes a starting daemon fail.
const lockSettle = 300 * time.Millisecond

// Start takes the store's daemon lock and starts the server. If another
// daemon serves the store it returns a *RunningError at once. If another
// user could change the store's .scribe folder or a file in it that the
// daemon trusts, it returns an *InsecureError (ErrInsecure), having
// created at most the daemon lock file (perm.go). The server is not
// announced to clients until Announce.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	store, err := queue.ResolveStore(cfg.Store)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	meta := filepath.Join(store, queue.MetaDir)
	if err := os.Mkdir(meta, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create %s: %w", meta, err)
	}
	// Taking the daemon lock creates a file in .scribe: check the folder
	// first, and what is in it once the lock is ours (perm.go).
	if err := checkMetaDir(meta); err != nil {
		return nil, err
	}
	s := &Server{path: queue.DiscoveryPath(store)}
	s.lock = flock.New(queue.DaemonLockPath(store), flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o600))
	settle, cancel := context.WithTimeout(ctx, lockSettle)
	locked, err := s.lock.TryLockContext(settle, 5*time.Millisecond)
	cancel()
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("daemon lock: %w", err)
	}
	if !locked {
		var other *queue.Discovery
		if d, rerr := queue.ReadDiscovery(store); rerr == nil {
			other = d
		}
		return nil, &RunningError{Store: store, Other: other}
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := checkMetaFiles(store); err != nil {
		return nil, err
	}
	if err := tightenMetaDir(meta, logger); err != nil {
		return nil, err
	}
	warnSharedStore(store, logger)
	// A daemon killed before it could clean up left its discovery file:
	// clients trust it while the lock is held, which is now ours, so it
	// goes before anything else. It is also the evidence that jobs may be
	// stranded in the queue: keep that in the marker, which only a writer
	// that has seen the queue empty removes (so a start that fails here
	// loses nothing).
	if old, err := queue.ReadDiscovery(store); err == nil {
		if err := queue.MarkStranded(store, fmt.Sprintf("daemon pid %d was killed", old.PID)); err != nil {
			return nil, err
		}
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove stale discovery: %w", err)
	}

	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		logger.Warn("the NATS listener is not on a loopback address: anyone who can reach it and has the credentials can submit", "host", host)
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	storeID := queue.StoreID(store)
	clientPass, daemonPass := secret(), secret()
	// Every network client must speak TLS and get this start's
	// certificate, pinned in the discovery file: a client then sends its
	// credentials only to this process, never to whoever binds the port
	// after a restart. Clients present no certificate of their own.
	cert, certPEM, err := daemonCert(storeID, host, time.Now())
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName:   "scribe-" + storeID,
		Host:         host,
		Port:         port,
		JetStream:    true,
		StoreDir:     filepath.Join(meta, jetstreamDir),
		SyncAlways:   cfg.SyncInterval == 0,
		SyncInterval: cfg.SyncInterval,
		NoSigs:       true,
		MaxPayload:   queue.MaxJobBytes + 64*1024,
		TLS:          true,
		TLSVerify:    false,
		TLSConfig:    &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		// A loaded machine can take seconds for a handshake; the default
		// 2 s made hooks fail with "does not answer" under heavy load.
		TLSTimeout: 5,
		Users: []*server.User{
			{Username: "daemon", Password: daemonPass},
			{Username: "client", Password: clientPass, Permissions: clientPermissions(storeID)},
		},
	}
	if s.ns, err = server.NewServer(opts); err != nil {
		return nil, fmt.Errorf("start nats: %w", err)
	}
	s.ns.SetLoggerV2(&slogAdapter{logger}, false, false, false)
	s.ns.Start()
	if !s.ns.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("start nats: not ready after 10s")
	}
	// Submitters may subscribe to _INBOX.> (their replies arrive there), so
	// the daemon's own replies, above all the jobs its pull consumer is
	// delivered, must not: they use another prefix no submitter can read.
	// The connection is in-process, so it needs no TLS.
	s.conn, err = nats.Connect("", nats.InProcessServer(s.ns), nats.UserInfo("daemon", daemonPass),
		nats.Name("scribe-daemon"), nats.CustomInboxPrefix(DaemonInboxPrefix))
	if err != nil {
		return nil, fmt.Errorf("connect in-process: %w", err)
	}
	s.discovery = queue.Discovery{
		URL: s.ns.ClientURL(), User: "client", Password: clientPass,
		PID: os.Getpid(), Version: cfg.Version, Store: store, StoreID: storeID,
		TLSCert: string(certPEM), TLSCertSHA256: queue.CertFingerprint(cert.Certificate[0]),
		Started: time.Now().UTC(),
	}
	return s, nil
}

// Announce writes the discovery file, so that clients start using the
// daemon. Call it once the store's stream and writer are ready: until
// then clients see a held daemon lock without a discovery file and wait.
func (s *Server) Announce() error {
	s.announced = true // a half-written file is ours to remove too
	return writeDiscovery(s.path, &s.discovery)
}

// clientPermissions lets submitters queue jobs for one store, receive
// outcomes and replies, and ask the status service: nothing that could
// delete, purge or read the queue itself. Everything else is denied,
// JetStream's API ($JS.API.>) included; the daemon's own connection uses
// the "daemon" user, which submitters never see (docs/security.md).
func clientPermissions(storeID string) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			queue.JobsSubject(storeID), queue.StatusSubject(storeID),
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			"_INBOX.>", queue.OutcomeSubject(storeID, "*"),
		}},
	}
}

func secret() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func writeDiscovery(path string, d *queue.Discovery) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write discovery: %w", err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // WriteFile keeps an existing file's mode
		return fmt.Errorf("write discovery: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write discovery: %w", err)
	}
	return nil
}

// Conn is the daemon's in-process connection, with full permissions.
func (s *Server) Conn() *nats.Conn { return s.conn }

// Discovery is what the server published in its discovery file.
func (s *Server) Discovery() queue.Discovery { return s.discovery }

// Close shuts the server down and waits for it: the discovery file is
// removed, the connection drained, JetStream flushed to disk, and the
// daemon lock released last.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Server) close() error {
	if s.announced && s.lock != nil && s.lock.Locked() {
		// Only a file we wrote, while the lock is ours: another may name
		// another daemon, or be the evidence that made Start refuse.
		_ = os.Remove(s.path)
	}
	if s.conn != nil {
		s.conn.Close()
	}
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	}
	if s.lock != nil {
		return s.lock.Unlock()
	}
	return nil
}
