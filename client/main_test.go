package client_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/embednats"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/daemon"
)

// holdEnv makes the test binary, run again, hold a store's lock as
// another scribe process would (see holdStore).
const holdEnv = "SCRIBE_CLIENT_TEST_HOLD"

// daemonEnv makes the test binary, run again, serve a store as a daemon
// of its own (see spawnDaemon); daemonSyncEnv is its queue's sync
// interval ("" or "always": every write).
const (
	daemonEnv     = "SCRIBE_CLIENT_TEST_DAEMON"
	daemonSyncEnv = "SCRIBE_CLIENT_TEST_DAEMON_SYNC"
)

func TestMain(m *testing.M) {
	if store := os.Getenv(holdEnv); store != "" {
		os.Exit(hold(store))
	}
	if store := os.Getenv(daemonEnv); store != "" {
		os.Exit(serve(store, os.Getenv(daemonSyncEnv)))
	}
	os.Exit(m.Run())
}

// hold holds store's lock as a direct writer named "nightly-import",
// says "held", and lets go when its stdin closes.
func hold(store string) int {
	s, err := writer.Open(context.Background(), store, writer.Options{Mode: queue.ModeDirect, Command: "nightly-import"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Close()
	return 0
}

// holdStore makes another process hold store's lock until the returned
// func is called (the process then exits). A process of its own, because
// a direct write joins a hold of its own process.
func holdStore(store string) (release func(), err error) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), holdEnv+"="+store)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	release = func() {
		stdin.Close()
		_ = cmd.Wait()
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "held\n" {
		release()
		return nil, fmt.Errorf("holder did not take the lock: %q %v", line, err)
	}
	return release, nil
}

// mustHoldStore is holdStore for tests.
func mustHoldStore(t testing.TB, store string) (release func()) {
	t.Helper()
	release, err := holdStore(store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return release
}

// startDaemon runs a real daemon for store in this process: the daemon
// lock, the embedded server and a writer, announced in the discovery file.
func startDaemon(t *testing.T, store string) {
	t.Helper()
	startDaemonVia(t, store, nil)
}

// startDaemonVia is startDaemon, returning the server; via, if not nil,
// is given the server's address and returns the one to announce in the
// discovery file (a relay's).
func startDaemonVia(t *testing.T, store string, via func(addr string) string) *embednats.Server {
	t.Helper()
	ctx := t.Context()
	lk, err := discovery.Take(ctx, store, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Close() })
	srv, err := embednats.Start(ctx, lk, embednats.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	w, err := daemon.NewWriter(ctx, daemon.WriterConfig{Store: store, Conn: srv.Conn(), Settings: daemon.Settings{IdleRelease: 50 * time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Close() })
	d := srv.Discovery()
	if via != nil {
		u, err := url.Parse(d.URL)
		require.NoError(t, err)
		d.URL = "tls://" + via(u.Host)
	}
	require.NoError(t, lk.Announce(&d))
	return srv
}

// serve runs a real daemon for store (daemon lock, embedded server,
// writer), says "ready" once it is announced, and stops when its stdin
// closes.
func serve(store, sync string) int {
	ctx := context.Background()
	var interval time.Duration
	if sync != "" && sync != "always" {
		d, err := time.ParseDuration(sync)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		interval = d
	}
	lk, err := discovery.Take(ctx, store, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer lk.Close()
	srv, err := embednats.Start(ctx, lk, embednats.Config{SyncInterval: interval})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	w, err := daemon.NewWriter(ctx, daemon.WriterConfig{Store: store, Conn: srv.Conn()})
	if err == nil {
		err = w.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer w.Close()
	d := srv.Discovery()
	if err := lk.Announce(&d); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// spawnDaemon runs a daemon for store in a process of its own (serve),
// so that this process's CPU time and allocations are the client's
// alone. It is stopped at cleanup; its pid is returned. The process is
// this test binary, or the one SCRIBE_BENCH_DAEMON names (another build
// of it: to compare two clients against the same daemon).
func spawnDaemon(tb testing.TB, store, sync string) int {
	tb.Helper()
	bin := os.Args[0]
	if b := os.Getenv("SCRIBE_BENCH_DAEMON"); b != "" {
		bin = b
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), daemonEnv+"="+store, daemonSyncEnv+"="+sync)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		tb.Fatalf("daemon did not start: %q %v", line, err)
	}
	return cmd.Process.Pid
}
