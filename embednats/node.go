package embednats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/scribehq/scribe/queue"
)

// NodeConfig configures StartNode.
type NodeConfig struct {
	// ConfigFile is a nats-server configuration file, in nats-server's
	// own documented format (server.ProcessConfigFile): listen,
	// server_name, cluster {name, listen, routes}, accounts,
	// authorization, tls, jetstream {store_dir}. JetStream must be
	// enabled in it; a cluster block needs a name, and then server_name
	// must be set too (JetStream clustering requires both).
	ConfigFile string
	// StoreDir overrides the config's jetstream store_dir when non-empty.
	StoreDir string
	// MaxJobBytes is the largest encoded job the node must carry when the
	// config sets no max_payload: the node's max payload then follows
	// from it as Start's does (0 means queue.MaxJobBytes). A config that
	// sets max_payload keeps it.
	MaxJobBytes int
	// Logger receives the server's notices and errors; nil discards them.
	Logger *slog.Logger
}

// Node is a running nats-server configured from a nats-server
// configuration file (StartNode): one node of a JetStream cluster, or a
// standalone JetStream server when the config has no cluster block.
// Unlike Server it makes no credentials, certificate or discovery of its
// own: those are the operator's, in the config file.
type Node struct {
	ns   *server.Server
	file string
	// host and tls are the client listener's, as configured.
	host      string
	tls       bool
	log       *slog.Logger
	closeOnce sync.Once
}

// readyTimeout is how long StartNode waits for the node to accept
// client connections.
const readyTimeout = 10 * time.Second

// StartNode starts a nats-server from the configuration file cfg names
// and waits until it accepts client connections. It does not wait for
// the cluster's JetStream meta leader, which needs a quorum of the
// cluster's nodes (the others may not be up yet): WaitJetStream does.
// It refuses a config without JetStream, a cluster block without a name
// or without server_name, and a config that leaves JetStream's store
// directory unset (nats-server would pick a temporary one, and lose the
// queue at reboot).
func StartNode(ctx context.Context, cfg NodeConfig) (_ *Node, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cfg.ConfigFile == "" {
		return nil, errors.New("start nats node: no config file")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	opts, err := nodeOptions(cfg)
	if err != nil {
		return nil, err
	}
	if smallPayload(cfg, opts) {
		logger.Warn("the config's max_payload is smaller than the largest job with its headers: such jobs will be refused",
			"max_payload", opts.MaxPayload, "max_job_bytes", queue.Limits{MaxJobBytes: cfg.MaxJobBytes}.JobBytes(), "config", cfg.ConfigFile)
	}
	n := &Node{file: cfg.ConfigFile, host: opts.Host, tls: opts.TLSConfig != nil, log: logger}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.ns, err = server.NewServer(opts); err != nil {
		return nil, fmt.Errorf("start nats node from %s: %w", cfg.ConfigFile, err)
	}
	nl := &nodeLogger{slogAdapter: &slogAdapter{l: logger}, fatal: make(chan string, 1)}
	n.ns.SetLoggerV2(nl, opts.Debug, false, false)
	n.ns.Start()
	deadline := time.Now().Add(readyTimeout)
	for !n.ns.ReadyForConnections(100 * time.Millisecond) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("start nats node from %s: %w", cfg.ConfigFile, err)
		}
		select {
		case msg := <-nl.fatal:
			// A listener that cannot bind, above all: the plain
			// nats-server would exit.
			return nil, fmt.Errorf("start nats node from %s: %s", cfg.ConfigFile, msg)
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("start nats node from %s: not ready after %s", cfg.ConfigFile, readyTimeout)
		}
	}
	logger.Info("nats node started", "name", n.Name(), "url", n.ClientURL(), "cluster", opts.Cluster.Name,
		"routes", len(opts.Routes), "store_dir", opts.StoreDir, "config", cfg.ConfigFile)
	return n, nil
}

