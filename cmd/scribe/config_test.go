package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	type problem struct {
		line int
		key  string
		text string // a substring of the problem
	}
	for _, tc := range []struct {
		name  string
		doc   string
		want  []problem // nil: valid
		check func(t *testing.T, c *Config)
	}{
		{
			name: "valid",
			doc:  "# a comment\nmax_jobs = 500\nsync = \"1s\"\n\nidle_release = \"2s\"\nlock_file = \"tool.lock\"\nexit_idle = \"0s\"\nport = 4222\n",
			check: func(t *testing.T, c *Config) {
				assert.Equal(t, int64(500), *c.MaxJobs)
				assert.Equal(t, "1s", *c.Sync)
				assert.Equal(t, 2*time.Second, *c.IdleRelease)
				assert.Equal(t, filepath.Join(dir, "tool.lock"), *c.LockFile)
				assert.Equal(t, time.Duration(0), *c.ExitIdle)
				assert.Equal(t, int64(4222), *c.Port)
				assert.Nil(t, c.MaxBytes)
				assert.Equal(t, 2, c.Lines["max_jobs"])
				assert.Equal(t, 6, c.Lines["lock_file"])
			},
		},
		{name: "empty", doc: "", check: func(t *testing.T, c *Config) { assert.Nil(t, c.MaxJobs) }},
		{name: "unknown key", doc: "batch = 10\n\nmax_job = 5\n", want: []problem{{3, "max_job", "unknown key"}}},
		{name: "key of another case", doc: "\nMAX_JOBS = 5\n", want: []problem{{2, "MAX_JOBS", "unknown key"}}},
		{name: "unknown table", doc: "batch = 10\n[daemon.mine]\nprogram = \"mine\"\n", want: []problem{{2, "daemon", "unknown table"}}},
		{name: "autostart", doc: "\nautostart = true\n", check: func(t *testing.T, c *Config) {
			assert.True(t, *c.Autostart)
			assert.Equal(t, 2, c.Lines["autostart"])
		}},
		{name: "autostart not a boolean", doc: "autostart = 1\n", want: []problem{{1, "autostart", "wrong type: an integer, want a boolean"}}},
		{name: "wrong type", doc: "batch = 10\nmax_jobs = \"500\"\n", want: []problem{{2, "max_jobs", "wrong type: a string, want an integer"}}},
		{name: "duration as integer", doc: "\n\nretention = 3600\n", want: []problem{{3, "retention", "wrong type: an integer"}}},
		{name: "bad duration", doc: "host = \"::1\"\nidle_release = \"5 minutes\"\n", want: []problem{{2, "idle_release", "not a duration"}}},
		{name: "days are not a unit", doc: "retention = \"7d\"\n", want: []problem{{1, "retention", "not a duration"}}},
		{name: "negative size", doc: "\nmax_bytes = -1\n", want: []problem{{2, "max_bytes", "want a positive integer"}}},
		{name: "zero batch", doc: "batch = 0\n", want: []problem{{1, "batch", "want a positive integer"}}},
		{name: "port out of range", doc: "port = 70000\n", want: []problem{{1, "port", "want 0 to 65535"}}},
		{name: "negative duration", doc: "warn_after = \"-1s\"\n", want: []problem{{1, "warn_after", "positive"}}},
		{name: "bad sync", doc: "sync = \"sometimes\"\n", want: []problem{{1, "sync", `want "always"`}}},
		{name: "bad log level", doc: "log_level = \"loud\"\n", want: []problem{{1, "log_level", "want debug"}}},
		{name: "lock file folder missing", doc: "lock_file = \"/nonexistent-scribe-dir/lock\"\n", want: []problem{{1, "lock_file", "its folder does not exist"}}},
		{
			name: "every problem, by line",
			doc:  "bogus = 1\nmax_jobs = -5\nsync = 1\n",
			want: []problem{{1, "bogus", "unknown key"}, {2, "max_jobs", "positive"}, {3, "sync", "wrong type"}},
		},
		{name: "syntax error", doc: "batch = 10\nmax_jobs = \n", want: []problem{{2, "max_jobs", "expected value"}}},
		{name: "duplicate key", doc: "batch = 10\nbatch = 11\n", want: []problem{{2, "batch", "already been defined"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DecodeConfig(path, []byte(tc.doc))
			if tc.want == nil {
				require.NoError(t, err)
				if tc.check != nil {
					tc.check(t, c)
				}
				return
			}
			require.Error(t, err)
			var errs ConfigErrors
			require.True(t, errors.As(err, &errs), "%v", err)
			require.Len(t, errs, len(tc.want), "%v", err)
			for i, w := range tc.want {
				assert.Equal(t, path, errs[i].File)
				assert.Equal(t, w.line, errs[i].Line, "%v", errs[i])
				assert.Equal(t, w.key, errs[i].Key, "%v", errs[i])
				assert.Contains(t, errs[i].Problem, w.text)
				assert.Regexp(t, "^"+regexp.QuoteMeta(path)+":"+regexp.QuoteMeta(itoa(w.line))+": "+w.key+": ", errs[i].Error())
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestConfigDocExample decodes the example in docs/config.md strictly: the
// documented file must be one serve accepts, with every key of the schema,
// exec tables included (its command is flock(1), on PATH where the tests
// run).
func TestConfigDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```toml\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "no ```toml block in docs/config.md")
	c, err := DecodeConfig(filepath.Join(t.TempDir(), "config.toml"), m[1])
	require.NoError(t, err)
	for _, k := range configKeys {
		_, ok := k.get(c)
		assert.True(t, ok, "the example does not set %s", k.name)
		assert.Contains(t, string(doc), "| `"+k.name+"` |", "docs/config.md's table lacks %s", k.name)
	}
	require.NotEmpty(t, c.Commands, "the example has no [exec.NAME] table")
	for _, k := range execKeys {
		assert.Contains(t, c.Lines, "exec."+c.Commands[0].Name+"."+k.name, "the example's command does not set %s", k.name)
		assert.Contains(t, string(doc), "| `"+k.name+"` |", "docs/config.md's exec table lacks %s", k.name)
	}
}

func TestReadConfigPermissions(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	require.NoError(t, os.WriteFile(good, []byte("batch = 5\n"), 0o600))
	c, err := ReadConfig(good)
	require.NoError(t, err)
	assert.Equal(t, int64(5), *c.Batch)

	for name, mode := range map[string]os.FileMode{"group-writable": 0o620, "world-writable": 0o602} {
		p := filepath.Join(dir, name+".toml")
		require.NoError(t, os.WriteFile(p, []byte("batch = 5\n"), 0o600))
		require.NoError(t, os.Chmod(p, mode))
		_, err := ReadConfig(p)
		require.Error(t, err)
		assert.Contains(t, err.Error(), p)
		assert.Contains(t, err.Error(), "is "+name)
		assert.Equal(t, exitRejected, exitCode(err))
	}

	link := filepath.Join(dir, "link.toml")
	require.NoError(t, os.Symlink(good, link))
	_, err = ReadConfig(link)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is a symlink")

	_, err = ReadConfig(filepath.Join(dir, "missing.toml"))
	require.Error(t, err)
	assert.Equal(t, exitUsage, exitCode(err))
}
