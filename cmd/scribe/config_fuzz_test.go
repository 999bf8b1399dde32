package main

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeConfig: whatever a config file holds, decoding returns a
// config or ConfigErrors naming the file (never a panic), and every
// command of a config that decodes passes writer.Command.Check.
func FuzzDecodeConfig(f *testing.F) {
	for _, seed := range []string{
		"batch = 10\nsync = \"1s\"\n",
		"autostart = true\nexit_idle = \"5m\"\n",
		"[exec.mine]\nprogram = \"/bin/sh\"\nargs = [\"-c\", \"true\"]\nallow_args = [\"--wing=[a-z]+\"]\ntimeout = \"1m\"\nbusy_exit_codes = [75]\nenv = { A = \"b\" }\n",
		"[exec.\"a.b\"]\nprogram = \"sh\"\ntimeout = \"0s\"\n",
		"[exec]\nmine = 1\n",
		"exec = [1, 2]\n",
		"[[exec.mine]]\nprogram = \"/bin/sh\"\n",
		"[exec.mine]\nprogram = \"/bin/sh\"\ntimeout = \"1m\"\nallow_args = [\"(\"]\ndir = \"../x\"\n",
		"lock_file = \"\"\nport = 70000\n",
		"a = \"\\u0000\"\n[exec.mine.env]\nSCRIBE_X = \"1\"\n",
		"queue_dir = \"q\"\n[[store]]\npath = \"a\"\nlock_file = \"a.lock\"\n[[store]]\npath = \"a\"\n",
		"store = [1, {path = 2}]\nlock_file = \"x\"\n[[store.x]]\n",
		"store = \"x\"\n[[store]]\n",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	path := filepath.Join(dir, "config.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeConfig(path, data)
		if err != nil {
			var errs ConfigErrors
			require.True(t, errors.As(err, &errs), "%T: %v", err, err)
			require.NotEmpty(t, errs)
			for _, e := range errs {
				require.Equal(t, path, e.File)
				require.NotEmpty(t, e.Problem)
			}
			return
		}
		for _, cmd := range c.Commands {
			require.NoError(t, cmd.Check(), "%s", cmd.Name)
		}
	})
}
