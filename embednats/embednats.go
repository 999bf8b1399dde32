package embednats

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
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
	"github.com/scribehq/scribe/queue/discovery"
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
	// MaxJobBytes is the largest encoded job the server must carry (its
	// max payload, with room for headers, follows); 0 means
	// queue.MaxJobBytes.
	MaxJobBytes int
	// Version is recorded in the discovery.
	Version string
	// Logger receives the server's notices and errors; nil discards them.
	Logger *slog.Logger
}

// Server is a running embedded NATS server: for one store (Start), or
// for several (StartShared).
type Server struct {
	ns *server.Server
	// dataDir is the folder the server keeps its JetStream data in.
	dataDir string
	// stores are the stores served, in the order given; byID indexes
	// them by store ID.
	stores []*served
	byID   map[string]*served
	// shared says each store has an account of its own (StartShared).
	shared bool
	// unserved are the queues in a shared folder of stores not served.
	unserved []Unserved
	// jsConfig is JetStream's configuration as the server started it,
	// limits computed from the disk included: a restart (restartJetStream)
	// must keep its sync policy and the storage its streams reserved.
	jsConfig *server.JetStreamConfig
	// selfTLS is the client side of the server's own TLS, for its
	// in-process connections (connect).
	selfTLS *tls.Config
	// opts are the server's options, as it runs them (RefuseSubmitters
	// reloads changed ones); optsMu guards them and the stores'
	// discoveries, whose credentials change with them.
	opts   *server.Options
	optsMu sync.Mutex
	// queueOps is held (write) while JetStream restarts, and (read) by
	// the daemon's JetStream API requests (QueueOps).
	queueOps  sync.RWMutex
	log       *slog.Logger
	closeOnce sync.Once
}

// QueueOps is the lock a JetStream API request of the daemon's own
// connections holds (read) while it is made: restarting JetStream
// (CheckQueue) holds it (write), since nats-server races with API
// requests that arrive while it starts JetStream. Every writer of the
// server shares it (daemon.WriterConfig.QueueOps).
func (s *Server) QueueOps() *sync.RWMutex { return &s.queueOps }

// served is one store of the server: the daemon's connection for it and
// the discovery its clients find the server by.
type served struct {
	conn      *nats.Conn
	discovery queue.Discovery
}

// DaemonInboxPrefix is the inbox prefix of the daemon's own connection
// (queue.DaemonInboxPrefix). Submitters can subscribe only to "_INBOX.>",
// which does not cover it.
const DaemonInboxPrefix = queue.DaemonInboxPrefix

// Start starts the server of the store whose daemon lock lk is, keeping
// the queue in the store's .scribe folder (queue.Layout.Queue). The lock
// must stay held until the server is closed: it is what makes this the
// store's only server, and Take has checked the folder's permissions.
// Clients learn of the server once its Discovery is announced
// (discovery.Lock.Announce).
func Start(ctx context.Context, lk *discovery.Lock, cfg Config) (*Server, error) {
	store := lk.Layout().Root
	return start(ctx, cfg, startSpec{
		queueDir: lk.Layout().Queue(), name: "scribe-" + queue.StoreID(store), certName: queue.StoreID(store),
		stores: []string{store},
	})
}

// startSpec is what start needs to know of the stores it serves.
type startSpec struct {
	queueDir string // JetStream's store directory
	name     string // the server's name
	certName string // for the certificate's common name
	stores   []string
	// shared puts each store in an account of its own (AccountName),
	// with unserved: the accounts of the queues of the folder's stores
	// that are not served.
	shared   bool
	unserved []string
}

