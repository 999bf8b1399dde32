package writer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/journal"
)

// A standby waits while the claim is held, and takes it at once when the
// holder releases it, with a larger fencing token.
func TestClaimStandbyTakesOverOnRelease(t *testing.T) {
	_, js := startJetStream(t)
	ctx := context.Background()
	const ttl = 2 * time.Second
	a, err := writer.AcquireClaim(ctx, js, "0123456789abcdef", writer.ClaimConfig{TTL: ttl, Holder: "a"})
	require.NoError(t, err)
	require.NoError(t, a.Check())

	got := make(chan *writer.Claim, 1)
	go func() {
		b, err := writer.AcquireClaim(ctx, js, "0123456789abcdef", writer.ClaimConfig{TTL: ttl, Holder: "b"})
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
	var b *writer.Claim
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
	_, js := startJetStream(t)
	ctx := context.Background()
	ttl := 500 * time.Millisecond
	a, err := writer.AcquireClaim(ctx, js, "00000000000000aa", writer.ClaimConfig{TTL: ttl, Holder: "a"})
	require.NoError(t, err)
	a.PauseRenewal()
	paused := time.Now()

	b, err := writer.AcquireClaim(ctx, js, "00000000000000aa", writer.ClaimConfig{TTL: ttl, Holder: "b"})
	require.NoError(t, err)
	took := time.Since(paused)
	t.Logf("standby took the unrenewed claim after %v (ttl %v)", took, ttl)
	assert.GreaterOrEqual(t, took, ttl, "taken before the holder's TTL ran out")
	// The holder's own validity ended before the takeover.
	require.ErrorIs(t, a.Check(), writer.ErrClaimExpired)
	require.True(t, a.RenewNow(), "the resumed holder's renewal must find the claim taken")
	require.ErrorIs(t, a.Check(), writer.ErrClaimLost)
	select {
	case <-a.Lost():
	default:
		t.Fatal("Lost not closed")
	}
	require.NoError(t, b.Check())
	require.NoError(t, b.Release())
}

// fakeFence is a Fence whose token and validity the test sets.
type fakeFence struct {
	token uint64
	err   error
}

func (f *fakeFence) Token() uint64 { return f.token }
func (f *fakeFence) Check() error  { return f.err }

// The journal commits nothing under a fence that fails its check, or
// whose token is older than one it already committed under; direct
// writers have no fence and are not affected.
func TestJournalFence(t *testing.T) {
	store := t.TempDir()
	old, newer := &fakeFence{token: 5}, &fakeFence{token: 9}
	require.NoError(t, writer.CommitUnder(store, old, "a1"))
	require.NoError(t, writer.CommitUnder(store, newer, "b1"))
	err := writer.CommitUnder(store, old, "a2")
	require.ErrorIs(t, err, journal.ErrFenced)
	newer.err = fmt.Errorf("%w: paused", writer.ErrClaimExpired)
	require.ErrorIs(t, writer.CommitUnder(store, newer, "b2"), writer.ErrClaimExpired)
	require.NoError(t, writer.CommitUnder(store, nil, "direct"))
	newer.err = nil
	require.NoError(t, writer.CommitUnder(store, newer, "b3"))
	b, err := os.ReadFile(filepath.Join(store, "log"))
	require.NoError(t, err)
	assert.Equal(t, "a1\nb1\ndirect\nb3\n", string(b), "the fenced batches changed nothing")
}
