package daemon_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/internal/fault"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// A holder is this test binary re-executed with envHold set to a store:
// another process that holds the store lock (a flock taken in this process
// would be nested by the hold registry instead of refused) until its
// stdin reaches EOF.
const (
	envHold    = "SCRIBE_DAEMON_TEST_HOLD"    // the store
	envCommand = "SCRIBE_DAEMON_TEST_COMMAND" // its lock.Options.Command
)

func TestMain(m *testing.M) {
	if store := os.Getenv(envHold); store != "" {
		os.Exit(hold(store, os.Getenv(envCommand)))
	}
	os.Exit(m.Run())
}

// hold is the holder process: it takes the store lock, says so, and
// keeps it until stdin reaches EOF.
func hold(store, command string) int {
	h, err := lock.Acquire(context.Background(), store, lock.Options{Command: command})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := h.Unlock(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// holder is a running holder process.
type holder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan error
	stop   sync.Once
}

// holdInChild has another process take the store lock, as o.Command,
// and hold it until Stop or the end of the test.
func holdInChild(tb testing.TB, store string, o lock.Options) *holder {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SCRIBE_") { // never inherit a hold from whatever runs the tests
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, envHold+"="+store, envCommand+"="+o.Command, "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0 exitcode=66")
	stdin, err := cmd.StdinPipe()
	require.NoError(tb, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(tb, err)
	require.NoError(tb, cmd.Start())
	h := &holder{cmd: cmd, stdin: stdin, exited: make(chan error, 1)}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, stdout)
		h.exited <- cmd.Wait()
	}()
	tb.Cleanup(func() { h.Stop(tb) })
	select {
	case line := <-lines:
		require.Equal(tb, "held\n", line, "the holder could not take the store")
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		require.FailNow(tb, "the holder did not report")
	}
	return h
}

// Stop closes the holder's stdin, so that it releases the store, and
// waits for it to exit 0.
func (h *holder) Stop(tb testing.TB) {
	tb.Helper()
	h.stop.Do(func() {
		_ = h.stdin.Close()
		select {
		case err := <-h.exited:
			assert.NoError(tb, err)
		case <-time.After(20 * time.Second):
			_ = h.cmd.Process.Kill()
			assert.Fail(tb, "the holder did not exit")
		}
	})
}

// applyThenDie applies job as a batch of one and lets go of the store as
// a writer SIGKILLed right after answering would: the batch's intent left
// standing, named by the settled mark. Unless marked, it dies a moment
// earlier, with the files on disk but the mark not yet written: the
// outcome stays provisional until a holder redoes the batch. Closing the
// session would drop the intent; the journal and the mark are put back as
// they were, in place, as a killed process leaves them.
func applyThenDie(store string, job *queue.Job, marked bool) error {
	s, err := writer.Open(context.Background(), store, writer.Options{Mode: queue.ModeDaemon})
	if err != nil {
		return err
	}
	mark := queue.Layout{Root: s.Store()}.Settled()
	before, beforeErr := os.ReadFile(mark)
	if _, err := s.Apply([]writer.Entry{{Job: job}}); err != nil {
		return err
	}
	files := map[string][]byte{}
	for _, p := range []string{journal.Path(s.Store()), mark} {
		if files[p], err = os.ReadFile(p); err != nil {
			return err
		}
	}
	if !marked {
		files[mark] = before
		if beforeErr != nil {
			files[mark] = nil
		}
	}
	if err := s.Close(); err != nil {
		return err
	}
	for p, b := range files {
		if b == nil {
			if err := os.Remove(p); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// recordUnfitted records o in the store's journal as a version that did
// not bound outcomes would have: as it is, however large, written into
// the journal's outcomes bucket and its by_time index under the store
// lock.
func recordUnfitted(store string, o *queue.Outcome) error {
	s, err := writer.Open(context.Background(), store, writer.Options{Mode: queue.ModeDaemon})
	if err != nil {
		return err
	}
	real := s.Store()
	if err := s.Close(); err != nil {
		return err
	}
	h, err := lock.Acquire(context.Background(), store, lock.Options{})
	if err != nil {
		return err
	}
	defer h.Unlock()
	v, err := queue.EncodeOutcome(o)
	if err != nil {
		return err
	}
	db, err := bolt.Open(journal.Path(real), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("outcomes")).Put([]byte(o.ID), v); err != nil {
			return err
		}
		at := binary.BigEndian.AppendUint64(nil, uint64(o.At.UnixNano()))
		return tx.Bucket([]byte("by_time")).Put(append(at, o.ID...), nil)
	})
}

// failSpools makes the next n output spools fail to be made with err, as
// a daemon out of descriptors would see; restore undoes it.
func failSpools(n int, err error) (restore func()) {
	var mu sync.Mutex
	fault.SpoolFault = func() error {
		mu.Lock()
		defer mu.Unlock()
		if n > 0 {
			n--
			return fmt.Errorf("command output: memfd_create: %w", err)
		}
		return nil
	}
	return func() { fault.SpoolFault = nil }
}
