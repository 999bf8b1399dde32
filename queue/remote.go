package queue

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Remote says how to reach a store's queue on a NATS server or cluster
// that scribe did not start for the store: an operator's (serve
// --nats-url) or a node of an embedded cluster (serve --nats-config). The
// credentials are the operator's: a creds file, a user and password, a
// token or an nkey seed, at most one of them. TLS is used when the URL
// says tls://, or when CA, a client certificate or TLSFirst is given.
type Remote struct {
	// URL is one server URL or several, comma-separated (nats.go's form):
	// nats://host:4222, tls://host:4222.
	URL string
	// Creds is a NATS credentials file (a user JWT and its nkey seed).
	Creds string
	// User and Password are a user's name and password.
	User     string
	Password string
	// Token is an authorization token.
	Token string
	// NKey is a file holding a user's nkey seed.
	NKey string
	// CA is a PEM file of the certificate authorities to trust instead of
	// the system's.
	CA string
	// Cert and Key are a client certificate and its key, for servers that
	// verify clients.
	Cert string
	Key  string
	// TLSFirst begins the connection with TLS, before the server's INFO
	// (nats.TLSHandshakeFirst), for servers set to handshake_first; it
	// implies TLS. Nothing the server says in clear is then read, and a
	// server that cannot complete the handshake gets nothing but a
	// ClientHello.
	TLSFirst bool

	// badTLSFirst is $SCRIBE_NATS_TLS_FIRST when it is not a boolean
	// (RemoteFromEnv), for Check to report.
	badTLSFirst string
}

// Environment variables that set a Remote (RemoteFromEnv); command-line
// flags override them.
const (
	EnvNATSURL      = "SCRIBE_NATS_URL"
	EnvNATSCreds    = "SCRIBE_NATS_CREDS"
	EnvNATSUser     = "SCRIBE_NATS_USER"
	EnvNATSPassword = "SCRIBE_NATS_PASSWORD"
	EnvNATSToken    = "SCRIBE_NATS_TOKEN"
	EnvNATSNKey     = "SCRIBE_NATS_NKEY"
	EnvNATSCA       = "SCRIBE_NATS_CA"
	EnvNATSCert     = "SCRIBE_NATS_CERT"
	EnvNATSKey      = "SCRIBE_NATS_KEY"
	EnvNATSTLSFirst = "SCRIBE_NATS_TLS_FIRST" // true or false (strconv.ParseBool)
	// EnvStoreID names a store by ID, for a client on a host that does
	// not have the store's folder.
	EnvStoreID = "SCRIBE_STORE_ID"
)

// RemoteFromEnv is the Remote the SCRIBE_NATS_* variables describe.
func RemoteFromEnv() Remote {
	r := Remote{
		URL: os.Getenv(EnvNATSURL), Creds: os.Getenv(EnvNATSCreds),
		User: os.Getenv(EnvNATSUser), Password: os.Getenv(EnvNATSPassword),
		Token: os.Getenv(EnvNATSToken), NKey: os.Getenv(EnvNATSNKey),
		CA: os.Getenv(EnvNATSCA), Cert: os.Getenv(EnvNATSCert), Key: os.Getenv(EnvNATSKey),
	}
	if v := os.Getenv(EnvNATSTLSFirst); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			r.badTLSFirst = v
		}
		r.TLSFirst = b
	}
	return r
}

// ErrRemoteConfig is the error of a Remote that cannot be used as given.
var ErrRemoteConfig = errors.New("invalid NATS connection settings")

// Check reports settings that contradict each other: no URL, more than
// one way to authenticate, a password without a user, half a client
// certificate.
func (r Remote) Check() error {
	if strings.TrimSpace(r.URL) == "" {
		return fmt.Errorf("%w: no URL", ErrRemoteConfig)
	}
	var ways []string
	for _, w := range []struct{ name, v string }{{"creds", r.Creds}, {"user", r.User}, {"token", r.Token}, {"nkey", r.NKey}} {
		if w.v != "" {
			ways = append(ways, w.name)
		}
	}
	if len(ways) > 1 {
		return fmt.Errorf("%w: give one of creds, user/password, token and nkey, not %s", ErrRemoteConfig, strings.Join(ways, " and "))
	}
	if r.Password != "" && r.User == "" {
		return fmt.Errorf("%w: a password without a user", ErrRemoteConfig)
	}
	if (r.Cert == "") != (r.Key == "") {
		return fmt.Errorf("%w: a client certificate needs both its cert and its key", ErrRemoteConfig)
	}
	if r.badTLSFirst != "" && !r.TLSFirst {
		// Not a boolean: never taken for false, which would connect
		// without TLS first where the operator asked for it.
		return fmt.Errorf("%w: $%s=%q: want true or false", ErrRemoteConfig, EnvNATSTLSFirst, r.badTLSFirst)
	}
	return nil
}

// Options are the nats.go options that authenticate and secure a
// connection as r says (not the URL, which nats.Connect takes).
func (r Remote) Options() ([]nats.Option, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch {
	case r.Creds != "":
		opts = append(opts, nats.UserCredentials(r.Creds))
	case r.User != "":
		opts = append(opts, nats.UserInfo(r.User, r.Password))
	case r.Token != "":
		opts = append(opts, nats.Token(r.Token))
	case r.NKey != "":
		o, err := nats.NkeyOptionFromSeed(r.NKey)
		if err != nil {
			return nil, fmt.Errorf("%w: nkey %s: %v", ErrRemoteConfig, r.NKey, err)
		}
		opts = append(opts, o)
	}
	if r.CA != "" {
		opts = append(opts, nats.RootCAs(r.CA))
	}
	if r.Cert != "" {
		opts = append(opts, nats.ClientCert(r.Cert, r.Key))
	}
	if r.TLSFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	return opts, nil
}

// Connect connects to r with its options and then opts (a name, handlers),
// reconnecting to the cluster's other servers when one goes: on an
// operator's cluster, whoever answers at the URLs is trusted through TLS
// and the credentials, not through a discovery file.
func (r Remote) Connect(opts ...nats.Option) (*nats.Conn, error) {
	auth, err := r.Options()
	if err != nil {
		return nil, err
	}
	base := []nats.Option{nats.Timeout(5 * time.Second), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	nc, err := nats.Connect(r.URL, append(append(base, auth...), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", r.URL, err)
	}
	return nc, nil
}

// ClientInboxPrefix is the inbox prefix of a submitter's connection for a
// store on a shared NATS server: replies (PubAcks, status answers) arrive
// under it, so that an operator can let each store's submitters read their
// store's replies only (docs/cluster.md#permissions).
func ClientInboxPrefix(storeID string) string { return "_INBOX_" + storeID }

// DaemonInboxPrefix is the inbox prefix of a daemon's connection on a
// shared NATS server: its pull consumers' deliveries arrive under it,
// which no submitter may read.
const DaemonInboxPrefix = "_SCRIBE_DAEMON"
