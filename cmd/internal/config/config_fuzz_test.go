package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/require"
)

// FuzzDecodeConfig: whatever a config file holds, decoding returns a
// config or Errors naming the file (never a panic), and every
// command of a config that decodes passes exec.Command.Check. Content
// past the bounds (maxConfigBytes, maxConfigNesting) is refused before
// the decoder sees it, and what the bounds let through never nests deeper
// in the decoder than they say: the scanner agrees with its lexer.
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
	// Past the bounds, kept small: the fuzzer minimizes what it finds
	// from a seed, and three million brackets (TestDecodeConfigBounds)
	// would take it minutes each time.
	f.Add([]byte("a = " + strings.Repeat("[", 200)))
	f.Add([]byte(strings.Repeat("a.", 200) + "b = 1\n"))
	dir := f.TempDir()
	path := filepath.Join(dir, "config.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode(path, data)
		withinBounds := len(data) <= maxConfigBytes && nestedTooDeep(data, maxConfigNesting) == 0
		if !withinBounds {
			require.Equal(t, checkBounds(path, data), err, "past the bounds: those problems, and no others")
			return
		}
		require.Empty(t, checkBounds(path, data))
		var raw map[string]any
		if _, derr := toml.Decode(string(data), &raw); derr == nil {
			require.LessOrEqual(t, arrayDepth(raw), maxConfigNesting)
		}
		if err != nil {
			var errs Errors
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

// arrayDepth is the longest chain of arrays nested in v.
func arrayDepth(v any) int {
	deepest := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			deepest = max(deepest, arrayDepth(e))
		}
		return deepest
	case []map[string]any:
		for _, e := range v {
			deepest = max(deepest, arrayDepth(e))
		}
	case []any:
		for _, e := range v {
			deepest = max(deepest, arrayDepth(e))
		}
	default:
		return 0
	}
	return deepest + 1
}
