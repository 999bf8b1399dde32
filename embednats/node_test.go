package embednats

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
)

// nodeFreePort is a loopback TCP port that was free a moment ago.
func nodeFreePort(t testing.TB) int {
	t.Helper()
	return testkit.FreePorts(t, 1)[0]
}

// writeConf writes a nats-server config file into a temporary folder.
func writeConf(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// clusterConfs writes the config files of an n-node cluster "test" on
// loopback: client ports picked by the server, cluster ports free ones,
// routes to every node, each node's JetStream store in a folder of its
// own.
func clusterConfs(t testing.TB, n int) []string {
	t.Helper()
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range ports {
		ports[i] = nodeFreePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i])
	}
	confs := make([]string, n)
	for i := range confs {
		confs[i] = writeConf(t, fmt.Sprintf(`
listen: 127.0.0.1:-1
server_name: n%d
jetstream {
  store_dir: %q
}
cluster {
  name: test
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, i+1, filepath.Join(t.TempDir(), "js"), ports[i], strings.Join(routes, ", ")))
	}
	return confs
}

// startNodes starts a node from each config, closed at cleanup; it dumps
// the nodes' logs if the test fails.
func startNodes(t testing.TB, confs []string) []*Node {
	t.Helper()
	nodes := make([]*Node, len(confs))
	for i, conf := range confs {
		lg := &LogBuffer{}
		n, err := StartNode(t.Context(), NodeConfig{ConfigFile: conf, Logger: lg.Logger()})
		require.NoError(t, err, "node %d:\n%s", i+1, lg.String())
		nodes[i] = n
		t.Cleanup(func() {
			require.NoError(t, n.Close())
			if t.Failed() {
				t.Logf("log of node %d:\n%s", i+1, lg.String())
			}
		})
	}
	return nodes
}

// Three nodes started in-process from three nats-server config files form
// a JetStream cluster; an R3 stream keeps every acknowledged message when
// the stream leader's node is shut down, and takes new ones once a new
// leader is elected.
func TestNodeClusterSurvivesLossOfStreamLeader(t *testing.T) {
	nodes := startNodes(t, clusterConfs(t, 3))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	began := time.Now()
	for i, n := range nodes {
		assert.Equal(t, fmt.Sprintf("n%d", i+1), n.Name())
		assert.True(t, strings.HasPrefix(n.ClientURL(), "nats://127.0.0.1:"), n.ClientURL())
		require.NoError(t, n.WaitJetStream(ctx), "node %s", n.Name())
		assert.True(t, n.ns.JetStreamIsClustered())
	}

	nc, err := nats.Connect(nodes[0].ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	t.Logf("JetStream ready on the three nodes after %s", time.Since(began))
	var stream jetstream.Stream
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		stream, err = js.CreateStream(cctx, jetstream.StreamConfig{
			Name: "JOBS", Subjects: []string{"jobs.>"}, Replicas: 3, Storage: jetstream.FileStorage,
		})
		assert.NoError(c, err)
	}, 15*time.Second, 100*time.Millisecond, "create R3 stream")
	t.Logf("R3 stream created after %s", time.Since(began))

	// publish sends message i until it is acknowledged, with its index as
	// message ID, so that a retry after a lost acknowledgement is not
	// stored twice.
	retried := map[string]int{} // the errors publishing met, counted
	publish := func(js jetstream.JetStream, i int) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := js.Publish(pctx, "jobs.x", []byte(strconv.Itoa(i)), jetstream.WithMsgID(strconv.Itoa(i)))
			if err != nil {
				retried[err.Error()]++
			}
			assert.NoError(c, err)
		}, 15*time.Second, 50*time.Millisecond, "publish %d", i)
	}
	for i := range 100 {
		publish(js, i)
	}

	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Cluster)
	require.Len(t, info.Cluster.Replicas, 2, "an R3 stream has two replicas besides its leader")
	leader := info.Cluster.Leader
	var survivor *Node
	for _, n := range nodes {
		if n.Name() == leader {
			require.NoError(t, n.Close())
			require.NoError(t, n.Close(), "Close is idempotent")
		} else if survivor == nil {
			survivor = n
		}
	}
	require.NotNil(t, survivor, "stream leader %q is none of the nodes", leader)

	nc2, err := nats.Connect(survivor.ClientURL())
	require.NoError(t, err)
	defer nc2.Close()
	js2, err := jetstream.New(nc2)
	require.NoError(t, err)
	start := time.Now()
	publish(js2, 100)
	t.Logf("stream leader %s shut down: the first publish through %s took %s, retried after %v", leader, survivor.Name(), time.Since(start), retried)
	for i := 101; i < 200; i++ {
		publish(js2, i)
	}

	t.Logf("the cluster took %s in all", time.Since(began))

	stream2, err := js2.Stream(ctx, "JOBS")
	require.NoError(t, err)
	info, err = stream2.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(200), info.State.Msgs)
	assert.NotEqual(t, leader, info.Cluster.Leader)
	for seq := uint64(1); seq <= 200; seq++ {
		msg, err := stream2.GetMsg(ctx, seq)
		require.NoError(t, err, "message %d", seq)
		assert.Equal(t, strconv.Itoa(int(seq-1)), string(msg.Data), "message %d", seq)
	}
}

// A node without a cluster block is a standalone JetStream server: the
// store directory given overrides the config's, Close is idempotent.
func TestNodeStandaloneStoreDirOverride(t *testing.T) {
	fromConf, override := filepath.Join(t.TempDir(), "conf-js"), filepath.Join(t.TempDir(), "js")
	conf := writeConf(t, fmt.Sprintf("listen: 127.0.0.1:-1\nserver_name: solo\njetstream {store_dir: %q}\n", fromConf))
	n, err := StartNode(t.Context(), NodeConfig{ConfigFile: conf, StoreDir: override})
	require.NoError(t, err)
	defer n.Close()
	assert.Equal(t, "solo", n.Name())
	require.NoError(t, n.WaitJetStream(t.Context()))
	assert.False(t, n.ns.JetStreamIsClustered())

	nc, err := nats.Connect(n.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
	require.NoError(t, err)
	_, err = js.Publish(t.Context(), "s", []byte("x"))
	require.NoError(t, err)
	assert.Equal(t, int64(queue.Limits{}.JobBytes()+64*1024), nc.MaxPayload(),
		"a config without max_payload gets the one Start gives")
	nc.Close()

	require.NoError(t, n.Close())
	require.NoError(t, n.Close())
	assert.DirExists(t, filepath.Join(override, "jetstream"))
	assert.NoDirExists(t, fromConf)
}

// A config's own max_payload is kept, with a warning when it is too
// small for the largest job.
func TestNodeKeepsConfiguredMaxPayload(t *testing.T) {
	conf := writeConf(t, fmt.Sprintf("listen: 127.0.0.1:-1\nmax_payload: 65536\njetstream {store_dir: %q}\n", t.TempDir()))
	lg := &LogBuffer{}
	n, err := StartNode(t.Context(), NodeConfig{ConfigFile: conf, Logger: lg.Logger()})
	require.NoError(t, err)
	defer n.Close()
	nc, err := nats.Connect(n.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	assert.Equal(t, int64(65536), nc.MaxPayload())
	assert.Contains(t, lg.String(), "level=WARN msg=\"the config's max_payload is smaller than the largest job")
}

// StartNode refuses, naming the file, configs JetStream clustering cannot
// run from.
func TestNodeRefusedConfigs(t *testing.T) {
	store := t.TempDir()
	cluster := fmt.Sprintf("cluster {name: c, listen: 127.0.0.1:%d}\n", nodeFreePort(t))
	js := fmt.Sprintf("jetstream {store_dir: %q}\n", store)
	for _, tc := range []struct {
		name, conf string
		storeDir   string
		want       string
	}{
		{name: "no jetstream", conf: "listen: 127.0.0.1:-1\nserver_name: a\n", want: "JetStream is not enabled"},
		{name: "jetstream disabled", conf: "listen: 127.0.0.1:-1\nserver_name: a\njetstream: disabled\n", want: "JetStream is not enabled"},
		{name: "cluster without name", conf: "listen: 127.0.0.1:-1\nserver_name: a\n" + js +
			fmt.Sprintf("cluster {listen: 127.0.0.1:%d}\n", nodeFreePort(t)), want: "the cluster block has no name"},
		{name: "routes without name", conf: "listen: 127.0.0.1:-1\nserver_name: a\n" + js +
			"cluster {routes: [nats-route://127.0.0.1:1]}\n", want: "the cluster block has no name"},
		{name: "cluster without server_name", conf: "listen: 127.0.0.1:-1\n" + js + cluster, want: "no server_name"},
		{name: "no store dir", conf: "listen: 127.0.0.1:-1\nserver_name: a\njetstream: enabled\n" + cluster, want: "no JetStream store directory"},
		{name: "syntax error", conf: "listen: 127.0.0.1:-1\njetstream {store_dir: \n", want: "nats config"},
		{name: "unknown field", conf: "listen: 127.0.0.1:-1\nno_such_field: 1\n" + js, want: "no_such_field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := writeConf(t, tc.conf)
			n, err := StartNode(t.Context(), NodeConfig{ConfigFile: conf, StoreDir: tc.storeDir})
			if n != nil {
				n.Close()
			}
			require.Error(t, err)
			assert.ErrorContains(t, err, conf)
			assert.ErrorContains(t, err, tc.want)
		})
	}

	t.Run("missing file", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "absent.conf")
		_, err := StartNode(t.Context(), NodeConfig{ConfigFile: missing})
		require.Error(t, err)
		assert.ErrorContains(t, err, missing)
		assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
	})
	t.Run("no file", func(t *testing.T) {
		_, err := StartNode(t.Context(), NodeConfig{})
		assert.ErrorContains(t, err, "no config file")
	})
	t.Run("store dir given", func(t *testing.T) {
		conf := writeConf(t, "listen: 127.0.0.1:-1\nserver_name: a\njetstream: enabled\n")
		n, err := StartNode(t.Context(), NodeConfig{ConfigFile: conf, StoreDir: store})
		require.NoError(t, err, "a store directory given makes up for the config's")
		require.NoError(t, n.Close())
	})
}

// A node whose client port is taken fails at once, not after the
// readiness timeout.
func TestNodePortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	conf := writeConf(t, fmt.Sprintf("listen: %s\njetstream {store_dir: %q}\n", l.Addr(), t.TempDir()))
	start := time.Now()
	n, err := StartNode(t.Context(), NodeConfig{ConfigFile: conf})
	if n != nil {
		n.Close()
	}
	require.Error(t, err)
	assert.ErrorContains(t, err, conf)
	assert.Less(t, time.Since(start), readyTimeout/2)
}

// WaitJetStream of a node whose cluster has no quorum gives up when its
// context ends, saying why.
func TestNodeWaitJetStreamWithoutQuorum(t *testing.T) {
	nodes := startNodes(t, clusterConfs(t, 3)[:1])
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	err := nodes[0].WaitJetStream(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "JetStream not ready")
}

// A config with TLS gives a tls:// client URL that a client trusting the
// server's certificate connects to; a listener on every address gives
// the loopback one.
func TestNodeClientURLWithTLS(t *testing.T) {
	cert, certPEM, err := daemonCert("node", "127.0.0.1", time.Now())
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	conf := writeConf(t, fmt.Sprintf("listen: 0.0.0.0:-1\njetstream {store_dir: %q}\ntls {cert_file: %q, key_file: %q}\n",
		filepath.Join(dir, "js"), certFile, keyFile))

	n, err := StartNode(t.Context(), NodeConfig{ConfigFile: conf})
	require.NoError(t, err)
	defer n.Close()
	url := n.ClientURL()
	assert.True(t, strings.HasPrefix(url, "tls://127.0.0.1:"), url)
	require.NoError(t, n.WaitJetStream(t.Context()))

	nc, err := nats.Connect(url, nats.ClientTLSConfig(nil, func() (*x509.CertPool, error) {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(certPEM)
		return pool, nil
	}))
	require.NoError(t, err)
	defer nc.Close()
	assert.True(t, nc.TLSRequired())
	_, err = nats.Connect(strings.Replace(url, "tls://", "nats://", 1), nats.MaxReconnects(0))
	assert.Error(t, err, "a client not trusting the certificate")
}

// A node syncs every stored message before acknowledging it, as the
// embedded server does, unless its config chooses a sync interval.
func TestNodeSyncsEveryWriteByDefault(t *testing.T) {
	for _, tc := range []struct {
		name, jetstream string
		always          bool
		interval        time.Duration
	}{
		{"default", "", true, 0},
		{"always", "sync_interval: always\n", true, 0},
		{"interval", "sync_interval: \"10s\"\n", false, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := writeConf(t, fmt.Sprintf("listen: 127.0.0.1:-1\njetstream {\nstore_dir: %q\n%s}\n", t.TempDir(), tc.jetstream))
			n, err := StartNode(t.Context(), NodeConfig{ConfigFile: conf})
			require.NoError(t, err)
			defer n.Close()
			cfg := n.ns.JetStreamConfig()
			require.NotNil(t, cfg)
			assert.Equal(t, tc.always, cfg.SyncAlways)
			if !tc.always {
				assert.Equal(t, tc.interval, cfg.SyncInterval)
			}
		})
	}
}
