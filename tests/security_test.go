package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
)

// submitter is a NATS connection with the credentials a daemon hands to
// submitters (its discovery file), recording the errors the server reports
// asynchronously, such as permissions violations.
type submitter struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	disc *queue.Discovery

	mu    sync.Mutex
	async []error
}

// pinned is the TLS a submitter needs to reach the daemon disc names: TLS
// first, its certificate as the only root, checked by fingerprint
// (docs/protocol.md).
func pinned(t testing.TB, disc *queue.Discovery) nats.Option {
	t.Helper()
	o, err := disc.Pinned()
	require.NoError(t, err)
	return o
}

func connectSubmitter(t testing.TB, store string) *submitter {
	t.Helper()
	disc, err := queue.ReadDiscovery(store)
	require.NoError(t, err)
	s := &submitter{disc: disc}
	s.nc, err = nats.Connect(disc.URL, pinned(t, disc), nats.UserInfo(disc.User, disc.Password),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.async = append(s.async, err)
		}))
	require.NoError(t, err)
	t.Cleanup(s.nc.Close)
	s.js, err = jetstream.New(s.nc)
	require.NoError(t, err)
	return s
}

// violation reports whether the server refused an operation on subject
// as a permissions violation.
func (s *submitter) violation(subject string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, err := range s.async {
		if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), fmt.Sprintf("%q", subject)) {
			return true
		}
	}
	return false
}

// rawJob is the wire form of a job built without the client's checks, as
// any NATS client could send it.
func rawJob(t testing.TB, storeID, id string, ops ...queue.Op) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"v": queue.Version, "id": id, "store": storeID, "ops": ops})
	require.NoError(t, err)
	return b
}

// publish queues raw bytes as a job.
func (s *submitter) publish(t testing.TB, id string, body []byte) {
	t.Helper()
	_, err := queue.Publish(t.Context(), s.js, s.disc.StoreID, queue.JobsSubject(s.disc.StoreID), id, body)
	require.NoError(t, err, "queue %s", id)
}

// outcome waits for a job's recorded outcome, asking the status service.
func (s *submitter) outcome(t testing.TB, id string) *queue.Outcome {
	t.Helper()
	var l queue.Lookup
	require.Eventually(t, func() bool {
		m, err := s.nc.Request(queue.StatusSubject(s.disc.StoreID), []byte(id), 2*time.Second)
		return err == nil && json.Unmarshal(m.Data, &l) == nil && l.Found
	}, 30*time.Second, 20*time.Millisecond, "outcome of %s", id)
	return l.Outcome
}

// queued is the number of jobs in the store's queue, from the status
// service.
func (s *submitter) queued(t testing.TB) uint64 {
	t.Helper()
	m, err := s.nc.Request(queue.StatusSubject(s.disc.StoreID), nil, 5*time.Second)
	require.NoError(t, err)
	var r queue.StatusReport
	require.NoError(t, json.Unmarshal(m.Data, &r))
	return r.Queued
}

// treeSnapshot records every entry under dir but the top-level names in
// skip: its mode and its content or symlink target, to compare byte for
// byte.
func treeSnapshot(t testing.TB, dir string, skip ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		for _, s := range skip {
			if rel == s {
				return filepath.SkipDir
			}
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			v += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if len(b) > 256 { // keep a failure's diff readable
				v += fmt.Sprintf(" %d bytes sha256:%x", len(b), sha256.Sum256(b))
			} else {
				v += fmt.Sprintf(" %q", b)
			}
		}
		out[rel] = v
		return nil
	}))
	return out
}

// outsideTree makes a folder next to the store holding files an attacker
// would like to change.
func outsideTree(t testing.TB, store string) string {
	t.Helper()
	outside := filepath.Join(filepath.Dir(store), "outside")
	require.NoError(t, os.MkdirAll(filepath.Join(outside, "sub"), 0o755))
	for name, content := range map[string]string{
		"victim.txt":    "precious\n",
		"doc.json":      `{"keep":true}`,
		"sub/inner.txt": "inner\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(outside, name), []byte(content), 0o644))
	}
	return outside
}

