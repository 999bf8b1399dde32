package config

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
)

// autostart and exit_idle in the store's config file are submit's
// defaults, below the command line and the environment; a file serve
// would refuse fails the submit the same way.
func TestSubmitAutostartSettings(t *testing.T) {
	newExecFixture(t) // PATH with a tool
	for _, tc := range []struct {
		name      string
		file      string // the store's config.toml; "" for none
		mode      os.FileMode
		args      []string
		env       map[string]string
		autostart bool
		exitIdle  time.Duration
		code      int    // of the error, 0 for none
		stderr    string // in what submit printed
	}{
		{name: "no file", autostart: false, exitIdle: client.DefaultExitIdle},
		{name: "file opts in", file: "autostart = true\n", autostart: true, exitIdle: client.DefaultExitIdle},
		{name: "file opts in, with its exit_idle", file: "autostart = true\nexit_idle = \"10m\"\n", autostart: true, exitIdle: 10 * time.Minute},
		{name: "file's exit_idle never is not for autostart", file: "autostart = true\nexit_idle = \"0s\"\n", autostart: true, exitIdle: client.DefaultExitIdle},
		{name: "file opts out", file: "autostart = false\n", autostart: false, exitIdle: client.DefaultExitIdle},
		{name: "flag over file", file: "autostart = true\n", args: []string{"--autostart=false"}, autostart: false, exitIdle: client.DefaultExitIdle},
		{name: "environment over file", file: "autostart = true\n", env: map[string]string{"SCRIBE_AUTOSTART": "0"}, autostart: false, exitIdle: client.DefaultExitIdle},
		{name: "flag, file's exit_idle", file: "exit_idle = \"10m\"\n", args: []string{"--autostart"}, autostart: true, exitIdle: 10 * time.Minute},
		{name: "exit-idle flag over file", file: "autostart = true\nexit_idle = \"10m\"\n", args: []string{"--exit-idle", "2m"}, autostart: true, exitIdle: 2 * time.Minute},
		{name: "exit-idle environment over file", file: "autostart = true\nexit_idle = \"10m\"\n", env: map[string]string{"SCRIBE_EXIT_IDLE": "1m"}, autostart: true, exitIdle: time.Minute},
		{name: "insecure file", file: "autostart = true\n", mode: 0o620, code: cli.ExitRejected},
		{name: "invalid file", file: "autostart = \"yes\"\n", code: cli.ExitUsage, stderr: "config.toml:1: autostart: wrong type: a string, want a boolean"},
		{
			// serve's to refuse: a hook's submit reads only its two keys.
			name:      "a command serve would refuse",
			file:      "autostart = true\n[exec.mine]\nprogram = \"no-such-tool\"\ntimeout = \"1m\"\nlock_file = \"lock\"\nbogus = 1\n",
			autostart: true, exitIdle: client.DefaultExitIdle,
		},
		{name: "invalid file, settled without it", file: "bogus = 1\n", args: []string{"--autostart", "--exit-idle", "1m"}, autostart: true, exitIdle: time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SCRIBE_AUTOSTART", "")
			t.Setenv("SCRIBE_EXIT_IDLE", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			store := t.TempDir()
			path := queue.Layout{Root: store}.Config()
			if tc.file != "" {
				require.NoError(t, os.Mkdir(filepath.Dir(path), 0o700))
				require.NoError(t, os.WriteFile(path, []byte(tc.file), 0o600))
				if tc.mode != 0 {
					require.NoError(t, os.Chmod(path, tc.mode))
				}
			}
			// The flags as submit declares them, read with serve's decoder.
			fs := cli.NewFlagSet("submit")
			auto := fs.Autostart()
			require.NoError(t, fs.Parse(tc.args))
			var stderr bytes.Buffer
			start, err := auto.Settle(&cli.Main{Stderr: &stderr, CallerConfig: Caller}, store)
			if tc.code != 0 {
				require.Error(t, err)
				assert.Equal(t, tc.code, cli.ExitCode(err), "%v", err)
				assert.Contains(t, stderr.String()+err.Error(), path)
				assert.Contains(t, stderr.String(), tc.stderr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.autostart, start != nil)
			if start != nil {
				assert.Equal(t, tc.exitIdle, start.ExitIdle)
				assert.Equal(t, "serve", start.Command[len(start.Command)-1], "this binary's serve")
			}
		})
	}
}
