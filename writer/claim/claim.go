package claim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scribehq/scribe/queue"
)

// Bucket is the JetStream key-value bucket that holds, per store ID,
// the claim of the one writer that may apply the store's jobs when its
// queue is on a NATS server that several daemons reach (a cluster).
const Bucket = "scribe_claims"

// DefaultTTL is how long a claim lasts without renewal: a standby
// takes a store over this long after its holder stopped renewing.
const DefaultTTL = 5 * time.Second

// Claim errors.
var (
	// ErrLost means another daemon took the store's claim: this writer
	// must stop, and commits nothing more.
	ErrLost = errors.New("the store's claim was taken by another daemon")
	// ErrExpired means the claim was not renewed in time (the NATS
	// server was unreachable, or the process was paused): until a renewal
	// succeeds, another daemon may have taken it, so nothing is committed.
	ErrExpired = errors.New("the store's claim has not been renewed in time")
)

// Config configures Acquire.
type Config struct {
	// TTL is how long the claim lasts without renewal; 0 means
	// DefaultTTL. Every daemon of a store must use the same.
	TTL time.Duration
	// Replicas is the number of copies of the claim bucket a cluster
	// keeps, when Acquire creates it; 0 means 1.
	Replicas int
	// Holder describes this daemon to the others' logs.
	Holder string
	// Logger receives standby and renewal messages; nil discards them.
	Logger *slog.Logger
}

// claimValue is what a claim's entry holds: who holds it, for the others'
// messages, and a nonce of this tenure, by which a holder recognises its
// own renewal whose answer it did not get.
type claimValue struct {
	Holder string    `json:"holder"`
	Host   string    `json:"host"`
	PID    int       `json:"pid"`
	Since  time.Time `json:"since"`
	Nonce  string    `json:"nonce"`
}

func (v claimValue) String() string {
	return fmt.Sprintf("pid %d on %s (%s), since %s", v.PID, v.Host, v.Holder, v.Since.Format(time.RFC3339))
}

// Claim is a daemon's exclusive right to apply one store's jobs, held in
// Bucket under the store's ID and renewed by compare-and-set on the
// entry's revision. A standby that sees the entry's revision unchanged for
// the TTL (measured on its own clock from when it first saw it) takes it
// over by compare-and-set on that revision; the holder considers its claim
// valid only until a TTL minus a margin after it sent its last successful
// renewal, which is before any standby can have taken it. No clocks are
// compared across machines.
//
// The revision at which the claim was won is its fencing token (Token):
// every later claim has a larger one. The writer checks the claim (Check)
// and the token in the journal transaction that commits each batch, so a
// writer that lost its claim, however long it was paused, commits nothing
// after a later holder did: a Claim is a journal.Fence.
type Claim struct {
	kv    jetstream.KeyValue
	key   string
	ttl   time.Duration
	token uint64
	value []byte
	nonce string
	log   *slog.Logger

	mu         sync.Mutex
	rev        uint64    // the entry's revision as last written by us
	validUntil time.Time // monotonic: the claim certainly holds before
	lost       error
	lostCh     chan struct{}

	stop chan struct{}
	done chan struct{}
}

// claimMargin is the part of the TTL a holder gives up, against clocks
// that run at slightly different rates and the time a standby's poll
// takes.
func claimMargin(ttl time.Duration) time.Duration { return ttl / 5 }