// nodeLogger is the node's slogAdapter, which also passes on the first
// fatal error the server logs (the plain nats-server exits on one): StartNode
// then fails at once instead of waiting for a listener that will never
// come.
type nodeLogger struct {
	*slogAdapter
	fatal chan string
}

func (l *nodeLogger) Fatalf(format string, v ...any) {
	l.slogAdapter.Fatalf(format, v...)
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}

// nodeOptions reads and checks the server options of cfg's config file,
// with cfg's overrides applied.
func nodeOptions(cfg NodeConfig) (*server.Options, error) {
	opts, err := server.ProcessConfigFile(cfg.ConfigFile)
	if err != nil {
		return nil, fmt.Errorf("nats config %s: %w", cfg.ConfigFile, err)
	}
	if cfg.StoreDir != "" {
		opts.StoreDir = cfg.StoreDir
	}
	if !opts.JetStream {
		return nil, fmt.Errorf("nats config %s: JetStream is not enabled (add a jetstream {store_dir: ...} block)", cfg.ConfigFile)
	}
	clustered := opts.Cluster.Port != 0 || opts.Cluster.Host != "" || len(opts.Routes) > 0
	if clustered && opts.Cluster.Name == "" {
		return nil, fmt.Errorf("nats config %s: the cluster block has no name (JetStream clustering needs cluster {name: ...})", cfg.ConfigFile)
	}
	if clustered && opts.ServerName == "" {
		return nil, fmt.Errorf("nats config %s: no server_name (JetStream clustering needs a unique server_name per node)", cfg.ConfigFile)
	}
	if opts.StoreDir == "" {
		return nil, fmt.Errorf("nats config %s: no JetStream store directory (set jetstream {store_dir: ...}, or give one)", cfg.ConfigFile)
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = int32(queue.Limits{MaxJobBytes: cfg.MaxJobBytes}.JobBytes() + 64*1024)
	}
	if !opts.SyncAlways && opts.SyncInterval == 0 {
		// As the embedded server: a stored job is on disk before its
		// PubAck, not up to nats-server's default two minutes later. A
		// config's jetstream {sync_interval: ...} chooses otherwise.
		opts.SyncAlways = true
	}
	// The process's signals are the daemon's, not the server's.
	opts.NoSigs = true
	return opts, nil
}

// smallPayload says whether the node's max payload cannot carry the
// largest job of cfg (with its headers).
func smallPayload(cfg NodeConfig, opts *server.Options) bool {
	return int(opts.MaxPayload) < queue.Limits{MaxJobBytes: cfg.MaxJobBytes}.JobBytes()+4096
}

// ClientURL is the URL clients on this host reach the node at:
// tls://... when the config has TLS, else nats://..., with the port the
// listener got and 127.0.0.1 for a listener on every address.
func (n *Node) ClientURL() string {
	scheme := "nats"
	if n.tls {
		scheme = "tls"
	}
	host, port := n.host, 0
	if addr, ok := n.ns.Addr().(*net.TCPAddr); ok {
		port = addr.Port
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}
	return u.String()
}

// Name is the node's server name (server_name; the server's ID when the
// config sets none).
func (n *Node) Name() string { return n.ns.Name() }

// WaitJetStream waits until the node's JetStream can serve API requests:
// in a cluster, until the node knows the meta leader and is current with
// it, which needs a quorum of the cluster's nodes to be up. It returns
// ctx's error, with the last reason the node was not ready, if ctx ends
// first.
func (n *Node) WaitJetStream(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		h := n.ns.Healthz(&server.HealthzOptions{JSMetaOnly: true})
		if h.Error == "" && len(h.Errors) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nats node %s: JetStream not ready (%s): %w", n.Name(), h.Error, ctx.Err())
		case <-tick.C:
		}
	}
}

// Close shuts the node down and waits for it; JetStream is flushed to
// disk. Closing again does nothing.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		if n.ns != nil {
			n.ns.Shutdown()
			n.ns.WaitForShutdown()
			n.log.Info("nats node stopped", "config", n.file)
		}
	})
	return nil
}