func start(ctx context.Context, cfg Config, spec startSpec) (_ *Server, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{dataDir: spec.queueDir, byID: map[string]*served{}, shared: spec.shared, log: logger}
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
	// Every network client must speak TLS and get this start's
	// certificate, pinned in the discovery file: a client then sends its
	// credentials only to this process, never to whoever binds the port
	// after a restart. Clients present no certificate of their own.
	//
	// TLS comes first, before the server's INFO, and there is no fallback
	// for clients that wait for INFO in clear: a client that works with
	// the daemon at all is then one that refuses a plain-NATS impostor
	// before it has read or sent a protocol line. A fallback would serve
	// such clients only after its delay, on every connection, and let a
	// client that would hand its password to an impostor pass its tests.
	cert, certPEM, err := daemonCert(spec.certName, host, time.Now())
	if err != nil {
		return nil, err
	}
	self := x509.NewCertPool()
	self.AddCert(cert.Leaf)
	s.selfTLS = &tls.Config{RootCAs: self, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	opts := &server.Options{
		ServerName:   spec.name,
		Host:         host,
		Port:         port,
		JetStream:    true,
		StoreDir:     spec.queueDir,
		SyncAlways:   cfg.SyncInterval == 0,
		SyncInterval: cfg.SyncInterval,
		NoSigs:       true,
		MaxPayload:   int32(queue.Limits{MaxJobBytes: cfg.MaxJobBytes}.JobBytes() + 64*1024),
		TLS:          true,
		TLSVerify:    false,
		TLSConfig:    &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		// No TLSHandshakeFirstFallback: TLS-first clients only.
		TLSHandshakeFirst: true,
		// A loaded machine can take seconds for a handshake; the default
		// 2 s made hooks fail with "does not answer" under heavy load. It
		// also bounds the daemon's own in-process handshakes (connect),
		// so it is no shorter than their timeout.
		TLSTimeout: inProcessTimeout.Seconds(),
		// No system account: nothing here reads its events, and sending
		// them costs each connection an event at its start and its end,
		// and the server's reload races its own read of a client's
		// counters there when RefuseSubmitters cuts off an active one.
		NoSystemAccount: true,
	}
	type creds struct{ daemonUser, daemonPass, clientUser, clientPass string }
	storeCreds := make([]creds, len(spec.stores))
	var accounts []string // the accounts with JetStream, shared only
	for i, store := range spec.stores {
		id := queue.StoreID(store)
		c := creds{daemonUser: "daemon", daemonPass: secret(), clientUser: "client", clientPass: secret()}
		var acc *server.Account
		if spec.shared {
			// An account per store: its submitters see nothing of the
			// other stores, not even the replies to their requests,
			// which all arrive under _INBOX.> (docs/running.md#several-stores).
			c.daemonUser, c.clientUser = "daemon-"+id, "client-"+id
			acc = server.NewAccount(AccountName(id))
			opts.Accounts = append(opts.Accounts, acc)
			accounts = append(accounts, acc.Name)
		}
		opts.Users = append(opts.Users,
			&server.User{Username: c.daemonUser, Password: c.daemonPass, Account: acc},
			&server.User{Username: c.clientUser, Password: c.clientPass, Permissions: clientPermissions(id), Account: acc})
		storeCreds[i] = c
	}
	unservedPass := map[string]string{}
	for _, name := range spec.unserved {
		// Their queues are loaded and kept, never served: the daemon only
		// looks at them (and deletes the empty ones), as "daemon-ID".
		acc := server.NewAccount(name)
		opts.Accounts = append(opts.Accounts, acc)
		accounts = append(accounts, name)
		unservedPass[name] = secret()
		opts.Users = append(opts.Users, &server.User{Username: "daemon-" + name, Password: unservedPass[name], Account: acc})
	}
	if s.ns, err = server.NewServer(opts); err != nil {
		return nil, fmt.Errorf("start nats: %w", err)
	}
	s.opts = opts
	fatal := make(chan string, 1)
	s.ns.SetLoggerV2(&slogAdapter{l: logger, generated: true, fatal: fatal}, false, false, false)
	s.ns.Start()
	if err := waitReady(s.ns, fatal, 10*time.Second); err != nil {
		return nil, err
	}
	for _, name := range accounts {
		acc, err := s.ns.LookupAccount(name)
		if err == nil {
			// No limits: the account may use what the server's JetStream
			// may (nats-server's dynamic limits). A restart of JetStream
			// enables it again by itself.
			err = acc.EnableJetStream(nil, nil)
		}
		if err != nil {
			return nil, fmt.Errorf("start nats: enable JetStream for account %s: %w", name, err)
		}
	}
	s.jsConfig = s.ns.JetStreamConfig()
	started := time.Now().UTC()
	for i, store := range spec.stores {
		id, c := queue.StoreID(store), storeCreds[i]
		conn, err := s.connect(c.daemonUser, c.daemonPass)
		if err != nil {
			return nil, err
		}
		st := &served{conn: conn, discovery: queue.Discovery{
			URL: s.ns.ClientURL(), User: c.clientUser, Password: c.clientPass,
			PID: os.Getpid(), Version: cfg.Version, Store: store, StoreID: id,
			TLSCert: string(certPEM), TLSCertSHA256: queue.CertFingerprint(cert.Certificate[0]),
			Started: started,
		}}
		s.stores = append(s.stores, st)
		s.byID[id] = st
	}
	if len(spec.unserved) > 0 {
		if err := s.lookUnserved(ctx, spec.unserved, unservedPass); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// inProcessTimeout bounds the daemon's connections to its own server,
// the TLS handshake included, and the server's TLS handshakes with
// clients: generous, for a loaded machine (a race-built daemon among many
// processes on two cores).
const inProcessTimeout = 10 * time.Second

// inProcessAttempt bounds one try of an in-process connection. An
// in-process client that sends its ClientHello later than the server's
// 50 ms wait for it (its goroutine not run meanwhile, on a loaded
// machine) deadlocks with the server on their synchronous pipe: each
// writes (the ClientHello, INFO in clear) and neither reads. Only a
// timeout ends that, and a new connection almost always wins the race,
// so tries are short: an in-process handshake takes milliseconds.
const inProcessAttempt = 2 * time.Second

// inProcessConns is where the daemon's in-process connections come from:
// the server; a test stands in, to deliver them late.
var inProcessConns = func(ns *server.Server) nats.InProcessConnProvider { return ns }

// connect makes one of the daemon's in-process connections. Submitters
// may subscribe to _INBOX.> (their replies arrive there), so the daemon's
// own replies, above all the jobs its pull consumer is delivered, must
// not: they use another prefix no submitter can read. The connection is
// in-process and needs no TLS, but it too begins with TLS: nats-server
// waits 50 ms for the ClientHello of an in-process client before it
// sends INFO in clear to one that does not, and that wait would add to
// every daemon start, an autostarting hook's included.
func (s *Server) connect(user, pass string) (*nats.Conn, error) {
	deadline := time.Now().Add(inProcessTimeout)
	for {
		w := &watchedConns{p: inProcessConns(s.ns)}
		expiry := time.AfterFunc(inProcessAttempt, w.expire)
		conn, err := nats.Connect("", nats.InProcessServer(w), nats.UserInfo(user, pass),
			nats.Name("scribe-daemon"), nats.CustomInboxPrefix(DaemonInboxPrefix),
			nats.Secure(s.selfTLS), nats.TLSHandshakeFirst(), nats.Timeout(inProcessAttempt))
		expired := !expiry.Stop()
		if err == nil && !expired {
			return conn, nil
		}
		if conn != nil {
			conn.Close()
		}
		if err == nil {
			err = errors.New("the connection was closed as it was made: it took too long")
		}
		if !expired && !errors.Is(err, os.ErrDeadlineExceeded) || time.Now().Add(inProcessAttempt).After(deadline) {
			return nil, fmt.Errorf("connect in-process: %w", err)
		}
	}
}

// watchedConns makes one in-process connection and closes it if the
// attempt expires first: nats.go, giving up on a deadlocked handshake,
// flushes to the pipe once more, which would block until the server
// gives up too (its write deadline, 10 s).
type watchedConns struct {
	p       nats.InProcessConnProvider
	mu      sync.Mutex
	conn    net.Conn
	expired bool
}

func (w *watchedConns) InProcessConn() (net.Conn, error) {
	c, err := w.p.InProcessConn()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil && w.expired {
		c.Close()
	}
	w.conn = c
	return c, err
}

func (w *watchedConns) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expired = true
	if w.conn != nil {
		w.conn.Close()
	}
}

// clientPermissions lets submitters queue jobs for one store, receive
// outcomes and replies, ask the status service and cancel queued jobs
// (the writer answers that request): nothing that could
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
			queue.JobsSubject(storeID), queue.HighJobsSubject(storeID), queue.StatusSubject(storeID), queue.CancelSubject(storeID),
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

// Conn is the daemon's in-process connection for the first store it
// serves (the only one, of a server of Start), with full permissions in
// the store's account.
func (s *Server) Conn() *nats.Conn { return s.stores[0].conn }

// Discovery is what the server publishes in the discovery file of the
// first store it serves (the only one, of a server of Start).
func (s *Server) Discovery() queue.Discovery {
	s.optsMu.Lock()
	defer s.optsMu.Unlock()
	return s.stores[0].discovery
}

// StoreConn is the daemon's in-process connection for the store whose ID
// is storeID, nil if the server does not serve it.
func (s *Server) StoreConn(storeID string) *nats.Conn {
	if st := s.byID[storeID]; st != nil {
		return st.conn
	}
	return nil
}

// StoreDiscovery is what the server publishes in the discovery file of
// the store whose ID is storeID; false if it does not serve it.
func (s *Server) StoreDiscovery(storeID string) (queue.Discovery, bool) {
	st := s.byID[storeID]
	if st == nil {
		return queue.Discovery{}, false
	}
	s.optsMu.Lock()
	defer s.optsMu.Unlock()
	return st.discovery, true
}

// Close shuts the server down and waits for it: the connections are
// drained and JetStream flushed to disk. It neither withdraws the
// discovery nor releases the daemon locks: their owner does, after
// Close (withdrawing first, so that clients stop coming).
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		for _, st := range s.stores {
			st.conn.Close()
		}
		if s.ns != nil {
			s.ns.Shutdown()
			s.ns.WaitForShutdown()
		}
	})
	return nil
}

// waitReady waits until ns takes connections, for at most limit. A fatal
// error it reports meanwhile (a port already in use) ends the wait at
// once: the server would never be ready.
func waitReady(ns *server.Server, fatal <-chan string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-fatal:
			return fmt.Errorf("start nats: %s", msg)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("start nats: not ready after %s", limit)
		}
	}
	return nil
}