// The listener is on 127.0.0.1 only, connecting needs the
// credentials of the owner-only discovery file, and they change with every
// start.
func TestDaemonListenerAndCredentials(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemon(t, store)
	disc, err := queue.ReadDiscovery(store)
	require.NoError(t, err)

	u, err := url.Parse(disc.URL)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", u.Hostname(), "listener URL %s", disc.URL)
	assert.Equal(t, "tls", u.Scheme, "every network client speaks TLS")
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() {
			continue
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ipn.IP.String(), u.Port()), time.Second)
		if err == nil {
			c.Close()
		}
		assert.Error(t, err, "the daemon must not answer on %s", ipn.IP)
	}

	for path, want := range map[string]fs.FileMode{
		filepath.Join(store, queue.MetaDir):   fs.ModeDir | 0o700,
		queue.Layout{Root: store}.Discovery(): 0o600,
	} {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, want.String(), fi.Mode().String(), path)
	}

	refused := []struct {
		name string
		opts []nats.Option
	}{
		{"no credentials", nil},
		{"wrong password", []nats.Option{nats.UserInfo(disc.User, "not-"+disc.Password)}},
		{"no password", []nats.Option{nats.UserInfo(disc.User, "")}},
		{"the daemon's user", []nats.Option{nats.UserInfo("daemon", disc.Password)}},
	}
	for _, c := range refused {
		t.Run("refused/"+c.name, func(t *testing.T) {
			nc, err := nats.Connect(disc.URL, append(c.opts, pinned(t, disc), nats.MaxReconnects(0))...)
			if nc != nil {
				nc.Close()
			}
			assert.ErrorIs(t, err, nats.ErrAuthorization)
		})
	}

	// A restarted daemon hands out new credentials; the old ones are dead.
	d.stop(t)
	startDaemon(t, store)
	again, err := queue.ReadDiscovery(store)
	require.NoError(t, err)
	assert.NotEqual(t, disc.Password, again.Password)
	assert.NotEqual(t, disc.TLSCertSHA256, again.TLSCertSHA256, "a new certificate on every start")
	_, err = nats.Connect(again.URL, pinned(t, disc), nats.UserInfo(again.User, again.Password), nats.MaxReconnects(0))
	var cv *tls.CertificateVerificationError
	assert.ErrorAs(t, err, &cv, "the previous daemon's certificate does not verify the new one")
	nc, err := nats.Connect(again.URL, pinned(t, again), nats.UserInfo(disc.User, disc.Password), nats.MaxReconnects(0))
	if nc != nil {
		nc.Close()
	}
	assert.ErrorIs(t, err, nats.ErrAuthorization, "the previous daemon's credentials")
	nc, err = nats.Connect(again.URL, pinned(t, again), nats.UserInfo(again.User, again.Password))
	require.NoError(t, err)
	nc.Close()
}

