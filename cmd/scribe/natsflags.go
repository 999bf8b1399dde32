package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"strings"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// natsFlags are the flags that reach a store's queue on a NATS server or
// cluster that scribe did not start for the store (docs/cli.md#remote-stores):
// the connection (registerConn; serve takes these too) and, for the
// client commands, the store's ID (registerStoreID), for a host that does
// not have the store's folder. Each defaults to its environment variable
// (queue.RemoteFromEnv, $SCRIBE_STORE_ID).
type natsFlags struct {
	queue.Remote
	storeID string

	fs *flag.FlagSet
	// byFlag are the ways to authenticate given on the command line
	// ("creds", "user", "token", "nkey"): one of them drops the others
	// that only the environment gave.
	byFlag map[string]bool
}

// register adds the connection flags and --store-id to fs.
func (f *natsFlags) register(fs *flag.FlagSet) {
	f.registerConn(fs)
	f.registerStoreID(fs)
}

// registerConn adds the connection flags to fs: --nats-url, --creds,
// --user, --password, --token, --nkey, --tls-ca, --tls-cert, --tls-key
// and --tls-first. A way to authenticate given on the command line replaces
// another one set in the environment (a --creds beats $SCRIBE_NATS_TOKEN),
// rather than contradicting it.
func (f *natsFlags) registerConn(fs *flag.FlagSet) {
	f.fs = fs
	f.Remote = queue.RemoteFromEnv()
	for _, c := range []struct {
		name string
		p    *string
		auth string // the way to authenticate it belongs to, if any
		// secret values are never shown as defaults in the help.
		secret bool
		usage  string
	}{
		{"nats-url", &f.URL, "", false, "the store's queue is on the NATS server or cluster at `URL` (nats://host:4222, tls://…; several comma-separated), not a local daemon's (default $" + queue.EnvNATSURL + ")"},
		{"creds", &f.Creds, "creds", false, "NATS credentials `file` (a user JWT and its nkey seed) (default $" + queue.EnvNATSCreds + ")"},
		{"user", &f.User, "user", false, "NATS user `name` (default $" + queue.EnvNATSUser + ")"},
		{"password", &f.Password, "user", true, "the NATS user's `password` (default $" + queue.EnvNATSPassword + "; prefer the variable: a flag shows in ps)"},
		{"token", &f.Token, "token", true, "NATS authorization `token` (default $" + queue.EnvNATSToken + "; prefer the variable: a flag shows in ps)"},
		{"nkey", &f.NKey, "nkey", false, "`file` holding the NATS user's nkey seed (default $" + queue.EnvNATSNKey + ")"},
		{"tls-ca", &f.CA, "", false, "PEM `file` of the certificate authorities to trust for the NATS server, instead of the system's (default $" + queue.EnvNATSCA + ")"},
		{"tls-cert", &f.Cert, "", false, "client certificate `file` for a NATS server that verifies clients, with --tls-key (default $" + queue.EnvNATSCert + ")"},
		{"tls-key", &f.Key, "", false, "the client certificate's key `file` (default $" + queue.EnvNATSKey + ")"},
	} {
		fs.Var(&connFlag{f: f, p: c.p, auth: c.auth, secret: c.secret}, c.name, c.usage)
	}
	fs.BoolVar(&f.TLSFirst, "tls-first", f.TLSFirst, "begin with TLS, before the NATS server's INFO, for a server set to handshake_first (default $"+queue.EnvNATSTLSFirst+")")
}

// registerStoreID adds --store-id to fs.
func (f *natsFlags) registerStoreID(fs *flag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.storeID, "store-id", os.Getenv(queue.EnvStoreID),
		"with --nats-url: the store's `ID` (16 hex digits: scribe status --store DIR shows it), for a host without the store's folder; instead of --store (default $"+queue.EnvStoreID+")")
}

// remote is the queue.Remote the flags describe, and false when they name
// no URL: the store's queue is then a local daemon's.
func (f *natsFlags) remote() (queue.Remote, bool) {
	if strings.TrimSpace(f.URL) == "" {
		return queue.Remote{}, false
	}
	return f.Remote, true
}

// auth notes that the way to authenticate way was given on the command
// line, and drops the other ways that only the environment gave.
func (f *natsFlags) auth(way string) {
	if f.byFlag == nil {
		f.byFlag = map[string]bool{}
	}
	f.byFlag[way] = true
	for _, w := range []struct {
		way string
		p   []*string
	}{{"creds", []*string{&f.Creds}}, {"user", []*string{&f.User, &f.Password}}, {"token", []*string{&f.Token}}, {"nkey", []*string{&f.NKey}}} {
		if w.way != way && !f.byFlag[w.way] {
			for _, p := range w.p {
				*p = ""
			}
		}
	}
}

// connFlag is one connection flag.
type connFlag struct {
	f      *natsFlags
	p      *string
	auth   string
	secret bool
}

func (c *connFlag) String() string {
	if c == nil || c.p == nil || c.secret {
		return "" // the help never shows a password or a token
	}
	return *c.p
}

// Get is the flag's text (flag.Getter), as String shows it: a string.
func (c *connFlag) Get() any { return c.String() }

