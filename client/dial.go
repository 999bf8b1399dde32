package client

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/lock"
)

// unreachable names daemon d, which cannot be reached, for an error: its
// pid and URL and, where other processes hold the daemon lock now (d was
// killed and another took the lock before it announced itself, or the
// lock's holder is not a daemon at all), theirs.
func unreachable(store string, d *queue.Discovery) string {
	named := fmt.Sprintf("pid %d at %s", d.PID, d.URL)
	if store == "" {
		return named
	}
	pids, _ := lock.LockHolders(queue.Layout{Root: store}.DaemonLock())
	var others []string
	for _, p := range pids {
		if p == d.PID {
			return named
		}
		if p > 0 {
			others = append(others, strconv.Itoa(p))
		}
	}
	if len(others) == 0 {
		return named
	}
	return fmt.Sprintf("%s, which its discovery file names, but the daemon lock is held by pid %s", named, strings.Join(others, ", "))
}

// ctxDialer makes the connections of one nats.Connect, each closed if
// ctx ends before release: a caller cancelled (SIGTERM) while it dials a
// daemon that never completes the TLS handshake (SIGSTOP) is not held
// for the rest of the attempt. Connect takes no context of its own.
type ctxDialer struct {
	ctx     context.Context
	timeout time.Duration
	mu      sync.Mutex
	stops   []func() bool
}

func (d *ctxDialer) Dial(network, address string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: d.timeout}).DialContext(d.ctx, network, address)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.stops = append(d.stops, context.AfterFunc(d.ctx, func() { c.Close() }))
	d.mu.Unlock()
	return c, nil
}

// release lets the connections made outlive ctx.
func (d *ctxDialer) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, stop := range d.stops {
		stop()
	}
}

// dial connects to the daemon d names, over TLS pinned to d's certificate
// and begun before the first protocol line (d.Pinned): the server proves
// it holds that certificate's key before the client reads anything it
// says or sends its credentials or anything else. The connection never
// reconnects by itself, since whoever listens on a remembered port after
// a restart may be someone else: a lost connection is closed, and redial
// goes through discovery again. Asynchronous errors go to log, never to
// stderr (nats.go's default).
func dial(ctx context.Context, d *queue.Discovery, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	pinned, err := d.Pinned()
	if err != nil {
		return nil, nil, err
	}
	// One attempt takes at most what ctx leaves: a daemon that does not
	// answer must not hold a bounded call past its bound.
	timeout := dialTimeout
	deadline, bounded := ctx.Deadline()
	if bounded {
		timeout = min(timeout, time.Until(deadline))
	}
	if err := ctx.Err(); err != nil || timeout <= 0 {
		return nil, nil, fmt.Errorf("connect to %s: %w", d.URL, cmp.Or(err, context.DeadlineExceeded))
	}
	cd := &ctxDialer{ctx: ctx, timeout: timeout}
	nc, err := nats.Connect(d.URL, pinned, nats.UserInfo(d.User, d.Password),
		nats.Timeout(timeout), nats.Name("scribe-client"), nats.NoReconnect(), nats.SetCustomDialer(cd),
		nats.SyncQueueLen(outcomeQueueLen), nats.ErrorHandler(asyncError(log)))
	cd.release()
	if err != nil {
		var cv *tls.CertificateVerificationError
		var rh tls.RecordHeaderError
		switch {
		case errors.As(err, &cv):
			got := "none"
			if len(cv.UnverifiedCertificates) > 0 {
				got = queue.CertFingerprint(cv.UnverifiedCertificates[0].Raw)
			}
			return nil, nil, fmt.Errorf("%w: it presented certificate %s, the discovery file names %s (%w)", ErrUnverified, got, d.TLSCertSHA256, err)
		case errors.As(err, &rh):
			// Its first bytes were not TLS: a plain NATS server (or a
			// daemon older than TLS first) sends its INFO in clear.
			return nil, nil, fmt.Errorf("%w: it does not begin with TLS (it sent %q) (%w)", ErrUnverified, rh.RecordHeader[:], err)
		case errors.Is(err, nats.ErrSecureConnWanted):
			return nil, nil, fmt.Errorf("%w: it does not offer TLS (%w)", ErrUnverified, err)
		case ctx.Err() != nil, bounded && !time.Now().Before(deadline):
			// The call's bound (or its caller) ended the attempt: it
			// failed on the connection ctxDialer closed, or on its own
			// timeout, which is what the bound left.
			return nil, nil, fmt.Errorf("connect to %s: %w", d.URL, cmp.Or(context.Cause(ctx), context.DeadlineExceeded))
		}
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// asyncError logs what nats.go reports outside any call. Messages
// dropped from a full outcome subscription (nats.ErrSlowConsumer) are
// expected when others publish there: the journal is asked instead.
func asyncError(log *slog.Logger) nats.ErrHandler {
	return func(_ *nats.Conn, sub *nats.Subscription, err error) {
		level, subject := slog.LevelWarn, ""
		if errors.Is(err, nats.ErrSlowConsumer) {
			level = slog.LevelDebug
		}
		if sub != nil {
			subject = sub.Subject
		}
		log.Log(context.Background(), level, "daemon connection", "subject", subject, "err", err)
	}
}
