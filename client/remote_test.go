package client_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
	"github.com/scribehq/scribe/writer/daemon"
)

// operator is an operator's NATS server in this process, JetStream on,
// laid out as docs/cluster.md tells: a user for the daemons, with every
// permission, and one submitter per store, who may publish the store's
// jobs and status requests and read its outcomes and its own replies
// only.
type operator struct {
	t      *testing.T
	dir    string // JetStream's folder, kept across restarts
	port   int
	stores []string
	srv    *server.Server
}

// startOperator starts an operator's server with a submitter for each
// store ID.
func startOperator(t *testing.T, storeIDs ...string) *operator {
	t.Helper()
	o := &operator{t: t, dir: t.TempDir(), port: server.RANDOM_PORT, stores: storeIDs}
	o.start()
	t.Cleanup(o.stop)
	return o
}

// start starts the server, on the port it had before, if any.
func (o *operator) start() {
	o.t.Helper()
	opts := &server.Options{
		ServerName: "operator", Host: "127.0.0.1", Port: o.port, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: o.dir, SyncAlways: true,
		Users: []*server.User{{Username: "daemon", Password: "daemon-pw"}},
	}
	for _, id := range o.stores {
		opts.Users = append(opts.Users, &server.User{
			Username: "submit-" + id, Password: "pw-" + id,
			Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{queue.JobsSubject(id), queue.StatusSubject(id)}},
				Subscribe: &server.SubjectPermission{Allow: []string{queue.ClientInboxPrefix(id) + ".>", queue.OutcomeSubject(id, "*")}},
			},
		})
	}
	srv, err := server.NewServer(opts)
	require.NoError(o.t, err)
	srv.Start()
	require.True(o.t, srv.ReadyForConnections(10*time.Second), "server ready")
	o.srv = srv
	o.port = srv.Addr().(*net.TCPAddr).Port
}

// stop shuts the server down (its JetStream folder stays).
func (o *operator) stop() {
	if o.srv != nil {
		o.srv.Shutdown()
		o.srv.WaitForShutdown()
		o.srv = nil
	}
}

func (o *operator) url() string { return "nats://127.0.0.1:" + strconv.Itoa(o.port) }

// submitter is how the submitter of store storeID reaches the server.
func (o *operator) submitter(storeID string) queue.Remote {
	return queue.Remote{URL: o.url(), User: "submit-" + storeID, Password: "pw-" + storeID}
}

// startWriter runs a writer for store on the server, as a daemon there
// would, and returns what stops it.
func (o *operator) startWriter(store string) (stop func()) {
	o.t.Helper()
	ctx := o.t.Context()
	nc, err := nats.Connect(o.url(), nats.UserInfo("daemon", "daemon-pw"), nats.CustomInboxPrefix(queue.DaemonInboxPrefix),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(o.t, err)
	w, err := daemon.NewWriter(ctx, daemon.WriterConfig{Store: store, Conn: nc, Settings: daemon.Settings{IdleRelease: 50 * time.Millisecond}})
	require.NoError(o.t, err)
	require.NoError(o.t, w.Start(ctx))
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = w.Close()
			nc.Close()
		}
	}
	o.t.Cleanup(stop)
	return stop
}

