package cli

import (
	"context"
	"errors"
	"flag"
	"os"
	"strings"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// Remote is the flags that reach a store's queue on a NATS server or
// cluster that scribe did not start for the store
// (docs/cli.md#remote-stores): the connection (serve takes these too) and,
// for the client commands, the store's ID, for a host that does not have
// the store's folder. Each defaults to its environment variable
// (queue.RemoteFromEnv, $SCRIBE_STORE_ID).
type Remote struct {
	queue.Remote
	StoreID string

	fs *FlagSet
	// q is the connection the flags set: the embedded Remote's, or
	// another (RemoteConnGo).
	q *queue.Remote
	// byFlag are the ways to authenticate given on the command line
	// ("creds", "user", "token", "nkey"): one of them drops the others
	// that only the environment gave.
	byFlag map[string]bool
}

// connFlag is one connection flag's value.
type connFlag struct {
	r    *Remote
	p    *string
	auth string // the way to authenticate it belongs to, if any
	// secret values are never shown as defaults in the help.
	secret bool
}

func (c *connFlag) String() string {
	if c == nil || c.p == nil || c.secret {
		return "" // the help never shows a password or a token
	}
	return *c.p
}

func (c *connFlag) Type() string { return "string" }

func (c *connFlag) Set(s string) error {
	if c.auth != "" {
		c.r.auth(c.auth)
	}
	*c.p = s
	return nil
}

// connSpec is the definition of a connection flag.
type connSpec struct {
	name  string
	value *connFlag
	usage string
	file  bool // its value is a file
}

// conn defines the connection flags of r, once for both parsers: --nats-url,
// --creds, --user, --password, --token, --nkey, --tls-ca, --tls-cert,
// --tls-key. A way to authenticate given on the command line replaces
// another one set in the environment (a --creds beats $SCRIBE_NATS_TOKEN),
// rather than contradicting it. --tls-first is the one boolean.
func (r *Remote) conn() []connSpec {
	*r.q = queue.RemoteFromEnv()
	q := r.q
	v := func(p *string, auth string, secret bool) *connFlag {
		return &connFlag{r: r, p: p, auth: auth, secret: secret}
	}
	return []connSpec{
		{"nats-url", v(&q.URL, "", false), "the store's queue is on the NATS server or cluster at `URL` (nats://host:4222, tls://…; several comma-separated), not a local daemon's (default $" + queue.EnvNATSURL + ")", false},
		{"creds", v(&q.Creds, "creds", false), "NATS credentials `FILE` (a user JWT and its nkey seed) (default $" + queue.EnvNATSCreds + ")", true},
		{"user", v(&q.User, "user", false), "NATS user `NAME` (default $" + queue.EnvNATSUser + ")", false},
		{"password", v(&q.Password, "user", true), "the NATS user's `PASSWORD` (default $" + queue.EnvNATSPassword + "; prefer the variable: a flag shows in ps)", false},
		{"token", v(&q.Token, "token", true), "NATS authorization `TOKEN` (default $" + queue.EnvNATSToken + "; prefer the variable: a flag shows in ps)", false},
		{"nkey", v(&q.NKey, "nkey", false), "`FILE` holding the NATS user's nkey seed (default $" + queue.EnvNATSNKey + ")", true},
		{"tls-ca", v(&q.CA, "", false), "PEM `FILE` of the certificate authorities to trust for the NATS server, instead of the system's (default $" + queue.EnvNATSCA + ")", true},
		{"tls-cert", v(&q.Cert, "", false), "client certificate `FILE` for a NATS server that verifies clients, with --tls-key (default $" + queue.EnvNATSCert + ")", true},
		{"tls-key", v(&q.Key, "", false), "the client certificate's key `FILE` (default $" + queue.EnvNATSKey + ")", true},
	}
}

// tlsFirstUsage is --tls-first's help.
const tlsFirstUsage = "begin with TLS, before the NATS server's INFO, for a server set to handshake_first (default $" + queue.EnvNATSTLSFirst + ")"

// Remote adds the connection flags and --store-id.
func (fs *FlagSet) Remote() *Remote {
	r := fs.RemoteConn()
	fs.StringVar(&r.StoreID, "store-id", os.Getenv(queue.EnvStoreID),
		"with --nats-url: the store's `ID` (16 hex digits: scribe status --store DIR shows it), for a host without the store's folder; instead of --store (default $"+queue.EnvStoreID+")")
	return r
}

// RemoteConn adds the connection flags alone, as serve takes them.
func (fs *FlagSet) RemoteConn() *Remote {
	r := &Remote{fs: fs}
	r.q = &r.Remote
	for _, c := range r.conn() {
		fs.Var(c.value, c.name, c.usage)
		if c.file {
			fs.complete(c.name, completeFile)
		}
	}
	fs.BoolVar(&r.TLSFirst, "tls-first", r.TLSFirst, tlsFirstUsage)
	return r
}

// RemoteConnGo adds the connection flags to a flag set of the standard
// flag package, setting q: for a command not yet on this package's
// flags (serve).
func RemoteConnGo(gfs *flag.FlagSet, q *queue.Remote) {
	r := &Remote{q: q}
	for _, c := range r.conn() {
		if c.name == "nats-url" { // a client's environment never names a daemon's queue
			c.usage = "queue on the NATS server or cluster at `URL` (nats://host:4222, tls://…; several comma-separated) instead of an embedded one (not from $" + queue.EnvNATSURL + ", a client's setting: only this flag or nats_url names a daemon's queue)"
		}
		gfs.Var(c.value, c.name, c.usage)
	}
	gfs.BoolVar(&q.TLSFirst, "tls-first", q.TLSFirst, tlsFirstUsage)
}

// Get is a connection flag's text (flag.Getter), as String shows it.
func (c *connFlag) Get() any { return c.String() }

// remote is the queue.Remote the flags describe, and false when they name
// no URL: the store's queue is then a local daemon's.
func (r *Remote) remote() (queue.Remote, bool) {
	if strings.TrimSpace(r.URL) == "" {
		return queue.Remote{}, false
	}
	return r.Remote, true
}

// auth notes that the way to authenticate way was given on the command
// line, and drops the other ways that only the environment gave.
func (r *Remote) auth(way string) {
	if r.byFlag == nil {
		r.byFlag = map[string]bool{}
	}
	r.byFlag[way] = true
	for _, w := range []struct {
		way string
		p   []*string
	}{{"creds", []*string{&r.q.Creds}}, {"user", []*string{&r.q.User, &r.q.Password}}, {"token", []*string{&r.q.Token}}, {"nkey", []*string{&r.q.NKey}}} {
		if w.way != way && !r.byFlag[w.way] {
			for _, p := range w.p {
				*p = ""
			}
		}
	}
}

// Target is the store a client command (submit, status, wait, jobs)
// names, and how it reaches its queue.
type Target struct {
	// Store is the store's folder, "" for a store known by ID only.
	Store string
	// ID is the store's ID, with a remote queue.
	ID string
	// Remote is the store's remote queue, nil for a local daemon's.
	Remote *queue.Remote
	// urlGiven says --nats-url was on the command line (Ref repeats it).
	urlGiven bool
}

// Resolve settles the store a client command names: --store (store, its
// flag's value), or with a remote queue --store-id. Without --nats-url
// (or $SCRIBE_NATS_URL) nothing changes: --store is required and must
// exist, and --store-id is a usage error. With it, a store named on the
// command line beats one the environment names ($SCRIBE_STORE,
// $SCRIBE_STORE_ID); --store and --store-id both given must agree.
// Settings that contradict each other are usage errors.
func (r *Remote) Resolve(store string) (Target, error) {
	rq, ok := r.remote()
	idGiven, storeGiven := r.fs.Changed("store-id"), r.fs.Changed("store")
	if !ok {
		if idGiven {
			return Target{}, Usagef("--store-id names a store whose queue is on a NATS server: give --nats-url too (or set $%s), or --store", queue.EnvNATSURL)
		}
		return Target{Store: store}, RequireStore(store)
	}
	if err := rq.Check(); err != nil {
		return Target{}, Usagef("%v", err)
	}
	t := Target{Store: store, ID: r.StoreID, Remote: &rq, urlGiven: r.fs.Changed("nats-url")}
	switch {
	case idGiven && !storeGiven:
		t.Store = ""
	case storeGiven && !idGiven:
		t.ID = ""
	}
	if t.Store == "" && t.ID == "" {
		return Target{}, Usagef("with --nats-url, --store-id or --store is required (or set $%s or $SCRIBE_STORE)", queue.EnvStoreID)
	}
	if t.ID != "" {
		if _, ok := queue.StreamStoreID(queue.StreamName(t.ID)); !ok {
			return Target{}, Usagef("--store-id %q: want the 16 lower-case hex digits of a store ID (scribe status --store DIR shows it)", t.ID)
		}
	}
	if t.Store == "" {
		return t, nil
	}
	if err := RequireStore(t.Store); err != nil {
		return Target{}, err
	}
	real, err := queue.ResolveStore(t.Store)
	if err != nil {
		return Target{}, err
	}
	if id := queue.StoreID(real); t.ID != "" && t.ID != id {
		return Target{}, Usagef("--store %s is the store %s, not --store-id %s", t.Store, id, t.ID)
	}
	t.ID = queue.StoreID(real)
	return t, nil
}

// StoreID is t's store ID: the one given, or its folder's.
func (t Target) StoreID() (string, error) {
	if t.ID != "" {
		return t.ID, nil
	}
	real, err := queue.ResolveStore(t.Store)
	if err != nil {
		return "", err
	}
	return queue.StoreID(real), nil
}

// Open opens the client for t: OpenRemote by ID when the store is known
// by ID only, Open with WithRemote when its folder is here too, else Open.
// A remote queue that cannot be reached is exit 69, as no daemon is;
// settings that cannot work (a file missing) are a usage error.
func (t Target) Open(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	var cl *client.Client
	var err error
	switch {
	case t.Remote == nil:
		return client.Open(ctx, t.Store, opts...)
	case t.Store != "":
		cl, err = client.Open(ctx, t.Store, append(opts, client.WithRemote(*t.Remote))...)
	default:
		cl, err = client.OpenRemote(ctx, t.ID, *t.Remote, opts...)
	}
	switch {
	case errors.Is(err, client.ErrUnreachable):
		return nil, Exit(ExitNoDaemon, err)
	case errors.Is(err, client.ErrRemoteConfig):
		return nil, Exit(ExitUsage, err)
	}
	return cl, err
}

// Ref is how a command line names t's store, for the commands the
// messages suggest: --store DIR, or --store-id ID (and --nats-url URL
// when it was given as a flag; credentials never).
func (t Target) Ref() string {
	s := "--store " + ShellQuote(t.Store)
	if t.Store == "" {
		s = "--store-id " + t.ID
	}
	if t.Remote != nil && t.urlGiven {
		s = "--nats-url " + ShellQuote(t.Remote.URL) + " " + s
	}
	return s
}

// RemoteHelp is a client command's help on a remote queue.
const RemoteHelp = "With --nats-url (or $" + queue.EnvNATSURL + ") the store's queue is on that NATS server or\n" +
	"cluster, its daemon wherever it runs: --store-id ID names the store on a host without its folder\n" +
	"(docs/cli.md#remote-stores)."

// CheckRoute refuses what cannot go together: a remote queue and a
// direct write (route; submit drops a URL only the environment gave for
// one, as a `scribe lock` child's), and --autostart (a, given on the
// command line) with a remote queue or the direct route
// ($SCRIBE_AUTOSTART and the store's config are ignored there).
func (t Target) CheckRoute(a *Autostart, r client.Route) error {
	switch {
	case t.Remote == nil:
		return a.CheckRoute(r)
	case r == client.RouteDirect:
		return Usagef("--route direct writes the store's folder here, without the queue on the NATS server of --nats-url: give one or the other")
	case a.given():
		return Usagef("--autostart starts a local daemon; with --nats-url the store's daemon runs wherever its operator runs it")
	}
	return nil
}
