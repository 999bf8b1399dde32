package tests

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/scribehq/scribe/queue"
)

// get asks url with the Authorization header auth ("" for none) through
// client, and returns the status and the body.
func get(t testing.TB, client *http.Client, url, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// writeToken writes a metrics token file with mode perm.
func writeToken(t testing.TB, dir, token string, perm os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, "metrics.token")
	require.NoError(t, os.WriteFile(path, []byte(token), 0o600))
	require.NoError(t, os.Chmod(path, perm))
	return path
}

// refusedAtStart runs scribe serve with args, which must exit at once,
// non-zero, before it serves the store; it returns the daemon's output.
func refusedAtStart(t *testing.T, store string, args ...string) string {
	t.Helper()
	d := spawnDaemon(t, store, nil, args...)
	require.True(t, d.exitedWithin(30*time.Second), "serve did not exit: %s", d.log.String())
	d.killed = true // its exit is expected: cleanup need not report it
	assert.Error(t, d.err, "serve must fail: %s", d.log.String())
	assert.NoFileExists(t, queue.Layout{Root: store}.Discovery(), "it never served the store")
	return d.log.String()
}

// With --metrics-token-file, the daemon's metrics answer only a scrape
// that sends the file's token as a bearer token: without it (or with
// another) 401, and nothing of the metrics, store paths included.
func TestMetricsBearerToken(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	token := writeToken(t, t.TempDir(), "  s3cret-metrics-token\n", 0o600)
	d := startDaemon(t, store, "--metrics-addr", "127.0.0.1:0", "--metrics-token-file", token, "--log-format", "json")
	url := metricsURL(t, d)
	c := http.DefaultClient

	for _, auth := range []string{"", "Bearer wrong-token", "Basic czNjcmV0LW1ldHJpY3MtdG9rZW4=", "s3cret-metrics-token", "Bearer s3cret-metrics-token-and-more"} {
		code, body := get(t, c, url, auth)
		assert.Equal(t, http.StatusUnauthorized, code, "Authorization %q", auth)
		assert.NotContains(t, body, store, "Authorization %q: the store's path", auth)
		assert.NotContains(t, body, "scribe_", "Authorization %q: the metrics", auth)
	}
	code, body := get(t, c, url, "Bearer s3cret-metrics-token")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `store="`+store+`"`)
	assert.Contains(t, body, "scribe_jobs_total")
	code, _ = get(t, c, url, "bearer s3cret-metrics-token")
	assert.Equal(t, http.StatusOK, code, "the scheme is case-insensitive")

	// The config file's key does the same.
	other := newStore(t)
	cfg := filepath.Join(t.TempDir(), "scribe.toml")
	require.NoError(t, os.WriteFile(cfg, []byte("metrics_addr = \"127.0.0.1:0\"\nmetrics_token_file = \""+token+"\"\nlog_format = \"json\"\n"), 0o600))
	d2 := startDaemon(t, other, "--config", cfg)
	code, _ = get(t, c, metricsURL(t, d2), "")
	assert.Equal(t, http.StatusUnauthorized, code)
	code, _ = get(t, c, metricsURL(t, d2), "Bearer s3cret-metrics-token")
	assert.Equal(t, http.StatusOK, code)
}

// A token file that others could read or change, or that is not a plain
// file of its own, stops serve at start, naming the file.
func TestMetricsTokenFileRefused(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	good := writeToken(t, t.TempDir(), "s3cret", 0o600)
	for _, c := range []struct {
		name, want string
		file       func(t *testing.T) string
	}{
		{"world-readable", "is readable by others", func(t *testing.T) string { return writeToken(t, t.TempDir(), "s3cret", 0o644) }},
		{"group-readable", "is readable by others", func(t *testing.T) string { return writeToken(t, t.TempDir(), "s3cret", 0o640) }},
		{"group-writable", "is group-writable", func(t *testing.T) string { return writeToken(t, t.TempDir(), "s3cret", 0o620) }},
		{"symlink", "is a symlink", func(t *testing.T) string {
			link := filepath.Join(t.TempDir(), "link.token")
			require.NoError(t, os.Symlink(good, link))
			return link
		}},
		{"fifo", "is not a regular file but a FIFO", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "fifo.token")
			require.NoError(t, syscall.Mkfifo(p, 0o600))
			return p
		}},
		{"empty", "is empty", func(t *testing.T) string { return writeToken(t, t.TempDir(), " \n", 0o600) }},
		{"missing", "no such file", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := c.file(t)
			out := refusedAtStart(t, store, "--metrics-addr", "127.0.0.1:0", "--metrics-token-file", path)
			assert.Contains(t, out, path)
			assert.Contains(t, out, c.want)
		})
	}
	out := refusedAtStart(t, store, "--metrics-token-file", good)
	assert.Contains(t, out, "--metrics-token-file needs --metrics-addr")
}

