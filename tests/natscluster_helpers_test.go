package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
)

// The plain nats-server binary, built once per run by natsServerBin from
// the nats-server module go.mod names (no network needed).
var (
	natsBinOnce sync.Once
	natsBinPath string
	natsBinErr  error
)

// natsServerBin builds the plain nats-server binary of the module the
// project depends on, once per test run, next to scribeBin (TestMain
// removes that folder).
func natsServerBin(t testing.TB) string {
	t.Helper()
	natsBinOnce.Do(func() {
		path := filepath.Join(filepath.Dir(scribeBin), "nats-server")
		out, err := exec.Command("go", "build", "-o", path, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			natsBinErr = fmt.Errorf("build nats-server: %w\n%s", err, out)
			return
		}
		natsBinPath = path
	})
	require.NoError(t, natsBinErr)
	return natsBinPath
}

// Users and passwords of the account layout (natsAccountsConf).
const (
	natsDaemonUser = "daemon"
	natsDaemonPass = "daemon-pass"
)

// natsSubmitUser and natsSubmitPass are the user and password of the
// submitters of the store storeID in the account layout.
func natsSubmitUser(storeID string) string { return "submit-" + storeID }
func natsSubmitPass(storeID string) string { return "submit-" + storeID + "-pass" }

// natsAccountsTmpl is the account layout docs/cluster.md documents for a
// NATS server or cluster shared by scribe's stores: one account with
// JetStream, a daemon user with the whole account, and per store a
// submitter user who can queue jobs, ask the status service and the
// stream's state, and read its replies and outcomes, nothing of another
// store's. Its data is the store IDs.
var natsAccountsTmpl = template.Must(template.New("accounts").Parse(`accounts {
  SCRIBE {
    jetstream: enabled
    users: [
      # The scribe daemons: they run the writers and answer the submitters
      # on their inboxes. No permissions: all of the account's subjects.
      {user: "daemon", password: "daemon-pass"}
{{- range .}}
      # Submitters of store {{.}}: queue jobs, ask for status and the
      # stream's state; replies (PubAcks included) and outcomes.
      {
        user: "submit-{{.}}", password: "submit-{{.}}-pass"
        permissions: {
          publish: {allow: ["scribe.{{.}}.jobs", "scribe.{{.}}.jobs.high", "scribe.{{.}}.status", "scribe.{{.}}.cancel", "$JS.API.STREAM.INFO.SCRIBE_{{.}}"]}
          subscribe: {allow: ["_INBOX_{{.}}.>", "scribe.{{.}}.outcomes.*"]}
        }
      }
      # (Not in the docs.) A submitter of store {{.}} set up before high
      # jobs had a subject of their own.
      {
        user: "older-submit-{{.}}", password: "submit-{{.}}-pass"
        permissions: {
          publish: {allow: ["scribe.{{.}}.jobs", "scribe.{{.}}.status", "scribe.{{.}}.cancel", "$JS.API.STREAM.INFO.SCRIBE_{{.}}"]}
          subscribe: {allow: ["_INBOX_{{.}}.>", "scribe.{{.}}.outcomes.*"]}
        }
      }
{{- end}}
    ]
  }
}
`))

// natsAccountsConf is the accounts block of natsAccountsTmpl for the
// stores storeIDs.
func natsAccountsConf(storeIDs ...string) string {
	var b strings.Builder
	if err := natsAccountsTmpl.Execute(&b, storeIDs); err != nil {
		panic(err)
	}
	return b.String()
}

// natsNode is one node of a cluster's nats-server configuration.
type natsNode struct {
	Name        string   // server_name
	Port        int      // client port, on 127.0.0.1
	ClusterPort int      // route port, on 127.0.0.1
	Routes      []string // nats-route:// URLs of every node
	StoreDir    string   // jetstream store_dir
	StoreIDs    []string // the stores of the account layout
}

