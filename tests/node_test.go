package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// nodeExample installs examples/node, as its README says, in a copy of its
// own (npm ci from the committed lock file, the npm cache in the test's
// temporary folder), so that the checkout gets no node_modules. It returns
// the node binary and the copy's folder, and skips where node or npm is
// missing (.ci/run installs both).
func nodeExample(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH: the Node.js example (examples/node) is not run; .ci/run installs nodejs and npm")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not on PATH: the Node.js example (examples/node) cannot be installed; .ci/run installs nodejs and npm")
	}
	src, err := filepath.Abs(filepath.Join("..", "examples", "node"))
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(src, "*.mjs"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	dir = t.TempDir()
	for _, f := range append(files, filepath.Join(src, "package.json"), filepath.Join(src, "package-lock.json")) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--cache", filepath.Join(t.TempDir(), "npm-cache"))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm ci in a copy of examples/node:\n%s", out)
	require.FileExists(t, filepath.Join(dir, "node_modules", "nats", "package.json"))
	return node, dir
}

// nodeOutcome parses what submit.mjs or lookup.mjs printed.
func nodeOutcome(t *testing.T, r result) *queue.Outcome {
	t.Helper()
	var o queue.Outcome
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &o), "stdout %q, stderr %q", r.stdout, r.stderr)
	return &o
}

