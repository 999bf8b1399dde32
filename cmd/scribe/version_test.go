package main

import (
	"bytes"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/cmd/internal/cli"
)

func TestBuildVersion(t *testing.T) {
	info := func(v string, ok bool) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{Main: debug.Module{Path: "github.com/scribehq/scribe", Version: v}}, ok
		}
	}
	for _, tc := range []struct {
		name   string
		linked string
		info   func() (*debug.BuildInfo, bool)
		want   string
	}{
		{"linker wins", "2.0.0", info("v1.2.3", true), "2.0.0"},
		{"module version", devVersion, info("v1.2.3", true), "1.2.3"},
		{"pseudo-version", devVersion, info("v0.0.0-20260102030405-abcdef123456", true), "0.0.0-20260102030405-abcdef123456"},
		{"devel build", devVersion, info("(devel)", true), devVersion},
		{"no version", devVersion, info("", true), devVersion},
		{"no build info", devVersion, info("v1.2.3", false), devVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, buildVersion(tc.linked, tc.info))
		})
	}
}

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