// unixClient is an HTTP client whose every request goes to the Unix
// socket at path.
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

// --metrics-addr unix:PATH serves the metrics on a Unix socket of mode
// 0600, in a folder no one else may write; a socket left by a killed
// daemon is taken over, and anything else at the path, or a folder
// others can write, stops serve at start.
func TestMetricsUnixSocket(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o700))
	sock := filepath.Join(dir, "metrics.sock")
	d := startDaemon(t, store, "--metrics-addr", "unix:"+sock, "--log-format", "json")
	fi, err := os.Lstat(sock)
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSocket, fi.Mode().Type())
	assert.Equal(t, fs.FileMode(0o600), fi.Mode().Perm(), "only the owner may connect")
	code, body := get(t, unixClient(sock), metricsURL(t, d), "")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `store="`+store+`"`)

	// A second daemon cannot take the socket in use.
	other := newStore(t)
	out := refusedAtStart(t, other, "--metrics-addr", "unix:"+sock)
	assert.Contains(t, out, "is in use by another process")

	// SIGKILL leaves the socket behind; the next daemon replaces it.
	d.kill(t)
	require.FileExists(t, sock)
	d = startDaemon(t, store, "--metrics-addr", "unix:"+sock, "--log-format", "json")
	code, _ = get(t, unixClient(sock), metricsURL(t, d), "")
	assert.Equal(t, http.StatusOK, code)
	d.stop(t)
	assert.NoFileExists(t, sock, "a clean exit removes the socket")

	// Not a socket: left alone.
	require.NoError(t, os.WriteFile(sock, []byte("mine"), 0o600))
	out = refusedAtStart(t, store, "--metrics-addr", "unix:"+sock)
	assert.Contains(t, out, "is not a socket")
	assert.Equal(t, "mine", readFile(t, sock))

	// A folder others can write: they could swap the socket.
	open := t.TempDir()
	require.NoError(t, os.Chmod(open, 0o777))
	out = refusedAtStart(t, store, "--metrics-addr", "unix:"+filepath.Join(open, "metrics.sock"))
	assert.Contains(t, out, "socket folder: refusing "+open)
	assert.Contains(t, out, "world-writable")
	assert.NoFileExists(t, filepath.Join(open, "metrics.sock"))
}

// The Prometheus scrape configs of docs/running.md are valid YAML that
// sends the token as docs/security.md says (authorization, type Bearer,
// credentials_file) to the ports of the doc's daemons, and, where
// promtool is installed, valid Prometheus configs.
func TestRunningDocPrometheusConfig(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "docs", "running.md"))
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	require.Len(t, blocks, 2, "the scrape config of one daemon, and of two")
	promtool, lookErr := exec.LookPath("promtool")
	for i, m := range blocks {
		doc := m[1]
		var cfg struct {
			ScrapeConfigs []struct {
				JobName       string `yaml:"job_name"`
				Authorization struct {
					Type            string `yaml:"type"`
					CredentialsFile string `yaml:"credentials_file"`
				} `yaml:"authorization"`
				StaticConfigs []struct {
					Targets []string          `yaml:"targets"`
					Labels  map[string]string `yaml:"labels"`
				} `yaml:"static_configs"`
			} `yaml:"scrape_configs"`
		}
		dec := yaml.NewDecoder(strings.NewReader(doc))
		dec.KnownFields(true)
		require.NoError(t, dec.Decode(&cfg), doc)
		require.Len(t, cfg.ScrapeConfigs, 1, doc)
		sc := cfg.ScrapeConfigs[0]
		assert.Equal(t, "Bearer", sc.Authorization.Type, doc)
		assert.NotEmpty(t, sc.Authorization.CredentialsFile, doc)
		require.NotEmpty(t, sc.StaticConfigs, doc)
		assert.Equal(t, []string{"127.0.0.1:9464"}, sc.StaticConfigs[0].Targets, "the port of the doc's serve command")

		if lookErr != nil {
			continue
		}
		// promtool wants the credentials file to exist.
		token := writeToken(t, t.TempDir(), "s3cret", 0o600)
		file := filepath.Join(t.TempDir(), fmt.Sprintf("prometheus-%d.yml", i))
		require.NoError(t, os.WriteFile(file, []byte(strings.ReplaceAll(doc, sc.Authorization.CredentialsFile, token)), 0o600))
		out, err := exec.Command(promtool, "check", "config", file).CombinedOutput()
		assert.NoError(t, err, "promtool check config:\n%s", out)
	}
	if lookErr != nil {
		t.Skip("promtool is not on PATH (Debian: apt-get install prometheus): the configs were checked as YAML only")
	}
}
