package client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scribehq/scribe/queue"
)

var (
	// ErrRemoteConfig means the settings of a remote queue (a
	// queue.Remote, or a route with it) cannot be used as given: nothing
	// was sent. It is queue.ErrRemoteConfig.
	ErrRemoteConfig = queue.ErrRemoteConfig
	// ErrStoreID means a store ID is not one: 16 lower-case hex digits
	// (queue.StoreID).
	ErrStoreID = errors.New("invalid store ID")
	// ErrUnreachable means no NATS server of a remote queue could be
	// reached (OpenRemote, WithRemote): nothing was sent.
	ErrUnreachable = errors.New("the NATS server cannot be reached")
	// ErrDenied means the NATS server refused this connection a subject
	// of the store: its user may not publish jobs or status requests
	// there, or not listen for outcomes or replies (the operator's
	// permissions, docs/cluster.md). A job refused so was not queued. It
	// is nats.ErrPermissionViolation, which nats.go's own errors match.
	ErrDenied = nats.ErrPermissionViolation
)

// OpenRemote prepares a client for the store whose ID is storeID, whose
// queue is on a NATS server or cluster that r reaches: an operator's
// (scribe serve --nats-url) or a node of an embedded cluster. The store's
// folder need not exist on this host; its daemon, wherever it runs,
// applies the jobs and answers Status, Wait, Jobs and Report. Jobs are
// always queued: there is no direct route to a store elsewhere, and
// RouteDirect is an error (ErrRemoteConfig), as is WithAutostart.
//
// Unlike a local daemon's connection, which is pinned to the certificate
// in the store's discovery file and never reconnects by itself, this one
// trusts r's TLS settings and credentials, and reconnects to the
// cluster's servers when one goes; a publish cut short meanwhile is
// retried with the same job ID. Replies come under the store's inbox
// prefix (queue.ClientInboxPrefix), so that an operator can give each
// store's submitters its subjects only.
//
// It fails with ErrStoreID for an invalid storeID, ErrRemoteConfig for
// contradictory settings (queue.Remote.Check), ErrUnreachable when no
// server answers, and nats.ErrAuthorization when the credentials are
// refused.
func OpenRemote(ctx context.Context, storeID string, r queue.Remote, opts ...Option) (*Client, error) {
	if _, ok := queue.StreamStoreID(queue.StreamName(storeID)); !ok {
		return nil, fmt.Errorf("%w %q: want 16 lower-case hex digits", ErrStoreID, storeID)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.route == RouteDirect {
		return nil, fmt.Errorf("%w: the direct route needs the store's folder; its queue is at %s", ErrRemoteConfig, r.URL)
	}
	q, err := openRemote(ctx, "", storeID, r, o)
	if err != nil {
		return nil, err
	}
	return &Client{storeID: storeID, r: q, maxJobBytes: o.maxJobBytes}, nil
}

// openRemote connects to the remote queue r for the store storeID, whose
// folder is store ("" when it is not on this host).
func openRemote(ctx context.Context, store, storeID string, r queue.Remote, o options) (*queued, error) {
	if o.autostart != nil {
		return nil, fmt.Errorf("%w: autostart starts a local daemon; the store's queue is at %s", ErrRemoteConfig, r.URL)
	}
	if err := r.Check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q := &queued{store: store, storeID: storeID, log: o.log, remote: r.URL, denied: &denials{}}
	nc, err := r.Connect(nats.Name("scribe-client"), nats.CustomInboxPrefix(queue.ClientInboxPrefix(storeID)),
		nats.SyncQueueLen(outcomeQueueLen), nats.ErrorHandler(q.remoteError), nats.PermissionErrOnSubscribe(true))
	if err != nil {
		return nil, connectError(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream at %s: %w", r.URL, err)
	}
	q.nc, q.js = nc, js
	return q, nil
}

// openDiscoveredRemote connects to the queue of a local daemon whose
// discovery file says its queue is on a NATS server or cluster (d.Queue
// is queue.QueueNATS): at d's URL, with the credentials and TLS settings
// of WithRemote if given, else of the SCRIBE_NATS_* variables
// (queue.RemoteFromEnv). The file holds none: they are the operator's.
func openDiscoveredRemote(ctx context.Context, store, storeID string, d *queue.Discovery, o options) (*queued, error) {
	r := queue.RemoteFromEnv()
	if o.remote != nil {
		r = *o.remote
	}
	r.URL = d.URL
	o.autostart = nil // a daemon serves the store
	q, err := openRemote(ctx, store, storeID, r, o)
	if err != nil {
		return nil, fmt.Errorf("the store's daemon (pid %d) queues on %s: %w", d.PID, d.URL, err)
	}
	q.d = d
	return q, nil
}

// connectError sorts out why connecting failed (err names the URL):
// settings that cannot work (a file missing) are ErrRemoteConfig, refused
// credentials are nats.go's own errors, the rest is ErrUnreachable.
func connectError(err error) error {
	switch {
	case errors.Is(err, ErrRemoteConfig):
		return err
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %w", ErrRemoteConfig, err)
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired):
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnreachable, err)
}

// remoteError is a remote connection's error handler: asyncError's
// logging, and the permission violations the calls waiting on them must
// hear of.
func (q *queued) remoteError(nc *nats.Conn, sub *nats.Subscription, err error) {
	q.denied.note(err)
	asyncError(q.log)(nc, sub, err)
}

// gone reports that a remote connection is closed for good: nats.go gave
// up reconnecting (the server refused the credentials again), or close.
// A local daemon's lost connection is closed too, but redialled.
func (q *queued) gone(nc *nats.Conn) bool { return q.remote != "" && nc.IsClosed() }

// goneErr is the error of a call on a remote connection that is gone.
func (q *queued) goneErr(nc *nats.Conn) error {
	if err := nc.LastError(); err != nil {
		return fmt.Errorf("connection to %s closed: %w", q.remote, err)
	}
	return fmt.Errorf("connection to %s: %w", q.remote, nats.ErrConnectionClosed)
}

// denials tells the calls publishing on a subject that the server refused
// it. nats.go reports a permissions violation only to the connection's
// error handler, and the refused request waits for its timeout: a denied
// publish would be retried until its ctx ends, as if its fate were
// unknown. It is not: the server dropped the message.
type denials struct {
	mu      sync.Mutex
	waiting map[*denialWatch]struct{}
}

// denialWatch is one call waiting on a subject.
type denialWatch struct {
	subject string
	cancel  context.CancelCauseFunc
}

// The server's words for a refused subject, compiled when first needed:
// at init, every hook process would pay for them.
var (
	publishDeniedRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`Publish to "(\S+)"`) })
	replyDeniedRe   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`Publish with Reply of "(\S+)"`) })
)