// natsNodeTmpl is a node of cluster "scribe" on loopback. Its
// max_payload carries scribe's default largest job (queue.MaxJobBytes)
// with room for headers, as the embedded server's does.
var natsNodeTmpl = template.Must(template.New("node").Funcs(template.FuncMap{
	"accounts": func(ids []string) string { return natsAccountsConf(ids...) },
}).Parse(`# {{.Name}}: a node of the NATS cluster "scribe"
server_name: {{.Name}}
listen: 127.0.0.1:{{.Port}}
max_payload: 1114112
jetstream {
  store_dir: {{printf "%q" .StoreDir}}
}
cluster {
  name: scribe
  listen: 127.0.0.1:{{.ClusterPort}}
  routes: [
{{- range .Routes}}
    {{.}}
{{- end}}
  ]
}
{{accounts .StoreIDs}}`))

// config is n's nats-server configuration file text.
func (n natsNode) config() string {
	var b strings.Builder
	if err := natsNodeTmpl.Execute(&b, n); err != nil {
		panic(err)
	}
	return b.String()
}

// natsCluster is the configuration of an n-node cluster written by
// writeClusterConfigs; index i is node i+1 (server name "n<i+1>").
type natsCluster struct {
	Names    []string
	Confs    []string // config files
	URLs     []string // client URLs, nats://127.0.0.1:port
	Dirs     []string // JetStream store directories
	StoreIDs []string
}

// URL is every node's client URL, comma-separated (as nats.go and
// --nats-url take them).
func (c *natsCluster) URL() string { return strings.Join(c.URLs, ",") }

// index is the index of the node named name, -1 if none is.
func (c *natsCluster) index(name string) int {
	for i, n := range c.Names {
		if n == name {
			return i
		}
	}
	return -1
}

// writeClusterConfigs writes the config files of an n-node cluster
// "scribe" on loopback (natsNodeTmpl): server names n1..nN, free client
// and route ports, routes to every node, a JetStream store directory per
// node, and the account layout of natsAccountsTmpl for storeIDs.
func writeClusterConfigs(t testing.TB, n int, storeIDs ...string) *natsCluster {
	t.Helper()
	ports := testkit.FreePorts(t, 2*n)
	nodes := make([]natsNode, n)
	var routes []string
	for i := range nodes {
		nodes[i] = natsNode{Name: fmt.Sprintf("n%d", i+1), Port: ports[2*i], ClusterPort: ports[2*i+1], StoreIDs: storeIDs}
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", nodes[i].ClusterPort))
	}
	c := &natsCluster{StoreIDs: storeIDs}
	dir := t.TempDir()
	for i := range nodes {
		nd := &nodes[i]
		nd.Routes = routes
		nd.StoreDir = filepath.Join(dir, nd.Name, "jetstream")
		conf := filepath.Join(dir, nd.Name+".conf")
		require.NoError(t, os.WriteFile(conf, []byte(nd.config()), 0o600))
		c.Names = append(c.Names, nd.Name)
		c.Confs = append(c.Confs, conf)
		c.URLs = append(c.URLs, fmt.Sprintf("nats://127.0.0.1:%d", nd.Port))
		c.Dirs = append(c.Dirs, nd.StoreDir)
	}
	return c
}

// startNATSProcess runs the nats-server binary bin with the config file
// conf, without waiting for it (a cluster node is ready only once a
// quorum is up: waitReady). It is stopped at cleanup (SIGTERM, exit 0
// wanted), its output logged if the test failed.
func startNATSProcess(t testing.TB, bin, conf string) *daemon {
	t.Helper()
	return startProcess(t, exec.Command(bin, "-c", conf))
}

// waitReady waits until the server at url, which d runs, takes the daemon
// user of the account layout and answers its JetStream account info,
// which in a cluster means a meta leader is elected. A process that exits
// meanwhile fails the test, with its output.
func (d *daemon) waitReady(t testing.TB, url string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		select {
		case <-d.exited:
			return
		default:
		}
		assert.NoError(c, jetStreamAnswers(t.Context(), url, nats.UserInfo(natsDaemonUser, natsDaemonPass)))
	}, 30*time.Second, 100*time.Millisecond, "JetStream at %s not ready", url)
	select {
	case <-d.exited:
		t.Fatalf("the server of %s exited while starting:\n%s", url, d.log.String())
	default:
	}
}

