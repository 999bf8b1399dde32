package client_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// Exec jobs run only in the daemon: without one, Submit and Apply refuse
// them with ErrExecNeedsDaemon (an ErrNoDaemon) before the lock or the
// journal is touched, even where jobs are stranded or the store is busy;
// file jobs still write directly.
func TestExecNeedsDaemon(t *testing.T) {
	for _, tc := range []struct {
		name  string
		route client.Route
		setup func(t *testing.T, store string)
		want  string // in the error
		held  bool   // another process holds the store, and its journal
	}{
		{name: "prefer", route: client.RoutePrefer},
		{name: "direct", route: client.RouteDirect, want: "the direct route does not use the daemon"},
		{
			name:  "prefer, jobs stranded",
			route: client.RoutePrefer,
			setup: func(t *testing.T, store string) {
				require.NoError(t, os.MkdirAll(queue.Layout{Root: store}.Meta(), 0o700))
				require.NoError(t, queue.MarkStranded(store, "daemon pid 42 stopped with 3 jobs queued"))
			},
		},
		{name: "direct, store busy", route: client.RouteDirect, setup: func(t *testing.T, store string) { mustHoldStore(t, store) }, held: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			store := newStore(t)
			if tc.setup != nil {
				tc.setup(t, store)
			}
			c, err := client.Open(ctx, store, client.WithRoute(tc.route))
			require.NoError(t, err)
			defer c.Close()
			execJob := func() *queue.Job {
				return &queue.Job{Ops: []queue.Op{{Kind: queue.OpExec, Name: "reindex", Args: []string{"-n"}}}, Coalesce: "all"}
			}

			_, err = c.Apply(ctx, execJob())
			require.ErrorIs(t, err, client.ErrExecNeedsDaemon)
			assert.ErrorIs(t, err, client.ErrNoDaemon)
			assert.NotErrorIs(t, err, client.ErrBusy)
			assert.Contains(t, err.Error(), store)
			assert.Contains(t, err.Error(), "exec jobs run in the daemon, which has the allowlist")
			assert.Contains(t, err.Error(), tc.want)
			noCLIWords(t, err)
			assert.ErrorIs(t, c.Submit(ctx, execJob()), client.ErrExecNeedsDaemon)

			if tc.held {
				return // not busy: refused before the lock was tried
			}
			assert.NoFileExists(t, queue.Layout{Root: store}.Journal(), "nothing was recorded")
			assert.NoFileExists(t, queue.Layout{Root: store}.Lock(), "the lock was not taken")
		})
	}
}

// An exec job that is not valid is the caller's error, whatever the
// route: a rejection, before the route is asked.
func TestExecJobValidatedFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		job  *queue.Job
		want string
	}{
		{
			name: "coalescing a file job",
			job:  &queue.Job{Coalesce: "k", Ops: []queue.Op{{Kind: queue.OpAppend, Path: "f.txt", Data: []byte("a")}}},
			want: "a coalescing key is for exec jobs only",
		},
		{
			name: "exec with another op",
			job:  &queue.Job{Ops: []queue.Op{{Kind: queue.OpExec, Name: "reindex"}, {Kind: queue.OpAppend, Path: "f.txt", Data: []byte("a")}}},
			want: "an exec op must be its job's only op",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore(t)
			c, err := client.Open(t.Context(), store)
			require.NoError(t, err)
			defer c.Close()
			_, err = c.Apply(t.Context(), tc.job)
			require.ErrorIs(t, err, client.ErrRejected)
			assert.NotErrorIs(t, err, client.ErrNoDaemon)
			assert.Contains(t, err.Error(), tc.want)
			assert.NoFileExists(t, queue.Layout{Root: store}.Journal())
		})
	}
}
