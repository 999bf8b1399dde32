package tests

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// A daemon started with --max-job-bytes takes jobs
// past the 1 MiB default, says so in daemon.json, and a client learns it
// from there; binary data arrives byte for byte. A daemon left at the
// default refuses the same job before anything is queued, and a limit
// past what JetStream can store is a usage error.
func TestMaxJobBytes(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte{0xff, 0x00, 'x', '\n'}, 3<<18) // 3 MiB, not UTF-8: it travels as base64
	file := filepath.Join(t.TempDir(), "big.bin")
	require.NoError(t, os.WriteFile(file, big, 0o600))
	in, err := os.ReadFile(file)
	require.NoError(t, err)

	t.Run("default refuses", func(t *testing.T) {
		store := newStore(t)
		startDaemon(t, store)
		r := scribe(t, string(in), "submit", "--store", store, "--route", "require", "--wait", "put", "big.bin", "-")
		assert.Equal(t, 1, r.code, r.stderr)
		assert.Contains(t, r.stderr, "too_large")
		assert.Contains(t, r.stderr, "limit 1048576")
		assert.NoFileExists(t, filepath.Join(store, "big.bin"))
	})

	t.Run("raised limit takes it", func(t *testing.T) {
		store := newStore(t)
		startDaemon(t, store, "--max-job-bytes", "8388608")
		b, err := os.ReadFile(filepath.Join(store, ".scribe", "daemon.json"))
		require.NoError(t, err)
		var d queue.Discovery
		require.NoError(t, json.Unmarshal(b, &d))
		assert.Equal(t, 8<<20, d.MaxJobBytes)
		r := scribe(t, string(in), "submit", "--store", store, "--route", "require", "--wait", "put", "big.bin", "-")
		require.Equal(t, 0, r.code, r.stderr)
		got, err := os.ReadFile(filepath.Join(store, "big.bin"))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(big, got), "the file holds the job's bytes exactly")

		// Past the raised limit, the message names the daemon's; a
		// direct write's stays 1 MiB.
		r = scribe(t, strings.Repeat("x", 9<<20), "submit", "--store", store, "--route", "require", "put", "bigger.bin", "-")
		assert.Equal(t, 1, r.code, r.stderr)
		assert.Contains(t, r.stderr, "limit 8388608 (the store's daemon's: serve --max-job-bytes)")
		r = scribe(t, string(in), "submit", "--store", store, "--route", "direct", "put", "direct.bin", "-")
		assert.Equal(t, 1, r.code, r.stderr)
		assert.Contains(t, r.stderr, "limit 1048576 (1 MiB: a direct write's always")
	})

	t.Run("past JetStream's limit", func(t *testing.T) {
		store := newStore(t)
		r := scribe(t, "", "serve", "--store", store, "--max-job-bytes", "40000000")
		assert.Equal(t, 2, r.code, r.stderr)
		assert.Contains(t, r.stderr, "max-job-bytes")
	})
}
