package queue

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
)

// Discovery is the content of <store>/.scribe/daemon.json, written by a
// daemon (mode 0600) once it serves the store. Clients trust it only while
// the daemon lock (Layout.DaemonLock) is held, and talk only to a server that
// proves it holds the key of TLSCert (see TLSConfig).
type Discovery struct {
	// URL is the daemon's listener, tls://127.0.0.1:PORT by default.
	URL string `json:"url"`
	// User and Password are the submitters' credentials, new on every
	// start. They are sent only over TLS, once the server has proved it is
	// this daemon.
	User     string `json:"user"`
	Password string `json:"password"`
	PID      int    `json:"pid"`
	Version  string `json:"version"`
	Store    string `json:"store"`
	StoreID  string `json:"store_id"`
	// TLSCert is the PEM of the daemon's self-signed certificate, made on
	// every start; its key never leaves the daemon's memory. Other NATS
	// clients use it as their only CA (docs/protocol.md).
	TLSCert string `json:"tls_cert"`
	// TLSCertSHA256 is the lower-case hex SHA-256 of the certificate's DER
	// (CertFingerprint): the one certificate a client accepts.
	TLSCertSHA256 string    `json:"tls_cert_sha256"`
	Started       time.Time `json:"started"`
	// LockFile is the store lock file the daemon takes (absolute; its
	// folder's symlinks resolved): <store>/.scribe/lock, or its
	// --lock-file. Direct writers given no lock file take this one, so
	// that they exclude the daemon (discovery.LockFile). Empty in the files
	// of daemons older than this field.
	LockFile string `json:"lock_file,omitempty"`
	// IdleReleaseMS is the daemon's idle-release period in milliseconds:
	// how long it keeps the store lock after its last batch. For busy
	// messages only; 0 when unknown.
	IdleReleaseMS int64 `json:"idle_release_ms,omitempty"`
	// MaxJobBytes is the largest encoded job the daemon takes; 0 (older
	// daemons) means MaxJobBytes.
	MaxJobBytes int `json:"max_job_bytes,omitempty"`
	// Queue is QueueNATS when the store's queue is on a NATS server or
	// cluster that other daemons reach too (serve --nats-url or
	// --nats-config): URL is that server's, and the file holds no
	// credentials or certificate: clients bring the operator's
	// (SCRIBE_NATS_*, docs/cluster.md). Empty for the daemon's own
	// embedded server.
	Queue string `json:"queue,omitempty"`
}

// QueueNATS is Discovery.Queue for a queue on a NATS server or cluster.
const QueueNATS = "nats"

// ErrUnverified means a server did not prove that it is the daemon a
// discovery file names: no TLS, another certificate, or a discovery file
// without a usable certificate. Nothing was sent to it.
var ErrUnverified = errors.New("the server did not prove it is the store's daemon")

// CertFingerprint is the Discovery.TLSCertSHA256 form of a certificate:
// the lower-case hex SHA-256 of its DER.
func CertFingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// TLSConfig is the client side of the daemon's TLS: the discovery file's
// certificate is the only root, and the server must present exactly that
// certificate (its fingerprint is checked again once the chain is
// verified), so that credentials and jobs go only to the process that
// holds its key. An error matches ErrUnverified.
func (d *Discovery) TLSConfig() (*tls.Config, error) {
	block, rest := pem.Decode([]byte(d.TLSCert))
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: the discovery file has no tls_cert (a daemon older than TLS, or not a daemon's file)", ErrUnverified)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("%w: the discovery file's tls_cert holds more than one certificate", ErrUnverified)
	}
	want := d.TLSCertSHA256
	if got := CertFingerprint(block.Bytes); got != want {
		return nil, fmt.Errorf("%w: the discovery file's tls_cert has fingerprint %s, but tls_cert_sha256 says %q", ErrUnverified, got, want)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: the discovery file's tls_cert: %v", ErrUnverified, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return &tls.Config{
		RootCAs:          roots,
		MinVersion:       tls.VersionTLS12,
		CurvePreferences: d.curves(),
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("%w: it presented no certificate", ErrUnverified)
			}
			if got := CertFingerprint(cs.PeerCertificates[0].Raw); got != want {
				return fmt.Errorf("%w: it presented certificate %s, the discovery file names %s", ErrUnverified, got, want)
			}
			return nil
		},
	}, nil
}

// curves are the key exchanges a client offers the daemon: X25519 alone
// when its URL is on a loopback address, Go's defaults (X25519MLKEM768
// first) otherwise. The post-quantum hybrid keeps recorded traffic secret
// from a later quantum computer, and only root can record loopback
// traffic, who can read the discovery file anyway; its key share costs a
// hook 6% of its CPU.
func (d *Discovery) curves() []tls.CurveID {
	u, err := url.Parse(d.URL)
	if err != nil {
		return nil
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsLoopback() {
		return []tls.CurveID{tls.X25519}
	}
	return nil
}

// Pinned is the nats.go option of a connection to the daemon d names:
// TLS before the first protocol line (nats.TLSHandshakeFirst), with
// TLSConfig's pinning. The client's first bytes are a TLS ClientHello and
// it reads nothing the server says until the server has proved it holds
// the certificate's key, so a server that is not the daemon (one that
// speaks plain NATS, or TLS with another certificate) gets no CONNECT, no
// credential and no job. The daemon's listener takes TLS-first clients
// only. An error matches ErrUnverified.
func (d *Discovery) Pinned() (nats.Option, error) {
	tc, err := d.TLSConfig()
	if err != nil {
		return nil, err
	}
	return func(o *nats.Options) error {
		if err := nats.Secure(tc)(o); err != nil {
			return err
		}
		return nats.TLSHandshakeFirst()(o)
	}, nil
}

// ReadDiscovery reads the discovery file of a store (its canonical path).
// It does not check that the daemon is alive: only a held daemon lock
// says that (the daemon package's Find asks both).
//
// The file, and .scribe, must pass the rules of .scribe (OpenPrivate):
// else the error is an *InsecureError, and nothing in it is believed.
func ReadDiscovery(store string) (*Discovery, error) {
	l := Layout{Root: store}
	if err := l.Check(); err != nil {
		return nil, err
	}
	return l.ReadDiscovery()
}

// ReadDiscovery is ReadDiscovery(l.Root) for a caller that has just
// checked the layout (Check): the file itself is held to the rules of
// .scribe again as it is opened (ReadPrivate).
func (l Layout) ReadDiscovery() (*Discovery, error) {
	path := l.Discovery()
	b, err := ReadPrivate(path, maxMetaFile)
	if err != nil {
		return nil, err
	}
	d, ok := decodeDiscovery(b)
	if !ok {
		d = new(Discovery)
		if err := json.Unmarshal(b, d); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
	return d, nil
}

// DefaultIdleRelease is how long a daemon keeps the store lock after its
// last batch unless configured otherwise (Discovery.IdleReleaseMS says
// what it was configured to): what a direct writer meets right after a
// daemon write.
const DefaultIdleRelease = 500 * time.Millisecond
