package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/cmd/internal/cli"
)

func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errb bytes.Buffer
		m := newMain(nil, &out, &errb)
		require.NoError(t, m.Run(t.Context(), args), args)
		assert.Equal(t, Version+"\n", out.String(), args)
		assert.Empty(t, errb.String())
	}
	m := newMain(nil, &bytes.Buffer{}, &bytes.Buffer{})
	err := m.Run(t.Context(), []string{"version", "extra"})
	assert.Equal(t, cli.ExitUsage, cli.ExitCode(err))
}