// With the submitters' credentials, nothing can delete, purge
// or inspect the queue, read the jobs, or reach another store; the daemon
// cannot be made to do it either; and the queue keeps working.
func TestSubmitterCannotManageQueue(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	release := holdWithFlock(t, queue.Layout{Root: store}.Lock())
	const secret = "SECRET-7f3a"
	r := scribe(t, "", "submit", "--store", store, "--id", "queued-1", "append", "f.txt", "queued "+secret+"\n")
	require.Equal(t, 0, r.code, r.stderr)

	s := connectSubmitter(t, store)
	spy, err := s.nc.SubscribeSync("_INBOX.>") // allowed: replies arrive there
	require.NoError(t, err)
	require.Equal(t, uint64(1), s.queued(t), "the job waits in the queue")
	id := s.disc.StoreID
	stream := queue.StreamName(id)
	api := "$JS.API."

	attempts := []struct {
		name    string
		do      func(ctx context.Context) error
		subject string // the subject the server refuses
		callErr bool   // the call itself fails too (a request that gets no answer)
	}{
		{"delete the stream", func(ctx context.Context) error { return s.js.DeleteStream(ctx, stream) },
			api + "STREAM.DELETE." + stream, true},
		{"purge the stream", func(ctx context.Context) error {
			_, err := s.nc.RequestWithContext(ctx, api+"STREAM.PURGE."+stream, nil)
			return err
		}, api + "STREAM.PURGE." + stream, true},
		{"read stream info", func(ctx context.Context) error { _, err := s.js.Stream(ctx, stream); return err },
			api + "STREAM.INFO." + stream, true},
		{"update the stream", func(ctx context.Context) error {
			_, err := s.js.UpdateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{queue.JobsSubject(id)}, MaxMsgs: 1})
			return err
		}, api + "STREAM.UPDATE." + stream, true},
		{"delete the consumer", func(ctx context.Context) error { return s.js.DeleteConsumer(ctx, stream, queue.ConsumerName) },
			api + "CONSUMER.DELETE." + stream + "." + queue.ConsumerName, true},
		{"read consumer info", func(ctx context.Context) error { _, err := s.js.Consumer(ctx, stream, queue.ConsumerName); return err },
			api + "CONSUMER.INFO." + stream + "." + queue.ConsumerName, true},
		{"create a consumer to read the jobs", func(ctx context.Context) error {
			_, err := s.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Name: "spy"})
			return err
		}, api + "CONSUMER.CREATE." + stream + ".spy", true},
		{"read account info", func(ctx context.Context) error { _, err := s.js.AccountInfo(ctx); return err },
			api + "INFO", true},
		{"subscribe to the jobs subject", func(context.Context) error {
			_, err := s.nc.SubscribeSync(queue.JobsSubject(id))
			return errors.Join(err, s.nc.Flush())
		}, queue.JobsSubject(id), false},
		{"subscribe to another store", func(context.Context) error {
			_, err := s.nc.SubscribeSync("scribe.otherid.>")
			return errors.Join(err, s.nc.Flush())
		}, "scribe.otherid.>", false},
		{"subscribe to everything", func(context.Context) error {
			_, err := s.nc.SubscribeSync(">")
			return errors.Join(err, s.nc.Flush())
		}, ">", false},
		{"queue a job for another store", func(context.Context) error {
			return errors.Join(s.nc.Publish("scribe.otherid.jobs", []byte("{}")), s.nc.Flush())
		}, "scribe.otherid.jobs", false},
		{"publish a forged outcome", func(context.Context) error {
			return errors.Join(s.nc.Publish(queue.OutcomeSubject(id, "queued-1"), []byte(`{"v":1}`)), s.nc.Flush())
		}, queue.OutcomeSubject(id, "queued-1"), false},
		{"ask the daemon's service endpoints", func(ctx context.Context) error {
			_, err := s.nc.RequestWithContext(ctx, "$SRV.INFO", nil)
			return err
		}, "$SRV.INFO", true},
	}
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			err := a.do(ctx)
			if a.callErr {
				assert.Error(t, err)
			}
			assert.Eventually(t, func() bool { return s.violation(a.subject) }, 5*time.Second, 10*time.Millisecond,
				"no permissions violation for %s", a.subject)
		})
	}

	t.Run("roll the stream up", func(t *testing.T) {
		// A rollup header on a job would purge the stream on publish.
		msg := nats.NewMsg(queue.JobsSubject(id))
		msg.Data = rawJob(t, id, "rollup-1", queue.Op{Kind: queue.OpPut, Path: "r.txt", Data: []byte("x")})
		msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
		_, err := s.js.PublishMsg(t.Context(), msg)
		assert.ErrorContains(t, err, "rollup")
	})

	t.Run("make the status service publish elsewhere", func(t *testing.T) {
		// The reply subject is the requester's choice; the daemon's
		// connection may publish anywhere. It must answer only into inboxes.
		watch, err := s.nc.SubscribeSync(queue.OutcomeSubject(id, "victim"))
		require.NoError(t, err)
		for _, reply := range []string{
			queue.OutcomeSubject(id, "victim"),
			api + "STREAM.PURGE." + stream,
			api + "CONSUMER.DELETE." + stream + "." + queue.ConsumerName,
			queue.JobsSubject(id),
		} {
			require.NoError(t, s.nc.PublishRequest(queue.StatusSubject(id), reply, nil))
			require.NoError(t, s.nc.PublishRequest(queue.StatusSubject(id), reply, []byte("queued-1")))
			// Nor does the writer cancel a job for an answer it would send there.
			require.NoError(t, s.nc.PublishRequest(queue.CancelSubject(id), reply, []byte(`{"id":"queued-1"}`)))
		}
		// The service answers in order: once a real request is answered,
		// any answer to the ones above has reached this connection.
		s.queued(t)
		_, err = watch.NextMsg(50 * time.Millisecond)
		assert.ErrorIs(t, err, nats.ErrTimeout, "the status service answered onto an outcome subject")
	})

	t.Run("point the queue's own answer at its API", func(t *testing.T) {
		// JetStream acks a publish on its reply subject, whoever is there.
		msg := &nats.Msg{Subject: queue.JobsSubject(id), Reply: api + "STREAM.PURGE." + stream,
			Data: rawJob(t, id, "ack-purge-1", queue.Op{Kind: queue.OpAppend, Path: "f.txt", Data: []byte("ack-purge " + secret + "\n")})}
		require.NoError(t, s.nc.PublishMsg(msg))
		require.Eventually(t, func() bool { return s.queued(t) == 2 }, 10*time.Second, 20*time.Millisecond,
			"the queue must still hold both jobs")
	})

	assert.Equal(t, uint64(2), s.queued(t), "nothing was purged")
	release()
	for _, job := range []string{"queued-1", "ack-purge-1"} {
		o := s.outcome(t, job)
		assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s %s", job, o.Reason, o.Detail)
	}
	ok := scribe(t, "", "submit", "--store", store, "--wait", "append", "f.txt", "after "+secret+"\n")
	assert.Equal(t, 0, ok.code, ok.stderr)
	assert.Equal(t, "queued "+secret+"\nack-purge "+secret+"\nafter "+secret+"\n", readFile(t, filepath.Join(store, "f.txt")))

	// Two jobs went to the daemon while a submitter listened on every
	// inbox: it saw neither.
	require.NoError(t, s.nc.Flush())
	for {
		m, err := spy.NextMsg(50 * time.Millisecond)
		if err != nil {
			require.ErrorIs(t, err, nats.ErrTimeout)
			break
		}
		assert.NotContains(t, string(m.Data), secret, "a submitter read a job on %s", m.Subject)
	}
}

