package cli

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
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
		{"module version", DevVersion, info("v1.2.3", true), "1.2.3"},
		{"pseudo-version", DevVersion, info("v0.0.0-20260102030405-abcdef123456", true), "0.0.0-20260102030405-abcdef123456"},
		{"devel build", DevVersion, info("(devel)", true), DevVersion},
		{"no version", DevVersion, info("", true), DevVersion},
		{"no build info", DevVersion, info("v1.2.3", false), DevVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, buildVersion(tc.linked, tc.info))
		})
	}
}