// jetStreamAnswers connects to url and asks for JetStream's account info.
func jetStreamAnswers(ctx context.Context, url string, opts ...nats.Option) error {
	nc, err := nats.Connect(url, append([]nats.Option{nats.Timeout(time.Second), nats.MaxReconnects(0)}, opts...)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// A server whose cluster has no meta leader yet does not answer.
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// startScribeNode starts `scribe serve --nats-config CONF` (an embedded
// cluster node from a nats-server config file; with no --store a bare
// cluster node) with extra arguments, without waiting: wait for it with
// d.waitReady(t, url) once a quorum of the cluster is started. It is stopped at cleanup (SIGTERM, exit 0 wanted).
func startScribeNode(t testing.TB, conf string, extra ...string) *daemon {
	t.Helper()
	cmd := exec.Command(scribeBin, append([]string{"serve", "--nats-config", conf, "--log-level", "debug"}, extra...)...)
	cmd.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_CRASH_AT=")
	return startProcess(t, cmd)
}

// Three plain nats-server processes built from the module scribe depends
// on form a JetStream cluster from writeClusterConfigs' files: the daemon
// user creates a store's R3 stream, the store's submitter queues a job
// through another node, asks the status service and the stream's state,
// and is refused another store's subjects. When the stream leader's
// process is SIGKILLed, a publish through a survivor succeeds again once
// a new leader is elected.
func TestNATSServerBinaryClusterForms(t *testing.T) {
	t.Parallel()
	bin := natsServerBin(t)
	a, b := queue.StoreID("/cluster/store-a"), queue.StoreID("/cluster/store-b")
	c := writeClusterConfigs(t, 3, a, b)
	conf, err := os.ReadFile(c.Confs[0])
	require.NoError(t, err)
	t.Logf("%s:\n%s", c.Confs[0], conf)

	procs := make([]*daemon, len(c.Confs))
	for i, conf := range c.Confs {
		procs[i] = startNATSProcess(t, bin, conf)
	}
	began := time.Now()
	for i, p := range procs {
		p.waitReady(t, c.URLs[i])
	}
	t.Logf("JetStream answered on the three nodes after %s", time.Since(began))

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	dnc, err := nats.Connect(c.URL(), nats.UserInfo(natsDaemonUser, natsDaemonPass), nats.CustomInboxPrefix(queue.DaemonInboxPrefix))
	require.NoError(t, err)
	defer dnc.Close()
	djs, err := jetstream.New(dnc)
	require.NoError(t, err)
	for _, id := range []string{a, b} {
		// A meta leader that answers may not yet count every peer
		// online: that refusal passes, as the daemon's retry knows.
		for {
			_, err = djs.CreateStream(ctx, queue.StreamConfig(id, queue.Limits{Replicas: 3, MaxBytes: 64 << 20}))
			if err == nil || !queue.Transient(err) || ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.NoError(t, err, "create the R3 stream of %s", id)
	}
	// The daemon answers status requests on the submitter's inbox.
	statusSub, err := dnc.Subscribe(queue.StatusSubject(a), func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
	require.NoError(t, err)
	defer statusSub.Unsubscribe()
	require.NoError(t, dnc.Flush())

	// The refusals the servers report to the submitter, asynchronously.
	var mu sync.Mutex
	var refused []string
	quiet := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		defer mu.Unlock()
		refused = append(refused, err.Error())
	})
	// submitter connects store a's submitter to the node at url.
	submitter := func(url string) (*nats.Conn, jetstream.JetStream) {
		t.Helper()
		nc, err := nats.Connect(url, nats.UserInfo(natsSubmitUser(a), natsSubmitPass(a)),
			nats.CustomInboxPrefix(queue.ClientInboxPrefix(a)), nats.PermissionErrOnSubscribe(true), quiet)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		return nc, js
	}
	nc, js := submitter(c.URLs[1])
	_, err = js.Publish(ctx, queue.JobsSubject(a), []byte("job 1"), jetstream.WithMsgID("job-1"))
	require.NoError(t, err)
	st, err := js.Stream(ctx, queue.StreamName(a))
	require.NoError(t, err, "STREAM.INFO of the submitter's own store")
	assert.Equal(t, uint64(1), st.CachedInfo().State.Msgs)
	// The daemon's interest in its status subject reaches this node over
	// the routes in their own time: no responders until then.
	var reply *nats.Msg
	require.Eventually(t, func() bool {
		reply, err = nc.Request(queue.StatusSubject(a), nil, 5*time.Second)
		return !errors.Is(err, nats.ErrNoResponders)
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, err, "status request answered by the daemon")
	assert.Equal(t, "ok", string(reply.Data))
	sub, err := nc.SubscribeSync(queue.OutcomeSubject(a, "*"))
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	// The subscription's interest reaches the other nodes over the routes
	// a moment later: publish until one arrives.
	var msg *nats.Msg
	require.Eventually(t, func() bool {
		if err := dnc.Publish(queue.OutcomeSubject(a, "job-1"), []byte("done")); err != nil {
			return false
		}
		m, err := sub.NextMsg(100 * time.Millisecond)
		if err != nil {
			return false
		}
		msg = m
		return true
	}, 10*time.Second, time.Millisecond, "the submitter reads its store's outcomes")
	assert.Equal(t, "done", string(msg.Data))
	require.NoError(t, sub.Unsubscribe())

	// Nothing of store b.
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	_, err = js.Publish(short, queue.JobsSubject(b), []byte("job"))
	cancelShort()
	assert.Error(t, err, "publish to another store's jobs")
	short, cancelShort = context.WithTimeout(ctx, time.Second)
	_, err = js.Stream(short, queue.StreamName(b))
	cancelShort()
	assert.Error(t, err, "STREAM.INFO of another store")
	_, err = nc.Request(queue.StatusSubject(b), nil, time.Second)
	assert.Error(t, err, "status request to another store")
	sub, err = nc.SubscribeSync(queue.OutcomeSubject(b, "*"))
	if err == nil {
		_, err = sub.NextMsg(2 * time.Second)
	}
	assert.ErrorIs(t, err, nats.ErrPermissionViolation, "subscribe to another store's outcomes")
	mu.Lock()
	for _, subject := range []string{queue.JobsSubject(b), "$JS.API.STREAM.INFO." + queue.StreamName(b), queue.StatusSubject(b)} {
		assert.Contains(t, strings.Join(refused, "\n"), fmt.Sprintf("Permissions Violation for Publish to %q", subject))
	}
	mu.Unlock()

	// SIGKILL the stream leader's node; publish through a survivor.
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Cluster)
	leader := c.index(info.Cluster.Leader)
	require.GreaterOrEqual(t, leader, 0, "stream leader %q", info.Cluster.Leader)
	survivor := (leader + 1) % len(procs)
	_, js2 := submitter(c.URLs[survivor])
	procs[leader].kill(t)
	killed := time.Now()
	errs := map[string]int{} // what the publish met meanwhile, counted
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js2.Publish(pctx, queue.JobsSubject(a), []byte("job 2"), jetstream.WithMsgID("job-2"))
		if err != nil {
			errs[err.Error()]++
		}
		assert.NoError(c, err)
	}, 30*time.Second, 50*time.Millisecond, "publish after the leader's loss")
	t.Logf("stream leader %s SIGKILLed: publish through %s succeeded after %s; errors until then: %v",
		c.Names[leader], c.Names[survivor], time.Since(killed), errs)
	st2, err := js2.Stream(ctx, queue.StreamName(a))
	require.NoError(t, err)
	info = st2.CachedInfo()
	assert.Equal(t, uint64(2), info.State.Msgs)
	assert.NotEqual(t, c.Names[leader], info.Cluster.Leader)
}