// A submitter cannot make another caller believe its job was rejected:
// what reaches a job's outcome subject but is not its outcome is ignored.
func TestForgedOutcomesIgnored(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	release := holdWithFlock(t, queue.Layout{Root: store}.Lock())

	victim := exec.Command(scribeBin, "submit", "--store", store, "--wait", "--json", "--id", "victim-1", "append", "v.txt", "victim\n")
	victim.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=")
	var stdout, stderr bytes.Buffer
	victim.Stdout, victim.Stderr = &stdout, &stderr
	require.NoError(t, victim.Start())
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = victim.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = victim.Process.Kill()
		<-exited
	})

	s := connectSubmitter(t, store)
	id := s.disc.StoreID
	// Once the victim's job is queued, the victim listens for its outcome.
	require.Eventually(t, func() bool { return s.queued(t) == 1 }, 30*time.Second, 20*time.Millisecond)
	target := queue.OutcomeSubject(id, "victim-1")
	// JetStream's publish ack, and the status service's answer, sent where
	// the victim listens.
	require.NoError(t, s.nc.PublishMsg(&nats.Msg{Subject: queue.JobsSubject(id), Reply: target,
		Data: rawJob(t, id, "attacker-1", queue.Op{Kind: queue.OpAppend, Path: "a.txt", Data: []byte("a\n")})}))
	require.NoError(t, s.nc.PublishRequest(queue.StatusSubject(id), target, nil))
	require.Eventually(t, func() bool { return s.queued(t) == 2 }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, s.nc.Flush())

	release()
	select {
	case <-exited:
		assert.NoError(t, waitErr, "victim: %s", stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("the victim's submit did not finish")
	}
	var o queue.Outcome
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &o), "stdout %q, stderr %q", stdout.String(), stderr.String())
	assert.Equal(t, "victim-1", o.ID)
	assert.Equal(t, queue.StatusApplied, o.Status)
	assert.Equal(t, "victim\n", readFile(t, filepath.Join(store, "v.txt")))
}

