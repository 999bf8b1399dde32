package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// writeConfig writes a store's default config file with the given mode.
func writeConfig(t testing.TB, store, content string, mode os.FileMode) string {
	t.Helper()
	l := queue.Layout{Root: store}
	require.NoError(t, os.MkdirAll(l.Meta(), 0o700))
	require.NoError(t, os.Chmod(l.Meta(), 0o700))
	require.NoError(t, os.WriteFile(l.Config(), []byte(content), 0o600))
	require.NoError(t, os.Chmod(l.Config(), mode))
	return l.Config()
}

// setting finds KEY's line in --check-config's output: its value and
// where it came from.
func setting(t testing.TB, out, key string) (value, from string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + key + ` = (\S+)\s+# (.*)$`).FindStringSubmatch(out)
	require.NotNil(t, m, "no %s in:\n%s", key, out)
	return m[1], m[2]
}

func TestConfigCheckReportsFile(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	path := writeConfig(t, store, "# daemon settings\nmax_jobs = 500\nsync = \"1s\"\n", 0o600)
	r := scribe(t, "", "serve", "--store", store, "--check-config")
	require.Equal(t, 0, r.code, r.stderr)
	v, from := setting(t, r.stdout, "max_jobs")
	assert.Equal(t, "500", v)
	assert.Equal(t, "file "+path+":2", from)
	v, from = setting(t, r.stdout, "sync")
	assert.Equal(t, `"1s"`, v)
	assert.Equal(t, "file "+path+":3", from)
	v, from = setting(t, r.stdout, "batch")
	assert.Equal(t, "256", v)
	assert.Equal(t, "default", from)
	// An empty path the daemon works out from the store says what it is.
	v, from = setting(t, r.stdout, "lock_file")
	assert.Equal(t, `""`, v)
	assert.Equal(t, "default: <store>/.scribe/lock", from)
	assert.NoFileExists(t, queue.Layout{Root: store}.Discovery(), "--check-config must not start a daemon")
}

func TestConfigFlagOverridesFile(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	path := writeConfig(t, store, "max_jobs = 500\nsync = \"1s\"\n", 0o600)
	r := scribe(t, "", "serve", "--store", store, "--max-jobs", "42", "--check-config")
	require.Equal(t, 0, r.code, r.stderr)
	v, from := setting(t, r.stdout, "max_jobs")
	assert.Equal(t, "42", v)
	assert.Equal(t, "flag --max-jobs", from)
	_, from = setting(t, r.stdout, "sync")
	assert.Equal(t, "file "+path+":2", from)
}

func TestConfigExplicitFileRunsDaemon(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	other := filepath.Join(t.TempDir(), "scribe.toml")
	require.NoError(t, os.WriteFile(other, []byte("sync = \"250ms\"\n"), 0o600))
	d := startDaemon(t, store, "--config", other)
	d.stop(t)
	assert.Contains(t, d.log.String(), "sync=250ms", "the daemon runs with the file's sync")
}

func TestConfigInsecureFileRefused(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	path := writeConfig(t, store, "max_jobs = 500\n", 0o620)
	r := scribe(t, "", "serve", "--store", store)
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "refusing config file "+path)
	assert.Contains(t, r.stderr, "group-writable")
	assert.NoFileExists(t, queue.Layout{Root: store}.Discovery())
}

func TestConfigBadFileExitsUsage(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	path := writeConfig(t, store, "batch = 10\nmax_jobs = -1\nbogus = true\n", 0o600)
	for _, args := range [][]string{
		{"serve", "--store", store},
		{"serve", "--store", store, "--check-config"},
	} {
		r := scribe(t, "", args...)
		assert.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stderr, path+":2: max_jobs: ")
		assert.Contains(t, r.stderr, path+":3: bogus: unknown key")
		assert.Empty(t, r.stdout)
	}
	assert.NoFileExists(t, queue.Layout{Root: store}.Discovery())
}