// watch returns ctx, ended with cause ErrDenied should the server refuse
// a publish on subject (or with this connection's reply subject) while it
// lasts, and the func that ends the watch. A nil d watches nothing.
func (d *denials) watch(ctx context.Context, subject string) (context.Context, func()) {
	if d == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	w := &denialWatch{subject: subject, cancel: cancel}
	d.mu.Lock()
	if d.waiting == nil {
		d.waiting = map[*denialWatch]struct{}{}
	}
	d.waiting[w] = struct{}{}
	d.mu.Unlock()
	return ctx, func() {
		d.mu.Lock()
		delete(d.waiting, w)
		d.mu.Unlock()
		cancel(nil)
	}
}

// note ends the watches that err, a permissions violation, concerns: a
// publish on their subject, or a reply subject refused (all of this
// connection's requests share its inbox).
func (d *denials) note(err error) {
	if d == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	subject := ""
	if m := publishDeniedRe().FindStringSubmatch(err.Error()); m != nil {
		subject = m[1]
	} else if replyDeniedRe().FindStringSubmatch(err.Error()) == nil {
		return // a subscription's: nats.go tells its subscriber
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for w := range d.waiting {
		if subject == "" || w.subject == subject {
			w.cancel(err)
		}
	}
}

// denial is the permissions violation that ended ctx, if one did.
func denial(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrDenied) {
		return cause
	}
	return nil
}