// The Node.js example speaks the wire protocol to a real daemon: it finds
// it through the discovery file, pins its certificate, queues a job with
// its ID as Nats-Msg-Id, takes only that job's outcome, and looks jobs up
// through the status service. Exit codes are scribe submit's.
func TestNodeExample(t *testing.T) {
	t.Parallel()
	node, dir := nodeExample(t)
	submit, lookup := filepath.Join(dir, "submit.mjs"), filepath.Join(dir, "lookup.mjs")
	store := newStore(t)

	t.Run("no daemon", func(t *testing.T) {
		r := runProgram(t, node, "", submit, "--id", "node-0", store, "append", "notes.txt", "x")
		assert.Equal(t, 69, r.code, r.stderr)
		assert.Contains(t, r.stderr, "no daemon serves")
		assert.NoFileExists(t, filepath.Join(store, "notes.txt"))
	})

	startDaemon(t, store)
	disc, err := queue.ReadDiscovery(store)
	require.NoError(t, err)

	r := runProgram(t, node, "", submit, "--id", "node-1", store, "append", "notes.txt", "hello\n")
	require.Equal(t, 0, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	first := nodeOutcome(t, r)
	assert.Equal(t, "node-1", first.ID)
	assert.Equal(t, queue.StatusApplied, first.Status)
	assert.Equal(t, queue.ModeDaemon, first.Mode)
	assert.Positive(t, first.Seq)
	// The outcome carries the digest of the job the daemon decoded; the
	// example took it as its own, so its digest agrees with Go's.
	job := queue.Job{ID: "node-1", Store: disc.StoreID, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "notes.txt", Data: []byte("hello\n")}}}
	assert.Equal(t, job.Digest(), first.Digest)
	assert.Equal(t, "hello\n", readFile(t, filepath.Join(store, "notes.txt")))

	t.Run("a retry applies nothing again", func(t *testing.T) {
		r := runProgram(t, node, "", submit, "--id", "node-1", store, "append", "notes.txt", "hello\n")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, first, nodeOutcome(t, r), "the recorded outcome")
		assert.Equal(t, "hello\n", readFile(t, filepath.Join(store, "notes.txt")), "applied exactly once")
	})

	t.Run("lookup", func(t *testing.T) {
		r := runProgram(t, node, "", lookup, store, "node-1")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, first, nodeOutcome(t, r))
		assert.Equal(t, first.Seq, outcomeOf(t, store, "node-1").Seq, "what scribe status reads")

		r = runProgram(t, node, "", lookup, store, "never-queued")
		assert.Equal(t, 1, r.code, r.stderr)
		assert.Contains(t, r.stderr, "no outcome recorded")
		var l queue.Lookup
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &l), r.stdout)
		assert.False(t, l.Found)
	})

	t.Run("rejected", func(t *testing.T) {
		r := runProgram(t, node, "", submit, "--id", "node-bad", store, "append", "../x", "z")
		assert.Equal(t, 1, r.code, r.stderr)
		assert.Contains(t, r.stderr, "job node-bad rejected (path_escapes)")
		o := nodeOutcome(t, r)
		assert.Equal(t, queue.StatusRejected, o.Status)
		assert.Equal(t, queue.ReasonPathEscapes, o.Reason)
		assert.NoFileExists(t, filepath.Join(filepath.Dir(store), "x"))
	})

	t.Run("id conflict", func(t *testing.T) {
		r := runProgram(t, node, "", submit, "--id", "node-1", store, "append", "notes.txt", "something else\n")
		assert.Equal(t, 1, r.code, r.stderr)
		assert.Contains(t, r.stderr, "rejected (id_conflict)")
		assert.Equal(t, "hello\n", readFile(t, filepath.Join(store, "notes.txt")))
	})

	t.Run("bytes from stdin", func(t *testing.T) {
		data := "\xff\x00 not UTF-8\n"
		r := runProgram(t, node, data, submit, "--id", "node-bin", store, "put", "bin.dat", "-")
		require.Equal(t, 0, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
		assert.Equal(t, data, readFile(t, filepath.Join(store, "bin.dat")))
	})

	t.Run("usage", func(t *testing.T) {
		r := runProgram(t, node, "", submit, store, "append")
		assert.Equal(t, 2, r.code, r.stderr)
		r = runProgram(t, node, "", submit, "--id", "bad id!", store, "append", "f", "x")
		assert.Equal(t, 2, r.code, r.stderr)
	})

	// A daemon.json that names a server speaking plain NATS (its INFO in
	// clear; it takes any credentials and would forge outcomes): the
	// example begins with TLS, so that server gets a ClientHello and
	// nothing else, no CONNECT and no password, and the example exits 75.
	t.Run("impostor speaking plain NATS", func(t *testing.T) {
		t.Cleanup(func() { writeDiscovery(t, store, disc) })
		im := startImpostor(t, "127.0.0.1:0", disc.StoreID, nil)
		fake := *disc
		fake.URL = "tls://" + im.Addr()
		writeDiscovery(t, store, &fake)

		r := runProgram(t, node, "", submit, "--id", "node-imp", store, "append", "imp.txt", "x")
		assert.Equal(t, 75, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
		assert.Contains(t, r.stderr, "cannot reach the daemon at "+fake.URL)
		r = runProgram(t, node, "", lookup, store, "node-1")
		assert.Equal(t, 75, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
		assert.Positive(t, im.Connections(), "the example tried the impostor")
		onlyClientHellos(t, im.Relay, disc.Password)
		assert.False(t, im.leaked(disc.Password), "the impostor got the password: %s", im.heard())
		assert.False(t, im.leaked("node-imp"), "the impostor got the job: %s", im.heard())
		assert.NoFileExists(t, filepath.Join(store, "imp.txt"))
	})

	// While the example waits for its outcome, another submitter makes
	// JetStream publish a PubAck onto that outcome subject: the example
	// takes only a version-1 outcome of its own job.
	t.Run("stray messages on the outcome subject", func(t *testing.T) {
		release := holdWithFlock(t, queue.Layout{Root: store}.Lock())
		var stdout, stderr bytes.Buffer
		victim := exec.Command(node, submit, "--id", "node-victim", store, "append", "victim.txt", "mine\n")
		victim.Stdout, victim.Stderr = &stdout, &stderr
		require.NoError(t, victim.Start())
		exited := make(chan struct{})
		go func() { _ = victim.Wait(); close(exited) }()
		t.Cleanup(func() { _ = victim.Process.Kill(); <-exited })

		s := connectSubmitter(t, store)
		require.Eventually(t, func() bool { return s.queued(t) == 1 }, 30*time.Second, 20*time.Millisecond, "the example's job is queued")
		target := queue.OutcomeSubject(disc.StoreID, "node-victim")
		require.NoError(t, s.nc.PublishMsg(&nats.Msg{Subject: queue.JobsSubject(disc.StoreID), Reply: target,
			Data: rawJob(t, disc.StoreID, "node-stray", queue.Op{Kind: queue.OpAppend, Path: "stray.txt", Data: []byte("x")})}))
		require.Eventually(t, func() bool { return s.queued(t) == 2 }, 10*time.Second, 20*time.Millisecond)
		require.NoError(t, s.nc.Flush())
		release()
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			t.Fatal("the example did not finish")
		}
		require.Equal(t, 0, victim.ProcessState.ExitCode(), "stdout %s\nstderr %s", stdout.String(), stderr.String())
		o := nodeOutcome(t, result{stdout: stdout.String(), stderr: stderr.String()})
		assert.Equal(t, "node-victim", o.ID)
		assert.Equal(t, queue.StatusApplied, o.Status)
		assert.Equal(t, "mine\n", readFile(t, filepath.Join(store, "victim.txt")))
	})
}

// A full queue, as nats.js sees it: the publish fails with code "503",
// like "no responders", and only its JetStream API error (10077, "maximum
// messages exceeded") says the queue is full. The example exits 75 and
// queues nothing; the jobs queued before are applied once the store is
// free.
func TestNodeExampleQueueFull(t *testing.T) {
	t.Parallel()
	node, dir := nodeExample(t)
	submit, lookup := filepath.Join(dir, "submit.mjs"), filepath.Join(dir, "lookup.mjs")
	store := newStore(t)
	startDaemon(t, store, "--max-jobs", "1")
	release := holdWithFlock(t, queue.Layout{Root: store}.Lock())

	r := runProgram(t, node, "", submit, "--id", "full-1", "--wait", "1", store, "append", "f.txt", "1\n")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, "job full-1: no outcome yet")
	r = runProgram(t, node, "", submit, "--id", "full-2", "--wait", "1", store, "append", "f.txt", "2\n")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, "queue full (maximum messages exceeded); nothing was queued")

	release()
	require.Eventually(t, func() bool {
		r := runProgram(t, node, "", lookup, store, "full-1")
		return r.code == 0 && nodeOutcome(t, r).Status == queue.StatusApplied
	}, 30*time.Second, 100*time.Millisecond)
	r = runProgram(t, node, "", lookup, store, "full-2")
	assert.Equal(t, 1, r.code, "the refused job was never queued: %s", r.stdout)
	assert.Equal(t, "1\n", readFile(t, filepath.Join(store, "f.txt")))
}