// --check-config refuses what serve refuses, with the same exit code: a
// [[store]] folder that does not exist, a store listed twice under two
// spellings, a [[store]] lock_file the store's own file does not say, a
// shared queue folder inside a store, a lock file that is a folder, and
// values the queue's server or the metrics listener would only fail on.
func TestConfigCheckRefusesWhatServeRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := filepath.Join(dir, "a")
	require.NoError(t, os.Mkdir(store, 0o755))
	require.NoError(t, os.Symlink(store, filepath.Join(dir, "alink")))
	other := filepath.Join(dir, "b")
	require.NoError(t, os.Mkdir(other, 0o755))
	two := `path = "` + store + `"` + "\n[[store]]\npath = \"" + other + `"`
	for _, tc := range []struct {
		name, top, stores string
		code              int
		want              string
	}{
		{"missing", "", `path = "` + filepath.Join(dir, "gone") + `"`, 1, "does not exist"},
		{"listed twice", "", `path = "` + store + `"` + "\n[[store]]\npath = \"" + filepath.Join(dir, "alink") + `"`, 2, ":5: store.path: " + filepath.Join(dir, "alink") + " is listed twice (first at line 3)"},
		// Direct writers would take another lock than the daemon.
		{"lock_file in [[store]] only", "", `path = "` + store + `"` + "\n[[store]]\npath = \"" + other + "\"\nlock_file = \"b.lock\"", 1, "which the store's commands run without the daemon do not read"},
		// A job of store a could write the queue's files.
		{"queue_dir in a store", `queue_dir = "alink/q"`, two, 2, "is inside store " + realPath(t, store)},
		{"lock_file a folder", "", `path = "` + store + `"` + "\nlock_file = \"b\"", 2, "is a folder: not a lock file"},
		{"sync 1ns", `sync = "1ns"`, two, 2, "at least 1ms"},
		{"host unresolved", `host = "no-such-host.invalid"`, two, 2, "nor a name this machine resolves"},
		{"metrics port", `metrics_addr = ":99999"`, two, 2, "invalid port"},
	} {
		cfg := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".toml")
		require.NoError(t, os.WriteFile(cfg, []byte(tc.top+"\n[[store]]\n"+tc.stores+"\n"), 0o600))
		for _, args := range [][]string{{"serve", "--config", cfg, "--check-config"}, {"serve", "--config", cfg}} {
			r := scribe(t, "", args...)
			assert.Equal(t, tc.code, r.code, "%s %v: %s", tc.name, args, r.stderr)
			assert.Contains(t, r.stderr, tc.want, "%s %v", tc.name, args)
		}
	}
	// The same values as flags.
	for _, flag := range [][]string{{"--port", "70000"}, {"--metrics-addr", ":70000"}, {"--sync", "1ns"}} {
		for _, check := range [][]string{{"--check-config"}, nil} {
			r := scribe(t, "", append(append([]string{"serve", "--store", store}, flag...), check...)...)
			assert.Equal(t, 2, r.code, "%v %v: %s", flag, check, r.stderr)
		}
	}
	assert.NoFileExists(t, queue.Layout{Root: store}.Discovery())
	assert.NoDirExists(t, filepath.Join(store, "q"))
}

// A command reads only the keys it takes of the store's config file: a
// bad autostart does not fail a direct write or scribe lock, which read
// lock_file only; submit, which settles autostart, reports it.
func TestConfigCallersReadOnlyTheirKeys(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	path := writeConfig(t, store, "autostart = \"yes\"\n", 0o600)
	r := scribe(t, "", "submit", "--store", store, "--route", "direct", "append", "f.txt", "x")
	assert.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "", "lock", "--store", store, "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
	r = scribe(t, "", "submit", "--store", store, "append", "f.txt", "y")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, path+":1: autostart: ")
	assert.Equal(t, "x", readFile(t, filepath.Join(store, "f.txt")))
}

// A daemon of one store given --config takes the lock file the store's
// own config file sets, which it does not read otherwise, and refuses to
// start with another: `scribe lock` and direct writes take the store
// file's, and would not exclude it.
func TestServeOtherConfigTakesTheStoresLockFile(t *testing.T) {
	t.Parallel()
	dir := realPath(t, t.TempDir())
	store := filepath.Join(dir, "store")
	require.NoError(t, os.Mkdir(store, 0o755))
	writeConfig(t, store, "lock_file = \"../../index.lock\"\n", 0o600)
	other := filepath.Join(dir, "other.toml")
	require.NoError(t, os.WriteFile(other, []byte("max_bytes = 67108864\n"), 0o600))

	r := scribe(t, "", "serve", "--store", store, "--config", other, "--lock-file", filepath.Join(dir, "else.lock"))
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "sets lock_file "+filepath.Join(dir, "index.lock")+", which this daemon does not read")

	startDaemon(t, store, "--config", other)
	disc, err := queue.ReadDiscovery(store)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "index.lock"), disc.LockFile)
	r = scribe(t, "", "lock", "--store", store, "--wait=30s", "--", "sh", "-c", `echo "$SCRIBE_LOCK_FILE"`)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, filepath.Join(dir, "index.lock")+"\n", r.stdout, "scribe lock takes the daemon's lock file")
}