func (c *connFlag) Set(s string) error {
	if c.auth != "" {
		c.f.auth(c.auth)
	}
	*c.p = s
	return nil
}

// given reports whether the flag name was set on fs's command line.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// target is the store a client command (submit, status, wait, jobs)
// names, and how it reaches its queue.
type target struct {
	// store is the store's folder, "" for a store known by ID only.
	store string
	// id is the store's ID, with a remote queue.
	id string
	// remote is the store's remote queue, nil for a local daemon's.
	remote *queue.Remote
	// urlGiven says --nats-url was on the command line (ref repeats it).
	urlGiven bool
}

// resolve settles the store a client command names: --store (store, its
// flag's value), or with a remote queue --store-id. Without --nats-url
// (or $SCRIBE_NATS_URL) nothing changes: --store is required and must
// exist, and --store-id is a usage error. With it, a store named on the
// command line beats one the environment names ($SCRIBE_STORE,
// $SCRIBE_STORE_ID); --store and --store-id both given must agree.
// Settings that contradict each other are usage errors.
func (f *natsFlags) resolve(store string) (target, error) {
	r, ok := f.remote()
	idGiven, storeGiven := given(f.fs, "store-id"), given(f.fs, "store")
	if !ok {
		if idGiven {
			return target{}, usageError("--store-id names a store whose queue is on a NATS server: give --nats-url too (or set $%s), or --store", queue.EnvNATSURL)
		}
		return target{store: store}, requireStore(store)
	}
	if err := r.Check(); err != nil {
		return target{}, usageError("%v", err)
	}
	t := target{store: store, id: f.storeID, remote: &r, urlGiven: given(f.fs, "nats-url")}
	switch {
	case idGiven && !storeGiven:
		t.store = ""
	case storeGiven && !idGiven:
		t.id = ""
	}
	if t.store == "" && t.id == "" {
		return target{}, usageError("with --nats-url, --store-id or --store is required (or set $%s or $SCRIBE_STORE)", queue.EnvStoreID)
	}
	if t.id != "" {
		if _, ok := queue.StreamStoreID(queue.StreamName(t.id)); !ok {
			return target{}, usageError("--store-id %q: want the 16 lower-case hex digits of a store ID (scribe status --store DIR shows it)", t.id)
		}
	}
	if t.store == "" {
		return t, nil
	}
	if err := requireStore(t.store); err != nil {
		return target{}, err
	}
	real, err := queue.ResolveStore(t.store)
	if err != nil {
		return target{}, err
	}
	if id := queue.StoreID(real); t.id != "" && t.id != id {
		return target{}, usageError("--store %s is the store %s, not --store-id %s", t.store, id, t.id)
	}
	t.id = queue.StoreID(real)
	return t, nil
}

// open opens the client for t: OpenRemote by ID when the store is known
// by ID only, Open with WithRemote when its folder is here too, else Open.
// A remote queue that cannot be reached is exit 69, as no daemon is;
// settings that cannot work (a file missing) are a usage error.
func (t target) open(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	var cl *client.Client
	var err error
	switch {
	case t.remote == nil:
		return client.Open(ctx, t.store, opts...)
	case t.store != "":
		cl, err = client.Open(ctx, t.store, append(opts, client.WithRemote(*t.remote))...)
	default:
		cl, err = client.OpenRemote(ctx, t.id, *t.remote, opts...)
	}
	switch {
	case errors.Is(err, client.ErrUnreachable):
		return nil, &exitError{code: exitNoDaemon, err: err}
	case errors.Is(err, client.ErrRemoteConfig):
		return nil, &exitError{code: exitUsage, err: err}
	}
	return cl, err
}

// ref is how a command line names t's store, for the commands the
// messages suggest: --store DIR, or --store-id ID (and --nats-url URL
// when it was given as a flag; credentials never).
func (t target) ref() string {
	s := "--store " + shellQuote(t.store)
	if t.store == "" {
		s = "--store-id " + t.id
	}
	if t.remote != nil && t.urlGiven {
		s = "--nats-url " + shellQuote(t.remote.URL) + " " + s
	}
	return s
}

// remoteUsage is a client command's help on a remote queue.
const remoteUsage = "With --nats-url (or $" + queue.EnvNATSURL + ") the store's queue is on that NATS server or\n" +
	"cluster, its daemon wherever it runs: --store-id ID names the store on a host without its folder\n" +
	"(docs/cli.md#remote-stores)."

// checkRemoteRoute refuses what a remote queue cannot do: a direct write
// (route; submit drops a URL only the environment gave for one, as a
// `scribe lock` child's) and --autostart (given on the command line;
// $SCRIBE_AUTOSTART and the store's config are ignored there).
func (t target) checkRemoteRoute(fs *flag.FlagSet, r client.Route, autostart bool) error {
	if t.remote == nil {
		return nil
	}
	if r == client.RouteDirect {
		return usageError("--route direct writes the store's folder here, without the queue on the NATS server of --nats-url: give one or the other")
	}
	if autostart && given(fs, "autostart") {
		return usageError("--autostart starts a local daemon; with --nats-url the store's daemon runs wherever its operator runs it")
	}
	return nil
}