// Hostile paths, sent raw so that only the daemon judges
// them, are each rejected with their reason, and nothing outside the store
// (nor inside it) changes.
func TestHostilePathsThroughDaemon(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	outside := outsideTree(t, store)
	// Held from the first batch to the last check: the lock file, hard
	// linked in as "hl", keeps the identity the snapshots saw.
	startDaemon(t, store, "--idle-release", "1h")
	s := connectSubmitter(t, store)
	id := s.disc.StoreID

	// A first job makes the writer create its lock and journal, which some
	// cases link to.
	s.publish(t, "warm-up", rawJob(t, id, "warm-up", queue.Op{Kind: queue.OpPut, Path: "plain.txt", Data: []byte("plain\n")}))
	require.Equal(t, queue.StatusApplied, s.outcome(t, "warm-up").Status)

	in := func(p string) string { return filepath.Join(store, p) }
	require.NoError(t, os.Mkdir(in("adir"), 0o755))
	require.NoError(t, os.Symlink(outside, in("out")))
	require.NoError(t, os.Symlink("../outside", in("up")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "victim.txt"), in("v.txt")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "created.txt"), in("dangling")))
	require.NoError(t, os.Symlink("/dev/null", in("null")))
	require.NoError(t, os.Symlink(queue.MetaDir, in("meta")))
	require.NoError(t, os.Symlink(filepath.Join(queue.MetaDir, "journal.db"), in("j")))
	require.NoError(t, os.Link(queue.Layout{Root: store}.Lock(), in("hl")))
	require.NoError(t, syscall.Mkfifo(in("fifo"), 0o644))
	sock, err := net.Listen("unix", in("sock"))
	require.NoError(t, err)
	t.Cleanup(func() { sock.Close() })
	device := syscall.Mknod(in("dev"), syscall.S_IFCHR|0o666, 1<<8|3) == nil // /dev/null's numbers; needs root
	if !device {
		t.Log("cannot make a device file (not root): skipping that case")
	}

	type hostile struct {
		name   string
		kind   queue.OpKind
		path   string
		reason queue.Reason
		skip   bool
	}
	put, app, mrg, del := queue.OpPut, queue.OpAppend, queue.OpMerge, queue.OpDelete
	esc, notReg := queue.ReasonPathEscapes, queue.ReasonNotRegular
	cases := []hostile{
		{"absolute path", put, filepath.Join(outside, "victim.txt"), esc, false},
		{"absolute path, delete", del, filepath.Join(outside, "victim.txt"), esc, false},
		{"dot-dot", put, "../outside/victim.txt", esc, false},
		{"dot-dot, append", app, "../outside/victim.txt", esc, false},
		{"dot-dot, delete", del, "../outside/victim.txt", esc, false},
		{"dot-dot inside", app, "adir/../../outside/victim.txt", esc, false},
		{"backslashes", put, `..\outside\victim.txt`, esc, false},
		{"dot segment", put, "./plain.txt", esc, false},
		{"empty segment", put, "adir//x", esc, false},
		{"empty path", put, "", esc, false},
		{"symlinked folder out of the store", put, "out/victim.txt", esc, false},
		{"symlinked folder, new file", put, "out/new.txt", esc, false},
		{"symlinked folder, deeper", put, "out/sub/inner.txt", esc, false},
		{"symlinked folder, append", app, "out/victim.txt", esc, false},
		{"symlinked folder, merge", mrg, "out/doc.json", esc, false},
		{"symlinked folder, delete", del, "out/victim.txt", esc, false},
		{"relative symlinked folder", app, "up/victim.txt", esc, false},
		{"symlinked file out of the store", put, "v.txt", notReg, false},
		{"symlinked file, append", app, "v.txt", notReg, false},
		{"symlinked file, delete", del, "v.txt", notReg, false},
		{"dangling symlink out of the store", put, "dangling", notReg, false},
		{"symlink to /dev/null", app, "null", notReg, false},
		{".scribe lock", put, ".scribe/lock", esc, false},
		{".scribe journal, delete", del, ".scribe/journal.db", esc, false},
		{".scribe discovery file", put, ".scribe/daemon.json", esc, false},
		{".scribe queue files", put, ".scribe/jetstream/x", esc, false},
		{".scribe itself", del, ".scribe", esc, false},
		{".scribe in upper case", put, ".SCRIBE/lock", esc, false},
		{"symlink to .scribe", put, "meta/lock", esc, false},
		{"symlink to .scribe, delete", del, "meta/daemon.json", esc, false},
		{"symlink to the journal", put, "j", notReg, false},
		{"hard link to the lock", put, "hl", esc, false},
		{"FIFO", put, "fifo", notReg, false},
		{"FIFO, append", app, "fifo", notReg, false},
		{"through a FIFO", put, "fifo/x", notReg, false},
		{"socket", put, "sock", notReg, false},
		{"device file", put, "dev", notReg, !device},
		{"device file, append", app, "dev", notReg, !device},
		{"folder", put, "adir", notReg, false},
		{"through a file", put, "plain.txt/x", notReg, false},
		{"NUL", put, "a\x00b", esc, false},
		{"NUL then dot-dot", put, "a\x00/../../outside/victim.txt", esc, false},
		{"newline", put, "a\nb", esc, false},
		{"carriage return", put, "a\rb", esc, false},
		{"tab", put, "a\tb", esc, false},
		{"escape sequence", put, "\x1b[31mred", esc, false},
		{"DEL", put, "a\x7f", esc, false},
		{"name over 255 bytes", put, strings.Repeat("n", 256), esc, false},
		{"path over 1024 bytes", put, strings.Repeat("abcdefghi/", 103) + "x", esc, false},
		{"scribe's temporary name", put, ".plain.txt.scribe-tmp", esc, false},
	}
	beforeOutside := treeSnapshot(t, outside)
	beforeStore := treeSnapshot(t, store, queue.MetaDir)
	ids := map[string]string{}
	for i, c := range cases {
		if c.skip {
			continue
		}
		jobID := fmt.Sprintf("hostile-%02d", i)
		ids[c.name] = jobID
		s.publish(t, jobID, rawJob(t, id, jobID, queue.Op{Kind: c.kind, Path: c.path, Data: []byte(`{"pwned":true}`)}))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.skip {
				t.Skip("not possible here")
			}
			o := s.outcome(t, ids[c.name])
			assert.Equal(t, queue.StatusRejected, o.Status)
			assert.Equal(t, c.reason, o.Reason, o.Detail)
			assert.NotEmpty(t, o.Detail)
		})
	}
	assert.Equal(t, beforeOutside, treeSnapshot(t, outside), "nothing outside the store may change")
	assert.NoFileExists(t, filepath.Join(outside, "created.txt"))
	assert.Equal(t, beforeStore, treeSnapshot(t, store, queue.MetaDir), "rejected jobs change nothing")

	ok := scribe(t, "", "submit", "--store", store, "--wait", "append", "next.txt", "still working\n")
	assert.Equal(t, 0, ok.code, ok.stderr)
	assert.Equal(t, "still working\n", readFile(t, in("next.txt")))
}

