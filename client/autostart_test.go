package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// A daemon started on demand that ends at once without serving the store,
// whatever its end (here: exit 0, a death by SIGKILL, exit 1 after what it
// wrote), is not started twice more: the prefer route writes directly and
// FellBack says what happened; the require route fails with it.
func TestAutostartThatEndsAtOnceFallsBack(t *testing.T) {
	for _, c := range []struct {
		name, script, want string
	}{
		{"exit 0", "exit 0", "the daemon started on demand could not start (exit 0): see "},
		{"SIGKILL", "kill -KILL $$", "the daemon started on demand died of a signal as it started: see "},
		{"exit 1, saying why", "echo 'cannot: \x1b[31mred\x1b[0m' >&2; exit 1", "could not start (exit 1): cannot: ?[31mred?[0m ("},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := newStore(t)
			start := client.Autostart{Command: []string{"/bin/sh", "-c", c.script, "sh"}}
			cl, err := client.Open(t.Context(), store, client.WithAutostart(start))
			require.NoError(t, err)
			defer cl.Close()
			assert.False(t, cl.Queued())
			var refused *client.DaemonRefusedError
			require.ErrorAs(t, cl.FellBack(), &refused)
			assert.Contains(t, refused.Error(), c.want)
			out, err := cl.Apply(t.Context(), &queue.Job{Ops: []queue.Op{{Kind: queue.OpAppend, Path: "a.txt", Data: []byte("x\n")}}})
			require.NoError(t, err)
			assert.Equal(t, queue.ModeDirect, out.Mode)
			b, err := os.ReadFile(filepath.Join(store, "a.txt"))
			require.NoError(t, err)
			assert.Equal(t, "x\n", string(b))

			_, err = client.Open(t.Context(), store, client.WithAutostart(start), client.WithRoute(client.RouteRequire))
			assert.True(t, errors.Is(err, client.ErrDaemonRefused), "%v", err)
		})
	}
}
