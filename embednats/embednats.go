package embednats

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/daemon"
)

// Config configures Start.
type Config struct {
	// Host is the listener's address; empty means 127.0.0.1.
	Host string
	// Port is the listener's port; 0 picks a free one.
	Port int
	// SyncInterval is how often JetStream fsyncs stored jobs; 0 means on
	// every write, so that a returned Submit survives power loss.
	SyncInterval time.Duration
	// Version is recorded in the discovery.
	Version string
	// Logger receives the server's notices and errors; nil discards them.
	Logger *slog.Logger
}

// Server is a running embedded NATS server for one store.
type Server struct {
	ns        *server.Server
	conn      *nats.Conn
	layout    queue.Layout
	discovery queue.Discovery
	// jsConfig is JetStream's configuration as the server started it,
	// limits computed from the disk included: a restart (restartJetStream)
	// must keep its sync policy and the storage its streams reserved.
	jsConfig  *server.JetStreamConfig
	closeOnce sync.Once
}

// DaemonInboxPrefix is the inbox prefix of the daemon's own connection.
// Submitters can subscribe only to "_INBOX.>", which does not cover it.
const DaemonInboxPrefix = "_SCRIBE_DAEMON"

// Start starts the server of the store whose daemon lock lk is, keeping
// the queue in the store's .scribe folder (queue.Layout.Queue). The lock
// must stay held until the server is closed: it is what makes this the
// store's only server, and Take has checked the folder's permissions.
// Clients learn of the server once its Discovery is announced
// (daemon.Lock.Announce).
func Start(ctx context.Context, lk *daemon.Lock, cfg Config) (_ *Server, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{layout: lk.Layout()}
	store := s.layout.Root
	defer func() {
		if err != nil {
			s.Close()
		}
	}()

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
		StoreDir:     s.layout.Queue(),
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
	s.ns.SetLoggerV2(&slogAdapter{l: logger}, false, false, false)
	s.ns.Start()
	if !s.ns.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("start nats: not ready after 10s")
	}
	s.jsConfig = s.ns.JetStreamConfig()
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

// clientPermissions lets submitters queue jobs for one store, receive
// outcomes and replies, and ask the status service: nothing that could
// delete, purge or read the queue itself. Everything else is denied,
// JetStream's API ($JS.API.>) included; the daemon's own connection uses
// the "daemon" user, which submitters never see (docs/security.md).
//
// NATS matches a subscription's subject against these token by token, so
// the outcomes "*" also admits a subscription to outcomes.> (its ">" is one
// token there). No deny rule can refuse that one alone: it would match
// every outcome subject. It gets every outcome, as outcomes.* does (job IDs
// are one token), and besides only replies that a submitter addressed to
// deeper subjects (tests/protocol_test.go).
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

// Conn is the daemon's in-process connection, with full permissions.
func (s *Server) Conn() *nats.Conn { return s.conn }

// Discovery is what the server published in its discovery file.
func (s *Server) Discovery() queue.Discovery { return s.discovery }

// Close shuts the server down and waits for it: the connection is
// drained and JetStream flushed to disk. It neither withdraws the
// discovery nor releases the daemon lock: the lock's owner does, after
// Close (withdrawing first, so that clients stop coming).
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.conn != nil {
			s.conn.Close()
		}
		if s.ns != nil {
			s.ns.Shutdown()
			s.ns.WaitForShutdown()
		}
	})
	return nil
}
