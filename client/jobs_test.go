package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// Through a daemon: a job queued behind another process's hold is located
// as queued, Wait returns its outcome once the hold ends, and Jobs lists
// it, queued and then decided.
func TestWaitLocateJobsThroughDaemon(t *testing.T) {
	store := newStore(t)
	release := mustHoldStore(t, store)
	startDaemon(t, store)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Submit(ctx, appendJob("w1", "one\n")))
	require.NoError(t, c.Submit(ctx, appendJob("w2", "two\n")))

	l, err := c.Locate(ctx, "w2")
	require.NoError(t, err)
	assert.Equal(t, queue.StateQueued, l.State)
	assert.Equal(t, uint64(2), l.Position)
	assert.Equal(t, uint64(2), l.Queued)
	_, err = c.Locate(ctx, "bad id!")
	assert.ErrorIs(t, err, queue.ErrRejected)

	list, err := c.Jobs(ctx, queue.JobsQuery{State: queue.StateQueued})
	require.NoError(t, err)
	require.Len(t, list.Queued, 2)
	assert.Equal(t, "w1", list.Queued[0].ID)

	// Not decided yet: a short wait runs out, saying so.
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.Wait(short, "w2")
	cancelShort()
	assert.ErrorIs(t, err, client.ErrNotDecided)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	done := make(chan error, 1)
	var got *queue.Lookup
	go func() {
		var err error
		got, err = c.Wait(ctx, "w2")
		done <- err
	}()
	release()
	require.NoError(t, <-done)
	require.True(t, got.Found)
	assert.Equal(t, queue.StatusApplied, got.Outcome.Status)
	assert.Equal(t, queue.StateApplied, got.State)

	l, err = c.Locate(ctx, "never-sent")
	require.NoError(t, err)
	assert.Equal(t, queue.StateUnknown, l.State)
	assert.Contains(t, l.Detail, "no outcome recorded")

	list, err = c.Jobs(ctx, queue.JobsQuery{})
	require.NoError(t, err)
	require.Len(t, list.Outcomes, 2)
	assert.Equal(t, "w2", list.Outcomes[0].ID, "newest first")
	assert.NotNil(t, list.Queued)
}

// Without a daemon: Wait reads the journal until another writer records
// the outcome; Locate cannot search a queue; Jobs lists outcomes only.
func TestWaitLocateJobsWithoutDaemon(t *testing.T) {
	store := newStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := client.Open(ctx, store)
	require.NoError(t, err)
	defer c.Close()
	require.Nil(t, c.Daemon())

	l, err := c.Locate(ctx, "later")
	require.NoError(t, err)
	assert.Equal(t, queue.StateUnknown, l.State)
	assert.Contains(t, l.Detail, "no daemon")
	_, err = c.Jobs(ctx, queue.JobsQuery{State: queue.StateQueued})
	assert.ErrorIs(t, err, client.ErrNoDaemon)

	done := make(chan error, 1)
	var got *queue.Lookup
	go func() {
		var err error
		got, err = c.Wait(ctx, "later")
		done <- err
	}()
	other, err := client.Open(ctx, store, client.WithRoute(client.RouteDirect))
	require.NoError(t, err)
	defer other.Close()
	out, err := other.Apply(ctx, &queue.Job{ID: "later", Ops: []queue.Op{{Kind: queue.OpPut, Path: "f", Data: []byte("x"), IfMatch: queue.IfAbsent}}})
	require.NoError(t, err)
	require.NoError(t, <-done)
	assert.Equal(t, out.Status, got.Outcome.Status)

	list, err := c.Jobs(ctx, queue.JobsQuery{})
	require.NoError(t, err)
	require.Len(t, list.Outcomes, 1)
	assert.Equal(t, "later", list.Outcomes[0].ID)
	assert.Nil(t, list.Queued, "no daemon: the queue cannot be listed")
}
