package server

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/cmd/internal/config"
	"github.com/scribehq/scribe/queue"
)

// The stores serve serves: the command line's, else the file's, else
// $SCRIBE_STORE; a lock file given for several stores is refused.
func TestServedStores(t *testing.T) {
	file := &config.File{Path: "/etc/scribe.toml", Stores: []config.Store{{Path: "/a", LockFile: "/a.lock", Line: 3}, {Path: "/b", Line: 6}}}
	for _, tc := range []struct {
		name     string
		args     []string // serve's flags
		one      string
		cfg      *config.File
		lockFile string
		want     []storeSpec
		err      string
	}{
		{name: "flags", args: []string{"--store", "/x", "--store", "/y"}, cfg: file,
			want: []storeSpec{{path: "/x", from: "flag --store"}, {path: "/y", from: "flag --store"}}},
		{name: "file", cfg: file,
			want: []storeSpec{{path: "/a", lockFile: "/a.lock", from: "file /etc/scribe.toml:3"}, {path: "/b", from: "file /etc/scribe.toml:6"}}},
		{name: "env", one: "/env", want: []storeSpec{{path: "/env", from: "$SCRIBE_STORE"}}},
		{name: "one store's lock file", args: []string{"--store", "/x", "--lock-file", "/l"}, one: "/x", lockFile: "/l",
			want: []storeSpec{{path: "/x", lockFile: "/l", from: "flag --store"}}},
		{name: "--lock-file for several", args: []string{"--store", "/x", "--store", "/y", "--lock-file", "/l"}, lockFile: "/l", err: "--lock-file names the lock of one store"},
		{name: "file's lock_file for several", args: []string{"--store", "/x", "--store", "/y"}, lockFile: "/l", err: "the config file's lock_file names the lock of one store"},
		{name: "none", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			var stores storeList
			fs.Var(&stores, "store", "")
			fs.String("lock-file", "", "")
			require.NoError(t, fs.Parse(tc.args))
			got, err := servedStores(fs, stores, tc.one, tc.cfg, tc.lockFile)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				assert.Equal(t, exitUsage, exitCode(err))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// serve refuses a config file whose command cannot run, or whose lock is
// the store lock, before it starts anything: exit 2, the problem named by
// file, line and key.
func TestServeRefusesBadCommands(t *testing.T) {
	// PATH with an executable tool, and only it.
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "tool"), []byte("#!/bin/sh\necho tool\n"), 0o755))
	t.Setenv("PATH", bin)
	store := t.TempDir()
	meta := queue.Layout{Root: store}.Meta()
	require.NoError(t, os.Mkdir(meta, 0o700))
	path := queue.Layout{Root: store}.Config()
	for _, tc := range []struct {
		name, doc, want string
	}{
		{name: "missing program", doc: "batch = 5\n[exec.mine]\nprogram = \"/nonexistent/mine\"\ntimeout = \"1m\"\n", want: path + ":3: exec.mine.program: /nonexistent/mine: no such file"},
		{name: "store lock", doc: "[exec.mine]\nprogram = \"tool\"\ntimeout = \"1m\"\nlock_file = \"lock\"\n", want: path + ":4: exec.mine.lock_file: " + filepath.Join(meta, "lock") + " is the store lock file"},
		{name: "shared store lock", doc: "lock_file = \"../tool.lock\"\n[exec.mine]\nprogram = \"tool\"\ntimeout = \"1m\"\nlock_file = \"../tool.lock\"\n", want: path + ":5: exec.mine.lock_file: "},
	} {
		for _, args := range [][]string{{"serve", "--store", store}, {"serve", "--store", store, "--check-config"}} {
			t.Run(tc.name+" "+strings.Join(args[3:], ""), func(t *testing.T) {
				require.NoError(t, os.WriteFile(path, []byte(tc.doc), 0o600))
				var stdout, stderr bytes.Buffer
				err := (&serveCommand{&cli.Main{Stdout: &stdout, Stderr: &stderr}}).Run(t.Context(), args[1:])
				assert.Equal(t, exitUsage, exitCode(err), "%v", err)
				assert.Contains(t, stderr.String(), tc.want)
				assert.Empty(t, stdout.String())
				assert.NoFileExists(t, queue.Layout{Root: store}.DaemonLock(), "serve started nothing")
			})
		}
	}
}
