package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/scribehq/scribe/client/bench"
	"github.com/scribehq/scribe/cmd/internal/cli"
)

func TestBenchFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rounds", "0"}, "--rounds 0: want at least 1"},
		{[]string{"--duration", "0s"}, "--duration 0s"},
		{[]string{"--jobs", "-1"}, "--jobs -1"},
		{[]string{"--producers", "0"}, `--producers "0"`},
		{[]string{"--producers", "1,,2"}, `--producers "1,,2"`},
		{[]string{"--producers", "5000"}, `--producers "5000"`},
		{[]string{"--workload", "append,bogus"}, `--workload: unknown workload "bogus"; want some of append, merge, put4k, put1m`},
		{[]string{"--contenders", "flock,nfs"}, `--contenders: unknown contender "nfs"`},
		{[]string{"--relaxed-sync", "-1s"}, "--relaxed-sync -1s"},
		{[]string{"--hooks", "-1"}, "--hooks -1: want 0 to 4096"},
		{[]string{"--submits", "5000"}, "--submits 5000: want 0 to 4096"},
		{[]string{"extra"}, "bench takes no arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := run(t, "", append([]string{"bench", "--dir", t.TempDir()}, tc.args...)...)
			assert.Equal(t, cli.ExitUsage, code, stderr)
			assert.Contains(t, stderr, tc.want)
			assert.Empty(t, stdout)
		})
	}
	stdout, _, code := run(t, "", "bench", "-h")
	assert.Equal(t, cli.ExitOK, code)
	assert.Contains(t, stdout, "Usage: scribe bench")
	assert.Contains(t, stdout, fmt.Sprintf("%d retries", bench.FailFastRetries))
}