// A problem in a key only serve reads does not fail a hook's write when
// the hook starts the daemon: the one daemon started refuses the file,
// and the write is made directly, with the problem named on stderr. Once,
// this tried three daemons and exited 75 ("none serves the store"), which
// a hook retries for ever. The require route, which never writes
// directly, fails with the config's exit code, 2.
func TestAutostartRefusedConfigWritesDirectly(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	path := writeConfig(t, store, "autostart = true\nmax_jobs = -1\n", 0o600)
	l := queue.Layout{Root: store}
	// What earlier daemons wrote is not this one's refusal.
	require.NoError(t, os.WriteFile(l.DaemonLog(), []byte("time=2026-12-07T14:38:17Z level=INFO msg=\"shutting down\"\n"), 0o600))

	r := scribe(t, "", "submit", "--store", store, "put", "a.txt", "hi")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "hi", readFile(t, filepath.Join(store, "a.txt")))
	assert.Contains(t, r.stderr, "scribe: the daemon started on demand refused its settings (exit 2): "+path+":2: max_jobs")
	assert.Contains(t, r.stderr, "without a daemon, the job takes the direct route (check the settings with: scribe serve --store "+store+" --check-config)")
	assert.NotContains(t, r.stderr, "shutting down")
	d, err := discovery.Find(store)
	require.NoError(t, err)
	assert.Nil(t, d, "no daemon serves the store")
	log := readFile(t, l.DaemonLog())
	assert.Equal(t, 1, strings.Count(log, path+":2: max_jobs"), "one daemon was started, not one per try: %s", log)

	r = scribe(t, "", "submit", "--store", store, "--route", "require", "put", "a.txt", "again")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "refused its settings (exit 2): "+path+":2: max_jobs")
	assert.Equal(t, "hi", readFile(t, filepath.Join(store, "a.txt")))

	// A file serve takes, and then cannot start with: exit 1, the same.
	writeConfig(t, store, "autostart = true\nmetrics_addr = \"999.1.1.1:80\"\n", 0o600)
	r = scribe(t, "", "submit", "--store", store, "put", "b.txt", "hi")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "hi", readFile(t, filepath.Join(store, "b.txt")))
	assert.Contains(t, r.stderr, "scribe: the daemon started on demand could not start (exit 1): ")
	assert.Contains(t, r.stderr, "999.1.1.1")
	assert.NotContains(t, r.stderr, "--check-config", "which finds nothing wrong with the file")
	r = scribe(t, "", "submit", "--store", store, "--route", "require", "put", "b.txt", "again")
	assert.Equal(t, 69, r.code, r.stderr)
	assert.Equal(t, "hi", readFile(t, filepath.Join(store, "b.txt")))
}

// A $SCRIBE_AUTOSTART that says neither yes nor no, or a $SCRIBE_EXIT_IDLE
// that is no duration, is refused (exit 2) where a daemon could be
// started, rather than taken for no (or the default) over the store's
// file; the direct route, which starts none, ignores them.
func TestAutostartEnvironmentRefused(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	writeConfig(t, store, "autostart = true\nexit_idle = \"7s\"\n", 0o600)
	for _, env := range []string{"SCRIBE_AUTOSTART=yes", "SCRIBE_AUTOSTART=bogus", "SCRIBE_EXIT_IDLE=bogus", "SCRIBE_EXIT_IDLE=0s"} {
		r := runWith(t, scribeBin, []string{env}, nil, "submit", "--store", store, "put", "a.txt", "x")
		assert.Equal(t, 2, r.code, "%s: %s", env, r.stderr)
		assert.Contains(t, r.stderr, "$"+env+": want ", env)
		r = runWith(t, scribeBin, []string{env}, nil, "submit", "--store", store, "--route", "direct", "put", "a.txt", "x")
		assert.Equal(t, 0, r.code, "%s, direct: %s", env, r.stderr)
	}
	// The flag contradicts the direct route; the variable does not.
	r := scribe(t, "", "submit", "--store", store, "--autostart", "--route", "direct", "put", "a.txt", "y")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "--autostart starts a daemon when none serves the store, and --route direct writes the store without one")
	assert.Equal(t, "x", readFile(t, filepath.Join(store, "a.txt")), "nothing was written")
	r = runWith(t, scribeBin, []string{"SCRIBE_AUTOSTART=1"}, nil, "submit", "--store", store, "--route", "direct", "put", "a.txt", "z")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.NoFileExists(t, queue.Layout{Root: store}.DaemonLog(), "no daemon was started")
}