// A folder (or file) swapped for a symlink out of the store
// after the job was queued and before it is applied is caught when the job
// is applied; nothing outside changes.
func TestSymlinkSwappedInWhileQueued(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	outside := outsideTree(t, store)
	in := func(p string) string { return filepath.Join(store, p) }
	require.NoError(t, os.Mkdir(in("data"), 0o755))
	require.NoError(t, os.WriteFile(in("data/victim.txt"), []byte("inside\n"), 0o644))
	require.NoError(t, os.WriteFile(in("g.txt"), []byte("g\n"), 0o644))
	require.NoError(t, os.WriteFile(in("t.txt"), []byte("t\n"), 0o644))
	startDaemon(t, store)
	release := holdWithFlock(t, queue.Layout{Root: store}.Lock())
	s := connectSubmitter(t, store)
	id := s.disc.StoreID

	cases := []struct {
		id     string
		op     queue.Op
		reason queue.Reason
	}{
		{"swap-put", queue.Op{Kind: queue.OpPut, Path: "data/victim.txt", Data: []byte("pwned\n")}, queue.ReasonPathEscapes},
		{"swap-append", queue.Op{Kind: queue.OpAppend, Path: "data/victim.txt", Data: []byte("pwned\n")}, queue.ReasonPathEscapes},
		{"swap-create", queue.Op{Kind: queue.OpPut, Path: "data/new.txt", Data: []byte("pwned\n")}, queue.ReasonPathEscapes},
		{"swap-merge", queue.Op{Kind: queue.OpMerge, Path: "data/doc.json", Data: []byte(`{"keep":false}`)}, queue.ReasonPathEscapes},
		{"swap-delete", queue.Op{Kind: queue.OpDelete, Path: "data/victim.txt"}, queue.ReasonPathEscapes},
		{"swap-deeper", queue.Op{Kind: queue.OpPut, Path: "data/sub/inner.txt", Data: []byte("pwned\n")}, queue.ReasonPathEscapes},
		{"swap-file", queue.Op{Kind: queue.OpPut, Path: "g.txt", Data: []byte("pwned\n")}, queue.ReasonNotRegular},
		{"swap-file-append", queue.Op{Kind: queue.OpAppend, Path: "g.txt", Data: []byte("pwned\n")}, queue.ReasonNotRegular},
		{"changed-type-append", queue.Op{Kind: queue.OpAppend, Path: "t.txt", Data: []byte("more\n")}, queue.ReasonNotRegular},
	}
	for _, c := range cases {
		s.publish(t, c.id, rawJob(t, id, c.id, c.op))
	}
	require.Equal(t, uint64(len(cases)), s.queued(t), "the jobs wait in the queue")

	// While they wait: data/ becomes a symlink out of the store, g.txt a
	// symlink to a file outside, t.txt a folder.
	require.NoError(t, os.Rename(in("data"), in("data.moved")))
	require.NoError(t, os.Symlink(outside, in("data")))
	require.NoError(t, os.Remove(in("g.txt")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "victim.txt"), in("g.txt")))
	require.NoError(t, os.Remove(in("t.txt")))
	require.NoError(t, os.Mkdir(in("t.txt"), 0o755))
	beforeOutside := treeSnapshot(t, outside)
	beforeStore := treeSnapshot(t, store, queue.MetaDir)

	release()
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			o := s.outcome(t, c.id)
			assert.Equal(t, queue.StatusRejected, o.Status)
			assert.Equal(t, c.reason, o.Reason, o.Detail)
		})
	}
	assert.Equal(t, beforeOutside, treeSnapshot(t, outside), "nothing outside the store may change")
	assert.Equal(t, beforeStore, treeSnapshot(t, store, queue.MetaDir))
	assert.Equal(t, "inside\n", readFile(t, in("data.moved/victim.txt")))

	ok := scribe(t, "", "submit", "--store", store, "--wait", "put", "ok.txt", "ok\n")
	assert.Equal(t, 0, ok.code, ok.stderr)
	assert.Equal(t, "ok\n", readFile(t, in("ok.txt")))
}

