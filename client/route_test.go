package client_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/lock"
)

func newStore(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	require.NoError(t, os.Mkdir(dir, 0o755))
	return dir
}

// noCLIWords checks that a library error names no command or flag: the
// CLI adds those where it prints the error.
func noCLIWords(t testing.TB, err error) {
	t.Helper()
	for _, w := range []string{"scribe serve", "--route", "--wait", "--"} {
		assert.NotContains(t, err.Error(), w)
	}
}

// Without a daemon, the route is settled at Open: prefer and direct write
// directly (no daemon to report), require refuses.
func TestRouteWithoutDaemon(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []client.Option
		noDaemon bool // Open fails with ErrNoDaemon
	}{
		{name: "default", opts: nil},
		{name: "empty route is prefer", opts: []client.Option{client.WithRoute("")}},
		{name: "prefer", opts: []client.Option{client.WithRoute(client.RoutePrefer)}},
		{name: "direct", opts: []client.Option{client.WithRoute(client.RouteDirect)}},
		{name: "require", opts: []client.Option{client.WithRoute(client.RouteRequire)}, noDaemon: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			store := newStore(t)
			c, err := client.Open(ctx, store, tc.opts...)
			if tc.noDaemon {
				require.ErrorIs(t, err, client.ErrNoDaemon)
				noCLIWords(t, err)
				return
			}
			require.NoError(t, err)
			defer c.Close()
			assert.Nil(t, c.Daemon())
			assert.Len(t, c.StoreID(), 16)
			_, err = c.Report(ctx)
			assert.ErrorIs(t, err, client.ErrNoDaemon)
			_, err = c.DeadLetters(ctx)
			assert.ErrorIs(t, err, client.ErrNoDaemon)

			l, err := c.Status(ctx, "job-1")
			require.NoError(t, err)
			assert.False(t, l.Found, "no journal yet")
			job := &queue.Job{ID: "job-1", Ops: []queue.Op{{Kind: queue.OpAppend, Path: "f.txt", Data: []byte("a\n")}}}
			require.NoError(t, c.Submit(ctx, job))
			l, err = c.Status(ctx, "job-1")
			require.NoError(t, err)
			require.True(t, l.Found)
			assert.True(t, l.Outcome.Applied(), "%+v", l.Outcome)
			b, err := os.ReadFile(filepath.Join(store, "f.txt"))
			require.NoError(t, err)
			assert.Equal(t, "a\n", string(b))

			_, err = c.Status(ctx, "not a valid id/")
			assert.ErrorIs(t, err, client.ErrRejected)
		})
	}
}

func TestOpenRejectsUnknownRoute(t *testing.T) {
	_, err := client.Open(t.Context(), newStore(t), client.WithRoute("sometimes"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unknown route")
}

// A busy store fails a direct write fast, or after WithWait's bound, with
// a *BusyError that names the holder and matches ErrBusy (and the
// writer's own ErrLocked); once the holder lets go, the write goes in.
func TestDirectBusyError(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait time.Duration
	}{
		{name: "fail-fast"},
		{name: "bounded wait", wait: 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			store := newStore(t)
			release := mustHoldStore(t, store)
			c, err := client.Open(ctx, store, client.WithRoute(client.RouteDirect), client.WithWait(tc.wait))
			require.NoError(t, err)
			defer c.Close()
			job := &queue.Job{ID: "busy-1", Ops: []queue.Op{{Kind: queue.OpAppend, Path: "f.txt", Data: []byte("a\n")}}}

			_, err = c.Apply(ctx, job)
			require.Error(t, err)
			assert.ErrorIs(t, err, client.ErrBusy)
			assert.ErrorIs(t, err, lock.ErrLocked)
			var busy *client.BusyError
			require.ErrorAs(t, err, &busy)
			assert.Equal(t, filepath.Join(store, ".scribe", "lock"), busy.Lock)
			require.NotNil(t, busy.Holder)
			assert.Equal(t, "nightly-import", busy.Holder.Command)
			assert.EqualValues(t, queue.ModeDirect, busy.Holder.Mode)
			assert.Contains(t, err.Error(), "nightly-import")
			noCLIWords(t, err)
			assert.ErrorIs(t, c.Submit(ctx, job), client.ErrBusy, "Submit without a daemon writes directly too")
			_, err = os.Stat(filepath.Join(store, "f.txt"))
			assert.ErrorIs(t, err, os.ErrNotExist, "a refused write changes nothing")

			release()
			out, err := c.Apply(ctx, job)
			require.NoError(t, err)
			assert.True(t, out.Applied(), "%+v", out)
		})
	}
}

// BusyError works without the lock's own error too (a caller's fake).
func TestBusyErrorZero(t *testing.T) {
	err := error(&client.BusyError{Lock: "/s/.scribe/lock"})
	assert.ErrorIs(t, err, client.ErrBusy)
	assert.Equal(t, "store is busy: lock /s/.scribe/lock is held by an unknown process", err.Error())
	err = &client.BusyError{Lock: "/s/.scribe/lock", Holder: &queue.Holder{PID: 7, Host: "h", Mode: queue.ModeDaemon, Command: "scribe serve"}}
	assert.True(t, strings.HasPrefix(err.Error(), "store is busy: lock /s/.scribe/lock is held by pid 7 on h (daemon: "), err.Error())
}

// A store whose daemon left jobs queued refuses the prefer route's direct
// fallback with ErrStranded (an ErrUnavailable), naming no CLI command;
// RouteDirect goes past the queued jobs on purpose.
func TestStrandedRefusesPreferFallback(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	require.NoError(t, os.MkdirAll(queue.Layout{Root: store}.Meta(), 0o700))
	require.NoError(t, queue.MarkStranded(store, "daemon pid 42 stopped with 3 jobs queued"))
	job := func() *queue.Job {
		return &queue.Job{Ops: []queue.Op{{Kind: queue.OpAppend, Path: "f.txt", Data: []byte("a\n")}}}
	}

	c, err := client.Open(ctx, store)
	require.NoError(t, err, "Open itself works: Status still can")
	defer c.Close()
	_, err = c.Apply(ctx, job())
	require.ErrorIs(t, err, client.ErrStranded)
	assert.ErrorIs(t, err, client.ErrUnavailable)
	assert.Contains(t, err.Error(), "daemon pid 42 stopped with 3 jobs queued")
	noCLIWords(t, err)
	assert.ErrorIs(t, c.Submit(ctx, job()), client.ErrStranded)
	_, err = os.Stat(filepath.Join(store, "f.txt"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	d, err := client.Open(ctx, store, client.WithRoute(client.RouteDirect))
	require.NoError(t, err)
	defer d.Close()
	out, err := d.Apply(ctx, job())
	require.NoError(t, err)
	assert.True(t, out.Applied(), "%+v", out)
}
