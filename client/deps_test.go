package client_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Hook binaries and MCP servers link client: it must not pull in the NATS
// server (or anything else that makes them big and slow to start).
func TestClientDoesNotLinkNATSServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/scribehq/scribe/client").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/nats-io/nats.go", "the dependency list is real")
	for _, d := range deps {
		assert.False(t, strings.HasPrefix(d, "github.com/nats-io/nats-server"), "client depends on %s", d)
		assert.NotEqual(t, "github.com/scribehq/scribe/embednats", d)
	}
}