// Jobs over the size limits, with too many ops, or merging
// into files that are not JSON objects are rejected before any change, and
// the next job applies.
func TestLimitsAndContentRejected(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	in := func(p string) string { return filepath.Join(store, p) }
	nested := func(depth int, leaf string) string {
		return strings.Repeat(`{"a":`, depth-1) + leaf + strings.Repeat("}", depth-1)
	}
	for name, content := range map[string]string{
		"notes.txt": "hello\n", "list.json": "[1,2]\n", "null.json": "null", "num.json": "42",
		"str.json": `"s"`, "bad.json": "{not json", "empty.json": "", "doc.json": `{"a":1}`,
		"deep.json": nested(writer.MaxMergeDepth+1, "{}"),
	} {
		require.NoError(t, os.WriteFile(in(name), []byte(content), 0o644))
	}
	startDaemon(t, store)
	s := connectSubmitter(t, store)
	id := s.disc.StoreID
	before := treeSnapshot(t, store, queue.MetaDir)

	type job struct {
		name   string
		body   []byte
		reason queue.Reason
	}
	var jobs []job
	add := func(name string, reason queue.Reason, ops ...queue.Op) {
		jobs = append(jobs, job{name, rawJob(t, id, name, ops...), reason})
	}

	// One byte over MaxJobBytes: JetStream takes it, the daemon refuses it.
	big := rawJob(t, id, "oversized", queue.Op{Kind: queue.OpPut, Path: "big.txt", Data: []byte("")})
	pad := queue.MaxJobBytes + 1 - len(big)
	big = rawJob(t, id, "oversized", queue.Op{Kind: queue.OpPut, Path: "big.txt", Data: bytes.Repeat([]byte("a"), pad)})
	require.Len(t, big, queue.MaxJobBytes+1)
	jobs = append(jobs, job{"oversized", big, queue.ReasonTooLarge})

	var many []queue.Op
	for i := range queue.MaxOps + 1 {
		many = append(many, queue.Op{Kind: queue.OpPut, Path: fmt.Sprintf("many/%d", i), Data: []byte("x")})
	}
	add("too-many-ops", queue.ReasonTooLarge, many...)
	for _, target := range []string{"notes.txt", "list.json", "null.json", "num.json", "str.json", "bad.json", "empty.json"} {
		add("merge-into-"+strings.TrimSuffix(strings.ReplaceAll(target, ".", "-"), "-"), queue.ReasonInvalidJSON,
			queue.Op{Kind: queue.OpMerge, Path: target, Data: []byte(`{"a":1}`)})
	}
	for i, patch := range []string{"[1]", `"x"`, "null", "{", "", `{"a":1} {"b":2}`} {
		add(fmt.Sprintf("patch-not-an-object-%d", i), queue.ReasonInvalidJSON,
			queue.Op{Kind: queue.OpMerge, Path: "doc.json", Data: []byte(patch)})
	}
	// Merging costs the square of the nesting depth: deep JSON is refused.
	add("patch-too-deep", queue.ReasonTooLarge,
		queue.Op{Kind: queue.OpMerge, Path: "doc.json", Data: []byte(nested(writer.MaxMergeDepth+1, "{}"))})
	add("patch-far-too-deep", queue.ReasonTooLarge,
		queue.Op{Kind: queue.OpMerge, Path: "new.json", Data: []byte(nested(9999, "1"))})
	add("file-too-deep", queue.ReasonTooLarge,
		queue.Op{Kind: queue.OpMerge, Path: "deep.json", Data: []byte(`{"b":1}`)})
	add("all-or-nothing", queue.ReasonInvalidJSON,
		queue.Op{Kind: queue.OpPut, Path: "new.txt", Data: []byte("x")},
		queue.Op{Kind: queue.OpAppend, Path: "notes.txt", Data: []byte("more\n")},
		queue.Op{Kind: queue.OpMerge, Path: "list.json", Data: []byte(`{"a":1}`)})
	add("precondition", queue.ReasonPreconditionFailed,
		queue.Op{Kind: queue.OpPut, Path: "doc.json", Data: []byte(`{}`), IfMatch: queue.ContentHash([]byte("other"))})
	jobs = append(jobs, job{"misspelt-precondition",
		[]byte(`{"v":1,"id":"misspelt-precondition","store":"` + id + `","ops":[{"op":"put","path":"doc.json","data":"{}","if_mach":"absent"}]}`),
		queue.ReasonBadInput})

	for _, j := range jobs {
		s.publish(t, j.name, j.body)
	}
	t.Run("far over the limit is not even queued", func(t *testing.T) {
		huge := bytes.Repeat([]byte("a"), queue.MaxJobBytes+8192)
		_, err := queue.Publish(t.Context(), s.js, id, queue.JobsSubject(id), "huge", huge)
		assert.Error(t, err)
	})
	for _, j := range jobs {
		t.Run(j.name, func(t *testing.T) {
			o := s.outcome(t, j.name)
			assert.Equal(t, queue.StatusRejected, o.Status)
			assert.Equal(t, j.reason, o.Reason, o.Detail)
		})
	}
	assert.Equal(t, before, treeSnapshot(t, store, queue.MetaDir), "rejected jobs change nothing")
	ok := scribe(t, "", "submit", "--store", store, "--wait", "merge", "doc.json", `{"b":2}`)
	assert.Equal(t, 0, ok.code, ok.stderr)
	assert.JSONEq(t, `{"a":1,"b":2}`, readFile(t, in("doc.json")))
	// At the depth limit, and with brackets inside strings, merge works.
	for _, patch := range []string{nested(writer.MaxMergeDepth, "{}"), `{"s":"` + strings.Repeat(`[{\"`, 300) + `"}`} {
		ok := scribe(t, "", "submit", "--store", store, "--wait", "merge", "ok.json", patch)
		assert.Equal(t, 0, ok.code, ok.stderr)
	}
}