// Acquire takes the claim of store storeID, creating Bucket if it is
// missing. While another daemon holds it, Acquire waits as a
// standby until that claim is released or expires, logging who holds it;
// it returns when the claim is this daemon's, or ctx ends. The claim is
// renewed in the background until Release.
func Acquire(ctx context.Context, js jetstream.JetStream, storeID string, cfg Config) (*Claim, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	poll := min(max(cfg.TTL/5, 10*time.Millisecond), time.Second)
	kv, err := claimBucket(ctx, js, max(cfg.Replicas, 1))
	for err != nil {
		if !queue.Transient(err) {
			return nil, err
		}
		cfg.Logger.Info("the claim bucket is not available yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
		kv, err = claimBucket(ctx, js, max(cfg.Replicas, 1))
	}
	host, _ := os.Hostname()
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	v := claimValue{Holder: cfg.Holder, Host: host, PID: os.Getpid(), Since: time.Now().UTC(), Nonce: hex.EncodeToString(nonce[:])}
	value, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	c := &Claim{kv: kv, key: storeID, ttl: cfg.TTL, value: value, nonce: v.Nonce, log: cfg.Logger,
		lostCh: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	var seenRev uint64
	var seenAt time.Time
	var lastHolder string
	var lastWarn time.Time
	for {
		sent := time.Now()
		rev, err := kv.Create(ctx, storeID, value)
		if err == nil {
			return c.won(rev, sent), nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			// An election passes; a permission refused does not, and
			// says so every 10 s while it waits.
			if !queue.Transient(err) && time.Since(lastWarn) >= 10*time.Second {
				lastWarn = time.Now()
				c.log.Warn("claim the store; retrying", "store_id", storeID, "err", err)
			} else {
				c.log.Debug("claim the store", "store_id", storeID, "err", err)
			}
		} else if e, gerr := kv.Get(ctx, storeID); gerr == nil {
			switch {
			case e.Revision() != seenRev:
				seenRev, seenAt = e.Revision(), time.Now()
				if h := describeClaim(e.Value()); h != lastHolder {
					lastHolder = h
					c.log.Info("standing by: another daemon holds the store's claim", "store_id", storeID, "holder", h, "claim_ttl", cfg.TTL)
				}
			case time.Since(seenAt) >= cfg.TTL:
				// Unrenewed for a whole TTL of ours: its holder's own
				// validity ended earlier. Compare-and-set: if it renewed
				// after all, or another standby was faster, this fails.
				sent := time.Now()
				if rev, err := kv.Update(ctx, storeID, value, seenRev); err == nil {
					c.log.Info("took over the store's claim from a holder that stopped renewing it", "store_id", storeID, "former", lastHolder)
					return c.won(rev, sent), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// claimBucket opens Bucket, creating it if it is missing.
func claimBucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: Bucket, Description: "scribe: the daemon that applies each store's jobs",
			History: 1, Storage: jetstream.FileStorage, Replicas: replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open claim bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// describeClaim is a claim entry's holder, for messages.
func describeClaim(b []byte) string {
	var v claimValue
	if json.Unmarshal(b, &v) != nil {
		return fmt.Sprintf("%q", b)
	}
	return v.String()
}

// won starts holding the claim at revision rev, written by a request sent
// at sent.
func (c *Claim) won(rev uint64, sent time.Time) *Claim {
	c.token, c.rev = rev, rev
	c.validUntil = sent.Add(c.ttl - claimMargin(c.ttl))
	go c.renew()
	return c
}

// Token is the claim's fencing token: the revision at which it was won,
// larger than that of any earlier claim of the store.
func (c *Claim) Token() uint64 { return c.token }

// TTL is how long the claim lasts without renewal.
func (c *Claim) TTL() time.Duration { return c.ttl }

// Check returns nil while the claim certainly holds: ErrLost once
// another daemon took it, ErrExpired while it is not renewed in time.
func (c *Claim) Check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost != nil {
		return c.lost
	}
	if !time.Now().Before(c.validUntil) {
		return fmt.Errorf("%w (valid until %s ago)", ErrExpired, time.Since(c.validUntil).Round(time.Millisecond))
	}
	return nil
}

// Lost is closed once another daemon took the claim.
func (c *Claim) Lost() <-chan struct{} { return c.lostCh }

// renew renews the claim every quarter TTL until Release, or until it
// finds the claim taken.
func (c *Claim) renew() {
	defer close(c.done)
	every := c.ttl / 4
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if c.renewOnce(every) {
			return
		}
	}
}

// renewOnce tries one renewal; it returns true once the claim is lost.
func (c *Claim) renewOnce(timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c.mu.Lock()
	rev := c.rev
	c.mu.Unlock()
	sent := time.Now()
	newRev, err := c.kv.Update(ctx, c.key, c.value, rev)
	if err == nil {
		c.mu.Lock()
		c.rev, c.validUntil = newRev, sent.Add(c.ttl-claimMargin(c.ttl))
		c.mu.Unlock()
		return false
	}
	if !isRevisionMismatch(err) {
		// Unreachable, or an election: the claim runs out by itself if
		// this lasts.
		c.log.Warn("renew the store's claim", "store_id", c.key, "err", err)
		return false
	}
	// The revision moved. A renewal of ours whose answer was lost moves
	// it too: the entry still holds this tenure's nonce then.
	e, gerr := c.kv.Get(ctx, c.key)
	if gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound) {
		c.log.Warn("renew the store's claim", "store_id", c.key, "err", gerr)
		return false
	}
	if gerr == nil {
		var v claimValue
		if json.Unmarshal(e.Value(), &v) == nil && v.Nonce == c.nonce {
			c.mu.Lock()
			c.rev = e.Revision() // valid from the next renewal on
			c.mu.Unlock()
			return false
		}
	}
	holder := "nobody (released)"
	if gerr == nil {
		holder = describeClaim(e.Value())
	}
	c.mu.Lock()
	c.lost = fmt.Errorf("%w: %s holds it now", ErrLost, holder)
	c.mu.Unlock()
	close(c.lostCh)
	c.log.Error("lost the store's claim to another daemon; this writer stops", "store_id", c.key, "holder", holder)
	return true
}

// isRevisionMismatch reports a compare-and-set that found another
// revision (JetStream's "wrong last sequence").
func isRevisionMismatch(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// Release stops renewing and deletes the claim if it is still this
// daemon's, so that a standby takes over at once instead of after the TTL.
func (c *Claim) Release() error {
	select {
	case <-c.stop:
		return nil
	default:
	}
	close(c.stop)
	<-c.done
	c.mu.Lock()
	rev, lost := c.rev, c.lost
	c.mu.Unlock()
	if lost != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
	defer cancel()
	if err := c.kv.Delete(ctx, c.key, jetstream.LastRevision(rev)); err != nil && !isRevisionMismatch(err) {
		return fmt.Errorf("release the store's claim: %w", err)
	}
	return nil
}
