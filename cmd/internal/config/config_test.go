package config

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

	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
)

func TestDecodeConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	meta := filepath.Join(dir, queue.MetaDir)
	require.NoError(t, os.Mkdir(meta, 0o700))
	type problem struct {
		line int
		key  string
		text string // a substring of the problem
	}
	for _, tc := range []struct {
		name  string
		doc   string
		want  []problem // nil: valid
		check func(t *testing.T, c *File)
	}{
		{
			name: "valid",
			doc:  "# a comment\nmax_jobs = 500\nsync = \"1s\"\n\nidle_release = \"2s\"\nlock_file = \"tool.lock\"\nexit_idle = \"0s\"\nport = 4222\n",
			check: func(t *testing.T, c *File) {
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
		{name: "empty", doc: "", check: func(t *testing.T, c *File) { assert.Nil(t, c.MaxJobs) }},
		{name: "unknown key", doc: "batch = 10\n\nmax_job = 5\n", want: []problem{{3, "max_job", "unknown key"}}},
		{name: "key of another case", doc: "\nMAX_JOBS = 5\n", want: []problem{{2, "MAX_JOBS", "unknown key"}}},
		{name: "unknown table", doc: "batch = 10\n[daemon.mine]\nprogram = \"mine\"\n", want: []problem{{2, "daemon", "unknown table"}}},
		{name: "autostart", doc: "\nautostart = true\n", check: func(t *testing.T, c *File) {
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
		{name: "lock file is the daemon lock", doc: "lock_file = \"" + filepath.Join(meta, "daemon.lock") + "\"\n", want: []problem{{1, "lock_file", "is scribe's daemon lock"}}},
		{name: "lock file is the journal", doc: "\nlock_file = \"" + filepath.Join(meta, "journal.db") + "\"\n", want: []problem{{2, "lock_file", "is scribe's journal"}}},
		{
			name: "every problem, by line",
			doc:  "bogus = 1\nmax_jobs = -5\nsync = 1\n",
			want: []problem{{1, "bogus", "unknown key"}, {2, "max_jobs", "positive"}, {3, "sync", "wrong type"}},
		},
		{name: "syntax error", doc: "batch = 10\nmax_jobs = \n", want: []problem{{2, "max_jobs", "expected value"}}},
		{name: "duplicate key", doc: "batch = 10\nbatch = 11\n", want: []problem{{2, "batch", "already been defined"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Decode(path, []byte(tc.doc))
			if tc.want == nil {
				require.NoError(t, err)
				if tc.check != nil {
					tc.check(t, c)
				}
				return
			}
			require.Error(t, err)
			var errs Errors
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
// documented file must be one serve accepts, with every top-level key of
// the schema (the [exec.NAME] schema is docs/exec.md's, TestExecDocExample).
func TestConfigDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/config.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```toml\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "no ```toml block in docs/config.md")
	c, err := Decode(filepath.Join(t.TempDir(), "config.toml"), m[1])
	require.NoError(t, err)
	var schema []string
	for _, k := range configKeys {
		_, ok := k.get(c)
		assert.True(t, ok, "the example does not set %s", k.name)
		schema = append(schema, k.name)
	}
	keys := regexp.MustCompile("(?s)\n\\| Key \\| Type \\|.*?\n\n").Find(doc)
	require.NotNil(t, keys, "no table of keys in docs/config.md")
	var table []string
	for _, row := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ").FindAllSubmatch(keys, -1) {
		table = append(table, string(row[1]))
	}
	assert.Equal(t, schema, table, "docs/config.md's table of keys, in the order --check-config prints them")
}

func TestReadConfigPermissions(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	require.NoError(t, os.WriteFile(good, []byte("batch = 5\n"), 0o600))
	c, err := Read(good)
	require.NoError(t, err)
	assert.Equal(t, int64(5), *c.Batch)

	for name, mode := range map[string]os.FileMode{"group-writable": 0o620, "world-writable": 0o602} {
		p := filepath.Join(dir, name+".toml")
		require.NoError(t, os.WriteFile(p, []byte("batch = 5\n"), 0o600))
		require.NoError(t, os.Chmod(p, mode))
		_, err := Read(p)
		require.Error(t, err)
		assert.Contains(t, err.Error(), p)
		assert.Contains(t, err.Error(), "is "+name)
		assert.Equal(t, cli.ExitRejected, cli.ExitCode(err))
	}

	link := filepath.Join(dir, "link.toml")
	require.NoError(t, os.Symlink(good, link))
	_, err = Read(link)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is a symlink")

	_, err = Read(filepath.Join(dir, "missing.toml"))
	require.Error(t, err)
	assert.Equal(t, cli.ExitUsage, cli.ExitCode(err))
}

// [[store]] tables: a store's path and lock file, relative to the file's
// folder; every problem by line; the top-level lock_file has no store to
// belong to.
func TestDecodeStores(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "daemon.toml")
	c, err := Decode(path, []byte("sync = \"1s\"\nqueue_dir = \"queue\"\n\n[[store]]\npath = \"notes\"\n\n[[store]]\n# the wiki shares its tool's lock\npath = \"/srv/wiki\"\nlock_file = \"wiki.lock\"\n"))
	require.NoError(t, err)
	require.Len(t, c.Stores, 2)
	assert.Equal(t, Store{Path: filepath.Join(dir, "notes"), Line: 4}, c.Stores[0])
	assert.Equal(t, Store{Path: "/srv/wiki", LockFile: filepath.Join(dir, "wiki.lock"), Line: 7}, c.Stores[1])
	assert.Equal(t, filepath.Join(dir, "queue"), *c.QueueDir)

	c, err = Decode(path, []byte("store = [{path = \"/a\"}, {path = \"/b\"}]\n"))
	require.NoError(t, err)
	assert.Equal(t, []Store{{Path: "/a", Line: 1}, {Path: "/b", Line: 1}}, c.Stores, "inline tables too")

	for _, tc := range []struct {
		name string
		doc  string
		want []string // FILE:LINE: KEY: PROBLEM, without the file
	}{
		{"missing path", "[[store]]\nlock_file = \"x.lock\"\n", []string{":1: store.path: missing"}},
		{"empty path", "[[store]]\npath = \"\"\n", []string{":2: store.path: empty path"}},
		{"path not a string", "[[store]]\n\npath = 5\n", []string{":3: store.path: wrong type: an integer"}},
		{"unknown key", "[[store]]\npath = \"/a\"\nsync = \"1s\"\n", []string{":3: store.sync: unknown key"}},
		{"listed twice", "[[store]]\npath = \"/a\"\n[[store]]\npath = \"/a/\"\n", []string{":4: store.path: /a is listed twice (first at line 2)"}},
		{"lock file folder missing", "[[store]]\npath = \"/a\"\nlock_file = \"/nonexistent-scribe-dir/x\"\n", []string{":3: store.lock_file: /nonexistent-scribe-dir/x: its folder does not exist"}},
		{"top-level lock_file", "lock_file = \"x.lock\"\n[[store]]\npath = \"/a\"\n", []string{":1: lock_file: a file with [[store]] tables sets each store's lock file in its table"}},
		{"a table, not an array", "[store]\npath = \"/a\"\n", []string{":1: store: wrong type: a table, want an array of tables"}},
		{"empty queue_dir", "queue_dir = \"\"\n", []string{":1: queue_dir: empty path"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(path, []byte(tc.doc))
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), path+w)
			}
		})
	}
}

// The example of a daemon of several stores in docs/config.md decodes as
// it is, with its stores.
func TestConfigDocSeveralStores(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/config.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)## Several stores.*?```toml\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "no ```toml block under ## Several stores in docs/config.md")
	c, err := Decode(filepath.Join(t.TempDir(), "daemon.toml"), m[1])
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(c.Stores), 2)
	assert.NotNil(t, c.QueueDir)
}

func TestCheckLogFormat(t *testing.T) {
	assert.NoError(t, checkLogFormat("json"))
	assert.NoError(t, checkLogFormat("text"))
	assert.Error(t, checkLogFormat("JSON"))
}
