package client_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
)

// holdEnv makes the test binary, run again, hold a store's lock as
// another scribe process would (see holdStore).
const holdEnv = "SCRIBE_CLIENT_TEST_HOLD"

func TestMain(m *testing.M) {
	if store := os.Getenv(holdEnv); store != "" {
		os.Exit(hold(store))
	}
	os.Exit(m.Run())
}

// hold holds store's lock as a direct writer named "nightly-import",
// says "held", and lets go when its stdin closes.
func hold(store string) int {
	s, err := writer.OpenSession(store, writer.SessionOptions{Mode: queue.ModeDirect, Command: "nightly-import"})
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
