package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/writer/claim"
)

// startJetStream starts an in-process JetStream server for the test.
func startJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: t.TempDir(), DontListen: true, NoSigs: true, SyncAlways: true})
	require.NoError(t, err)
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.True(t, ns.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// A standby waits while the claim is held, and takes it at once when the
// holder releases it, with a larger fencing token.
func TestClaimStandbyTakesOverOnRelease(t *testing.T) {
	js := startJetStream(t)
	ctx := context.Background()
	const ttl = 2 * time.Second
	a, err := claim.Acquire(ctx, js, "0123456789abcdef", claim.Config{TTL: ttl, Holder: "a"})
	require.NoError(t, err)
	require.NoError(t, a.Check())

	got := make(chan *claim.Claim, 1)
	go func() {
		b, err := claim.Acquire(ctx, js, "0123456789abcdef", claim.Config{TTL: ttl, Holder: "b"})
		assert.NoError(t, err)
		got <- b
	}()
	// Renewed, the claim is never taken: more than a TTL passes without a
	// takeover (a standby that took it once unrenewed for a TTL would).
	select {
	case <-got:
		t.Fatal("the standby took a claim that was being renewed")
	case <-time.After(ttl + ttl/2):
	}
	require.NoError(t, a.Check())
	released := time.Now()
	require.NoError(t, a.Release())
	var b *claim.Claim
	select {
	case b = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the standby did not take the released claim")
	}
	t.Logf("takeover after release: %v", time.Since(released))
	assert.Less(t, time.Since(released), ttl, "a released claim is taken without waiting for the TTL")
	assert.Greater(t, b.Token(), a.Token())
	require.NoError(t, b.Check())
	require.NoError(t, b.Release())
}

// A holder that stops renewing (paused, cut off) finds its claim expired
// before a standby can take it; once taken, its next renewal finds it
// lost, and its writer's journal refuses to commit under it.
func TestClaimExpiresBeforeTakeover(t *testing.T) {
	js := startJetStream(t)
	ctx := context.Background()
	ttl := 500 * time.Millisecond
	a, err := claim.Acquire(ctx, js, "00000000000000aa", claim.Config{TTL: ttl, Holder: "a"})
	require.NoError(t, err)
	a.PauseRenewal()
	paused := time.Now()

	b, err := claim.Acquire(ctx, js, "00000000000000aa", claim.Config{TTL: ttl, Holder: "b"})
	require.NoError(t, err)
	took := time.Since(paused)
	t.Logf("standby took the unrenewed claim after %v (ttl %v)", took, ttl)
	assert.GreaterOrEqual(t, took, ttl, "taken before the holder's TTL ran out")
	// The holder's own validity ended before the takeover.
	require.ErrorIs(t, a.Check(), claim.ErrExpired)
	require.True(t, a.RenewNow(), "the resumed holder's renewal must find the claim taken")
	require.ErrorIs(t, a.Check(), claim.ErrLost)
	select {
	case <-a.Lost():
	default:
		t.Fatal("Lost not closed")
	}
	require.NoError(t, b.Check())
	require.NoError(t, b.Release())
}