// queuedJobs is how many messages the store's stream holds.
func (o *operator) queuedJobs(storeID string) uint64 {
	o.t.Helper()
	nc, err := nats.Connect(o.url(), nats.UserInfo("daemon", "daemon-pw"))
	require.NoError(o.t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(o.t, err)
	s, err := js.Stream(o.t.Context(), queue.StreamName(storeID))
	require.NoError(o.t, err)
	info, err := s.Info(o.t.Context())
	require.NoError(o.t, err)
	return info.State.Msgs
}

// remoteStore is a new store folder and its ID.
func remoteStore(t *testing.T) (store, id string) {
	t.Helper()
	store = newStore(t)
	real, err := queue.ResolveStore(store)
	require.NoError(t, err)
	return store, queue.StoreID(real)
}

// A producer on another host reaches the store by ID through the
// operator's server, as its store's submitter: Submit, Apply, Status,
// Locate, Wait, Jobs and Report all work as through a local daemon.
func TestRemoteQueue(t *testing.T) {
	store, id := remoteStore(t)
	op := startOperator(t, id)
	op.startWriter(store)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	c, err := client.OpenRemote(ctx, id, op.submitter(id))
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, id, c.StoreID())
	assert.True(t, c.Queued())
	assert.Nil(t, c.Daemon(), "no discovery file names a remote daemon")

	out, err := c.Apply(ctx, appendJob("remote-1", "a\n"))
	require.NoError(t, err)
	assert.True(t, out.Applied(), "%+v", out)

	job := appendJob("remote-2", "b\n")
	require.NoError(t, c.Submit(ctx, job))
	l, err := c.Wait(ctx, job.ID)
	require.NoError(t, err)
	require.True(t, l.Found)
	assert.True(t, l.Outcome.Applied())

	l, err = c.Status(ctx, "remote-1")
	require.NoError(t, err)
	assert.True(t, l.Found)
	l, err = c.Locate(ctx, "remote-nothing")
	require.NoError(t, err)
	assert.False(t, l.Found)
	assert.Equal(t, queue.StateUnknown, l.JobState())

	r, err := c.Report(ctx)
	require.NoError(t, err)
	assert.Equal(t, id, r.StoreID)
	assert.EqualValues(t, 2, r.Applied)
	list, err := c.Jobs(ctx, queue.JobsQuery{})
	require.NoError(t, err)
	assert.Len(t, list.Outcomes, 2)

	// The same job again is a retry: the recorded outcome, nothing redone.
	again, err := c.Apply(ctx, appendJob("remote-1", "a\n"))
	require.NoError(t, err)
	assert.Equal(t, out.Seq, again.Seq)

	// Where the folder is here too: Open with WithRemote is the same.
	lc, err := client.Open(ctx, store, client.WithRemote(op.submitter(id)), client.WithRoute(client.RouteRequire))
	require.NoError(t, err)
	defer lc.Close()
	assert.True(t, lc.Queued())
	out, err = lc.Apply(ctx, appendJob("remote-3", "c\n"))
	require.NoError(t, err)
	assert.True(t, out.Applied(), "%+v", out)

	b, err := os.ReadFile(filepath.Join(store, "f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "a\nb\nc\n", string(b))
}

// A submitter of store A may not submit to store B, nor read its
// outcomes or status: the server's refusal is a clear error (ErrDenied)
// at once, not a publish retried until ctx ends, and nothing is queued.
func TestRemoteDenied(t *testing.T) {
	storeA, idA := remoteStore(t)
	storeB, idB := remoteStore(t)
	op := startOperator(t, idA, idB)
	op.startWriter(storeA)
	op.startWriter(storeB)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	// A's submitter, aiming at B.
	c, err := client.OpenRemote(ctx, idB, op.submitter(idA))
	require.NoError(t, err)
	defer c.Close()

	err = c.Submit(ctx, appendJob("sneaky-1", "x\n"))
	require.ErrorIs(t, err, client.ErrDenied)
	assert.NoError(t, ctx.Err(), "refused at once, not retried until ctx ended")
	assert.Contains(t, err.Error(), queue.JobsSubject(idB))
	assert.Contains(t, err.Error(), "not queued")

	_, err = c.Apply(ctx, appendJob("sneaky-2", "x\n"))
	require.ErrorIs(t, err, client.ErrDenied)
	_, err = c.Status(ctx, "sneaky-1")
	require.ErrorIs(t, err, client.ErrDenied)
	_, err = c.Report(ctx)
	require.ErrorIs(t, err, client.ErrDenied)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = c.Wait(wctx, "sneaky-1")
	wcancel()
	require.ErrorIs(t, err, client.ErrDenied)

	// Nothing reached B.
	assert.Zero(t, op.queuedJobs(idB))
	cb, err := client.OpenRemote(ctx, idB, op.submitter(idB))
	require.NoError(t, err)
	defer cb.Close()
	for _, id := range []string{"sneaky-1", "sneaky-2"} {
		l, err := cb.Status(ctx, id)
		require.NoError(t, err)
		assert.False(t, l.Found, id)
	}
	assert.NoFileExists(t, filepath.Join(storeB, "f.txt"))

	// A's own store is A's submitter's to write.
	ca, err := client.OpenRemote(ctx, idA, op.submitter(idA))
	require.NoError(t, err)
	defer ca.Close()
	out, err := ca.Apply(ctx, appendJob("mine-1", "a\n"))
	require.NoError(t, err)
	assert.True(t, out.Applied())
	assert.FileExists(t, filepath.Join(storeA, "f.txt"))
}

// A publish cut short by the server going away is retried with the same
// ID once it is back (a node's restart, or the stream's leader election on
// a cluster), and the job is applied once; the wait for its outcome
// survives the reconnection.
func TestRemotePublishRetriedThroughRestart(t *testing.T) {
	store, id := remoteStore(t)
	op := startOperator(t, id)
	stopWriter := op.startWriter(store)
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	var logged testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := client.OpenRemote(ctx, id, op.submitter(id), client.WithLogger(log))
	require.NoError(t, err)
	defer c.Close()
	out, err := c.Apply(ctx, appendJob("before", "before\n"))
	require.NoError(t, err)
	require.True(t, out.Applied())

	stopWriter()
	op.stop()
	job := appendJob("across", "across\n")
	applied := make(chan *queue.Outcome, 1)
	go func() {
		defer close(applied)
		out, err := c.Apply(ctx, job)
		if assert.NoError(t, err) {
			applied <- out
		}
	}()
	require.Eventually(t, func() bool {
		return strings.Contains(logged.String(), "publish retry") && strings.Contains(logged.String(), "id=across")
	}, 60*time.Second, 20*time.Millisecond, "the publish is retried while the server is away")

	op.start()
	op.startWriter(store)
	select {
	case out := <-applied:
		require.NotNil(t, out)
		assert.True(t, out.Applied(), "%+v", out)
	case <-ctx.Done():
		t.Fatal("no outcome after the server came back")
	}
	b, err := os.ReadFile(filepath.Join(store, "f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "before\nacross\n", string(b), "applied once")

	// Asked again, the same ID gets the recorded outcome and changes
	// nothing.
	again, err := c.Apply(ctx, appendJob("across", "across\n"))
	require.NoError(t, err)
	assert.True(t, again.Applied())
	b, err = os.ReadFile(filepath.Join(store, "f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "before\nacross\n", string(b))
}

// Until a stream answers for the store (none yet, or its leader being
// elected on a cluster), a publish meets no responders: it is retried
// with the same ID until one does. Meanwhile status requests find no
// daemon.
func TestRemoteRetriedUntilStreamAnswers(t *testing.T) {
	store, id := remoteStore(t)
	op := startOperator(t, id)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var logged testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := client.OpenRemote(ctx, id, op.submitter(id), client.WithLogger(log))
	require.NoError(t, err)
	defer c.Close()

	_, err = c.Report(ctx)
	require.ErrorIs(t, err, client.ErrNoDaemon)

	applied := make(chan *queue.Outcome, 1)
	go func() {
		defer close(applied)
		out, err := c.Apply(ctx, appendJob("early", "early\n"))
		if assert.NoError(t, err) {
			applied <- out
		}
	}()
	require.Eventually(t, func() bool {
		return strings.Contains(logged.String(), "publish retry") && strings.Contains(logged.String(), "id=early")
	}, 30*time.Second, 10*time.Millisecond)
	op.startWriter(store)
	select {
	case out := <-applied:
		require.NotNil(t, out)
		assert.True(t, out.Applied(), "%+v", out)
	case <-ctx.Done():
		t.Fatal("no outcome once the stream answered")
	}
}

// What cannot work fails at once, naming why, with a sentinel.
func TestOpenRemoteErrors(t *testing.T) {
	store, id := remoteStore(t)
	op := startOperator(t, id)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedURL := "nats://" + ln.Addr().String()
	require.NoError(t, ln.Close())

	for _, tc := range []struct {
		name string
		open func() (*client.Client, error)
		want error
	}{
		{"store ID", func() (*client.Client, error) {
			return client.OpenRemote(ctx, "../etc", op.submitter(id))
		}, client.ErrStoreID},
		{"upper-case store ID", func() (*client.Client, error) {
			return client.OpenRemote(ctx, strings.ToUpper(id), op.submitter(id))
		}, client.ErrStoreID},
		{"no URL", func() (*client.Client, error) {
			return client.OpenRemote(ctx, id, queue.Remote{})
		}, client.ErrRemoteConfig},
		{"two ways to authenticate", func() (*client.Client, error) {
			r := op.submitter(id)
			r.Token = "t"
			return client.OpenRemote(ctx, id, r)
		}, client.ErrRemoteConfig},
		{"creds file missing", func() (*client.Client, error) {
			return client.OpenRemote(ctx, id, queue.Remote{URL: op.url(), Creds: filepath.Join(t.TempDir(), "none.creds")})
		}, client.ErrRemoteConfig},
		{"direct route", func() (*client.Client, error) {
			return client.OpenRemote(ctx, id, op.submitter(id), client.WithRoute(client.RouteDirect))
		}, client.ErrRemoteConfig},
		{"direct route with WithRemote", func() (*client.Client, error) {
			return client.Open(ctx, store, client.WithRemote(op.submitter(id)), client.WithRoute(client.RouteDirect))
		}, client.ErrRemoteConfig},
		{"autostart", func() (*client.Client, error) {
			return client.OpenRemote(ctx, id, op.submitter(id), client.WithAutostart(client.Autostart{Command: []string{"scribe", "serve"}}))
		}, client.ErrRemoteConfig},
		{"max job bytes", func() (*client.Client, error) {
			return client.OpenRemote(ctx, id, op.submitter(id), client.WithMaxJobBytes(queue.MaxJobBytesLimit+1))
		}, nil},
		{"unreachable", func() (*client.Client, error) {
			return client.OpenRemote(ctx, id, queue.Remote{URL: closedURL})
		}, client.ErrUnreachable},
		{"wrong password", func() (*client.Client, error) {
			r := op.submitter(id)
			r.Password = "wrong"
			return client.OpenRemote(ctx, id, r)
		}, nats.ErrAuthorization},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.open()
			if c != nil {
				c.Close()
			}
			require.Error(t, err)
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
			}
			noCLIWords(t, err)
		})
	}
}

// A job larger than WithMaxJobBytes allows is rejected too_large before
// anything is sent.
func TestRemoteMaxJobBytes(t *testing.T) {
	_, id := remoteStore(t)
	op := startOperator(t, id)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := client.OpenRemote(ctx, id, op.submitter(id), client.WithMaxJobBytes(512))
	require.NoError(t, err)
	defer c.Close()
	err = c.Submit(ctx, appendJob("big", strings.Repeat("x", 1024)))
	var rej *queue.RejectError
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, queue.ReasonTooLarge, rej.Reason)
}
