package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
)

// Many Applies at once on one client each get their own job's outcome,
// however the outcomes interleave: each listens on its own subject with
// a small queue.
func TestConcurrentApplyOwnOutcome(t *testing.T) {
	store := newStore(t)
	startDaemon(t, store)
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	c, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	defer c.Close()

	const producers, each = 32, 6
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				job := appendJob(fmt.Sprintf("p%d-j%d", p, i), fmt.Sprintf("line %d %d\n", p, i))
				out, err := c.Apply(ctx, job)
				if !assert.NoError(t, err, job.ID) {
					return
				}
				assert.Equal(t, job.ID, out.ID)
				assert.Equal(t, job.Digest(), out.Digest, "the outcome of %s, not another job's", job.ID)
				assert.True(t, out.Applied(), "%+v", out)
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(filepath.Join(store, "f.txt"))
	require.NoError(t, err)
	for p := range producers {
		for i := range each {
			assert.Equal(t, 1, strings.Count(string(b), fmt.Sprintf("line %d %d\n", p, i)))
		}
	}
}

// Whatever else is published on a job's outcome subject (anyone who may
// submit can make the server publish there) fills a listener's small
// queue and is dropped, perhaps with the outcome: Apply and Wait still
// get the job's outcome, from the journal, and the drops are logged, not
// printed.
func TestOutcomeAmidNoise(t *testing.T) {
	store := newStore(t)
	release := mustHoldStore(t, store) // the job waits until the noise is sent
	srv := startDaemonVia(t, store, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var logged testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire), client.WithLogger(log))
	require.NoError(t, err)
	defer c.Close()

	job := appendJob("noisy-1", "a\n")
	applied := make(chan *queue.Outcome, 1)
	go func() {
		out, err := c.Apply(ctx, job)
		assert.NoError(t, err)
		applied <- out
	}()
	waitQueued(t, c, job.ID)
	waited := make(chan *queue.Lookup, 1)
	go func() {
		l, err := c.Wait(ctx, job.ID)
		assert.NoError(t, err)
		waited <- l
	}()
	// A burst the listeners cannot keep up with: each message that is not
	// the job's outcome sends them to the journal, one round trip each.
	subject := queue.OutcomeSubject(c.StoreID(), job.ID)
	for i := range 1000 {
		require.NoError(t, srv.Conn().Publish(subject, fmt.Appendf(nil, "noise %d", i)))
	}
	require.NoError(t, srv.Conn().Flush())
	release()

	for _, out := range []*queue.Outcome{<-applied, (<-waited).Outcome} {
		require.NotNil(t, out)
		assert.Equal(t, job.ID, out.ID)
		assert.True(t, out.Applied(), "%+v", out)
	}
	assert.Contains(t, logged.String(), "slow consumer")
}

// A connection lost while a job waits for its outcome is redialled
// through discovery, and the outcome still reaches Apply: over the new
// connection, or from the journal when it was published while no
// connection was up.
func TestOutcomeAcrossReconnect(t *testing.T) {
	for _, tc := range []struct {
		name string
		// down: the outcome is published while the client cannot
		// reconnect; else the client is back before it is published.
		down bool
	}{
		{name: "outcome after the redial"},
		{name: "outcome while disconnected", down: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore(t)
			release := mustHoldStore(t, store)
			var r *testkit.Relay
			srv := startDaemonVia(t, store, func(addr string) string {
				r = testkit.StartRelay(t, "127.0.0.1:0", addr)
				return r.Addr()
			})
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			c, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire))
			require.NoError(t, err)
			defer c.Close()

			job := appendJob("cut-1", "a\n")
			published := make(chan *nats.Msg, 1)
			obs, err := srv.Conn().ChanSubscribe(queue.OutcomeSubject(c.StoreID(), job.ID), published)
			require.NoError(t, err)
			defer func() { _ = obs.Unsubscribe() }()
			require.NoError(t, srv.Conn().Flush())

			applied := make(chan *queue.Outcome, 1)
			go func() {
				out, err := c.Apply(ctx, job)
				assert.NoError(t, err)
				applied <- out
			}()
			waitQueued(t, c, job.ID)
			require.Equal(t, 1, r.Connections())

			if tc.down {
				r.Refuse(true) // redials fail until the outcome is out
			}
			r.Cut()
			if !tc.down {
				// Back on a new connection, listening, before the outcome.
				require.Eventually(t, func() bool { return r.Connections() == 2 }, 30*time.Second, 5*time.Millisecond)
			}
			release()
			select {
			case <-published:
			case <-ctx.Done():
				t.Fatal("no outcome published")
			}
			r.Refuse(false)
			out := <-applied
			require.NotNil(t, out)
			assert.Equal(t, job.ID, out.ID)
			assert.Equal(t, job.Digest(), out.Digest)
			assert.True(t, out.Applied(), "%+v", out)
			assert.Equal(t, 2, r.Connections(), "one redial that got through")
			b, err := os.ReadFile(filepath.Join(store, "f.txt"))
			require.NoError(t, err)
			assert.Equal(t, "a\n", string(b))
		})
	}
}

// waitQueued waits until the daemon has job id, queued or in hand.
func waitQueued(t *testing.T, c *client.Client, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		l, err := c.Locate(t.Context(), id)
		return err == nil && (l.State == queue.StateQueued || l.State == queue.StateInHand)
	}, 30*time.Second, 5*time.Millisecond, "job %s never queued", id)
}