// serveBriefly runs `scribe serve` on store, killing it after limit: a
// daemon that should have refused to start must not hang the test.
func serveBriefly(t testing.TB, store string, limit time.Duration) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, scribeBin, "serve", "--store", store)
	cmd.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stderr: stderr.String(), duration: time.Since(start)}
	var ee *exec.ExitError
	if err != nil {
		require.ErrorAs(t, err, &ee, "run scribe serve")
		r.code = ee.ExitCode()
	}
	return r
}

// `scribe serve` refuses at once to serve a store whose
// .scribe folder, or the discovery file in it, another user could change;
// it says which path and why, and leaves everything as it found it.
func TestServeRefusesInsecureMeta(t *testing.T) {
	t.Parallel()
	const nobody = 65534
	cases := []struct {
		name     string
		setup    func(t *testing.T, meta string)
		fix      func(t *testing.T, meta string)
		rootOnly bool
		path     string // offending path inside .scribe, "" for the folder
		problem  string
	}{
		{"world-writable folder",
			func(t *testing.T, meta string) { require.NoError(t, os.Chmod(meta, 0o777)) },
			func(t *testing.T, meta string) { require.NoError(t, os.Chmod(meta, 0o700)) },
			false, "", "is world-writable"},
		{"group-writable folder",
			func(t *testing.T, meta string) { require.NoError(t, os.Chmod(meta, 0o770)) },
			func(t *testing.T, meta string) { require.NoError(t, os.Chmod(meta, 0o700)) },
			false, "", "is group-writable"},
		{"folder owned by another user",
			func(t *testing.T, meta string) { require.NoError(t, os.Chown(meta, nobody, nobody)) },
			func(t *testing.T, meta string) { require.NoError(t, os.Chown(meta, os.Geteuid(), os.Getegid())) },
			true, "", "is owned by uid 65534"},
		{"group-writable discovery file left behind",
			func(t *testing.T, meta string) {
				p := filepath.Join(meta, "daemon.json")
				require.NoError(t, os.WriteFile(p, []byte(`{"url":"nats://192.0.2.1:4222","user":"client","password":"x"}`), 0o600))
				require.NoError(t, os.Chmod(p, 0o660))
			},
			func(t *testing.T, meta string) { require.NoError(t, os.Remove(filepath.Join(meta, "daemon.json"))) },
			false, "daemon.json", "is group-writable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.rootOnly && os.Geteuid() != 0 {
				t.Skip("chown to another user needs root")
			}
			store := newStore(t)
			meta := filepath.Join(store, queue.MetaDir)
			require.NoError(t, os.Mkdir(meta, 0o700))
			c.setup(t, meta)
			before := treeSnapshot(t, store)

			r := serveBriefly(t, store, 15*time.Second)
			assert.Equal(t, 1, r.code, r.stderr)
			assert.Less(t, r.duration, 10*time.Second, "it must refuse at once")
			assert.Contains(t, r.stderr, filepath.Join(meta, c.path))
			assert.Contains(t, r.stderr, c.problem)
			// The daemon lock is the one file a refusal may leave, if the
			// folder itself passed.
			after := treeSnapshot(t, store)
			delete(after, filepath.Join(queue.MetaDir, "daemon.lock"))
			assert.Equal(t, before, after, "a refused start changes nothing")

			c.fix(t, meta)
			startDaemon(t, store) // and once fixed, it serves
		})
	}
}
