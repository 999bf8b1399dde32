package tests

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
	"github.com/scribehq/scribe/writer/claim"
	"github.com/scribehq/scribe/writer/journal"
)

// The queue on a NATS JetStream cluster. Every
// test here runs real processes on loopback: three `scribe serve
// --nats-config` nodes (embednats.StartNode), writer daemons started with
// `scribe serve --store S --nats-url …`, producers through
// client.OpenRemote and `scribe submit --nats-url` processes. The
// producers append "p<k> <i>\n" under the job ID p<k>-<i> to one file, so
// that the file itself says whether every job was applied exactly once
// and in each producer's order (checkProducerLog).

// clusterLogFile is the file the producers append to.
const clusterLogFile = "log.txt"

// clusterEnv is a three-node cluster of `scribe serve --nats-config`
// processes and the store whose queue it holds.
type clusterEnv struct {
	c     *natsCluster
	nodes []*daemon
	store string // the store's real path
	id    string // its store ID
}

// startScribeCluster starts a three-node cluster of bare `scribe serve
// --nats-config` nodes whose account layout has store's submitter, and
// waits until JetStream answers on every node.
func startScribeCluster(t *testing.T, store string) *clusterEnv {
	t.Helper()
	real, err := filepath.EvalSymlinks(store)
	require.NoError(t, err)
	e := &clusterEnv{store: real, id: queue.StoreID(real)}
	e.c = writeClusterConfigs(t, 3, e.id)
	began := time.Now()
	for _, conf := range e.c.Confs {
		e.nodes = append(e.nodes, startScribeNode(t, conf))
	}
	for i, n := range e.nodes {
		n.waitReady(t, e.c.URLs[i])
	}
	t.Logf("3 scribe nodes: JetStream answered on all of them %s after the start", time.Since(began).Round(time.Millisecond))
	// Answering is not enough for a stream of three replicas: the meta
	// leader places one only once it has heard from every peer ("no
	// suitable peers for placement, peer offline" until then).
	nc, err := nats.Connect(e.c.URLs[0], nats.UserInfo(natsDaemonUser, natsDaemonPass))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := queue.CreateStream(t.Context(), js, e.id, queue.Limits{Replicas: 3})
		if assert.NoError(c, err) {
			assert.NoError(c, js.DeleteStream(t.Context(), queue.StreamName(e.id)))
		}
	}, 30*time.Second, 100*time.Millisecond, "a stream of three replicas placed")
	t.Logf("3 scribe nodes: a stream of three replicas placed %s after the start", time.Since(began).Round(time.Millisecond))
	return e
}

// restartNode starts node i again from its config file (its JetStream
// folder kept) and waits until it answers.
func (e *clusterEnv) restartNode(t *testing.T, i int) {
	t.Helper()
	e.nodes[i] = startScribeNode(t, e.c.Confs[i])
	e.nodes[i].waitReady(t, e.c.URLs[i])
}

// writerArgs are the arguments of a writer daemon of the store queuing
// through the servers at url, as the daemon user.
func writerArgs(url string, extra ...string) []string {
	return append([]string{"--nats-url", url, "--user", natsDaemonUser, "--replicas", "3"}, extra...)
}

// daemonEnv passes the daemon user's password through the environment,
// as docs/cli.md recommends.
var daemonEnv = []string{"SCRIBE_NATS_PASSWORD=" + natsDaemonPass}

// startWriter starts a writer daemon of the store through url and waits
// until it serves (its discovery file names it).
func (e *clusterEnv) startWriter(t *testing.T, url string, extra ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, e.store, daemonEnv, writerArgs(url, extra...)...)
}

// daemonConn connects the daemon user to every node (whichever answers).
func (e *clusterEnv) daemonConn(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(e.c.URL(), nats.UserInfo(natsDaemonUser, natsDaemonPass), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// streamInfo is the store's stream's state, asked of the cluster.
func (e *clusterEnv) streamInfo(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}

// waitReplicasCurrent waits until the stream name has a leader and two
// followers, both current: the cluster can lose one node again.
func (e *clusterEnv) waitReplicasCurrent(t *testing.T, js jetstream.JetStream, name string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		info, err := e.streamInfo(t.Context(), js, name)
		if !assert.NoError(c, err) || !assert.NotNil(c, info.Cluster) {
			return
		}
		assert.NotEmpty(c, info.Cluster.Leader, "stream %s has no leader", name)
		if assert.Len(c, info.Cluster.Replicas, 2, "stream %s's followers", name) {
			for _, p := range info.Cluster.Replicas {
				assert.True(c, p.Current && !p.Offline, "stream %s: follower %s current %v offline %v lag %d", name, p.Name, p.Current, p.Offline, p.Lag)
			}
		}
	}, 60*time.Second, 200*time.Millisecond)
}

// logQueue logs the state of the store's stream and of its writer's
// consumer, to tell where jobs are stuck.
func (e *clusterEnv) logQueue(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	info, err := e.streamInfo(ctx, js, queue.StreamName(e.id))
	if err != nil {
		t.Logf("stream info: %v", err)
		return
	}
	t.Logf("stream %s: %d msgs, seq %d..%d, leader %v", info.Config.Name, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, info.Cluster)
	cons, err := js.Consumer(ctx, info.Config.Name, queue.ConsumerName)
	if err != nil {
		t.Logf("consumer: %v", err)
		return
	}
	ci := cons.CachedInfo()
	t.Logf("consumer %s: delivered %+v, ack floor %+v, pending %d, ack pending %d, redelivered %d, waiting pulls %d, leader %v",
		ci.Name, ci.Delivered, ci.AckFloor, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Cluster)
}

// logMissing logs the jobs whose Submit returned nil and whose line is
// not in the store's file, and what the status service says of them.
func (e *clusterEnv) logMissing(t *testing.T, prods []*producer, w *daemon) {
	t.Helper()
	seen := map[[2]int]bool{}
	for _, l := range producerLines(t, readFile(t, filepath.Join(e.store, clusterLogFile))) {
		seen[l] = true
	}
	cl := openSubmitter(t, e.id, e.c.URL())
	n := 0
	for _, p := range prods {
		ok, _, _ := p.snapshot()
		for _, s := range ok {
			if seen[[2]int{p.k, s.i}] {
				continue
			}
			if n++; n > 20 {
				continue
			}
			id := fmt.Sprintf("p%d-%d", p.k, s.i)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			l, err := cl.Status(ctx, id)
			cancel()
			if err != nil {
				t.Logf("missing %s (Submit returned at %s): status: %v", id, s.at.Format(time.RFC3339Nano), err)
			} else {
				t.Logf("missing %s (Submit returned at %s): status: found %v %+v", id, s.at.Format(time.RFC3339Nano), l.Found, l.Outcome)
			}
		}
	}
	t.Logf("%d jobs whose Submit returned nil are not in the file", n)
	// The stream sequences the writer decided (its debug log), and the
	// ones it never saw between them.
	var seqs []int
	for _, m := range outcomeSeqRe.FindAllStringSubmatch(w.log.String(), -1) {
		if n, err := strconv.Atoi(m[1]); err == nil {
			seqs = append(seqs, n)
		}
	}
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Logf("the writer decided no job of stream sequences %d..%d (it decided %d and %d)", seqs[i-1]+1, seqs[i]-1, seqs[i-1], seqs[i])
		}
	}
}

// outcomeSeqRe finds the stream sequence of each job the writer decided,
// in its debug log.
var outcomeSeqRe = regexp.MustCompile(`msg="job outcome" .* seq=(\d+)`)

// submitted is one Submit that returned nil: job i, and when it returned.
type submitted struct {
	i  int
	at time.Time
}

// producer submits append jobs p<k>-<i> ("p<k> <i>\n") one after the
// other and records what each Submit returned.
type producer struct {
	k    int
	via  string // how it submits, for messages: "go@n1", "cli@n2"…
	mu   sync.Mutex
	next int // the next i to submit: 0..next-1 were tried
	ok   []submitted
	errs map[string]int // the errors of the Submits that failed
	bad  []int          // the i whose Submit failed: their fate is unknown
}

func newProducer(k int, via string) *producer {
	return &producer{k: k, via: via, errs: map[string]int{}}
}

// appendJob is producer k's job i.
func appendJob(k, i int) *queue.Job {
	return &queue.Job{ID: fmt.Sprintf("p%d-%d", k, i), Ops: []queue.Op{
		{Kind: queue.OpAppend, Path: clusterLogFile, Data: fmt.Appendf(nil, "p%d %d\n", k, i)},
	}}
}

// note records the Submit of job i that returned err.
func (p *producer) note(i int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next = i + 1
	if err == nil {
		p.ok = append(p.ok, submitted{i: i, at: time.Now()})
		return
	}
	p.bad = append(p.bad, i)
	p.errs[err.Error()]++
}

// okSince counts the Submits that returned nil after t.
func (p *producer) okSince(t time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.ok {
		if s.at.After(t) {
			n++
		}
	}
	return n
}

// snapshot is what p recorded so far.
func (p *producer) snapshot() (ok []submitted, bad []int, tried int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ok), slices.Clone(p.bad), p.next
}

// runGo submits jobs 0..n-1 through cl (n <= 0: until stop is closed).
// Each Submit may retry for a minute, as a caller's would.
func (p *producer) runGo(cl *client.Client, n int, stop <-chan struct{}) {
	for i := 0; n <= 0 || i < n; i++ {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := cl.Submit(ctx, appendJob(p.k, i))
		cancel()
		p.note(i, err)
	}
}

// runCLI submits jobs 0..n-1 (n <= 0: until stop is closed), one
// `scribe submit --nats-url url --store-id id` process each, as the
// store's submitter (its password in the environment).
func (p *producer) runCLI(url, id string, n int, stop <-chan struct{}) {
	env := []string{"SCRIBE_NATS_PASSWORD=" + natsSubmitPass(id)}
	for i := 0; n <= 0 || i < n; i++ {
		select {
		case <-stop:
			return
		default:
		}
		r, err := runProcess(scribeBin, env, nil, "submit", "--nats-url", url, "--user", natsSubmitUser(id), "--store-id", id,
			"--id", fmt.Sprintf("p%d-%d", p.k, i), "append", clusterLogFile, fmt.Sprintf("p%d %d\n", p.k, i))
		switch {
		case err != nil:
		case r.code != 0:
			err = fmt.Errorf("exit %d: %s", r.code, strings.TrimSpace(r.stderr))
		}
		p.note(i, err)
	}
}

// openSubmitter opens a client of store id through url as its submitter.
func openSubmitter(t *testing.T, id, url string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cl, err := client.OpenRemote(ctx, id, queue.Remote{URL: url, User: natsSubmitUser(id), Password: natsSubmitPass(id)})
	require.NoError(t, err, "OpenRemote %s", url)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// producerLines parses the producers' file: each line's producer and job.
func producerLines(t testing.TB, content string) (lines [][2]int) {
	t.Helper()
	for n, l := range strings.Split(strings.TrimSuffix(content, "\n"), "\n") {
		if l == "" && content == "" {
			break
		}
		var k, i int
		_, err := fmt.Sscanf(l, "p%d %d", &k, &i)
		require.NoError(t, err, "line %d %q: torn or foreign", n+1, l)
		require.Equal(t, fmt.Sprintf("p%d %d", k, i), l, "line %d", n+1)
		lines = append(lines, [2]int{k, i})
	}
	return lines
}

// allApplied reports whether every job whose Submit returned nil has its
// line in content.
func allApplied(t testing.TB, content string, prods []*producer) bool {
	t.Helper()
	seen := map[[2]int]bool{}
	for _, l := range producerLines(t, content) {
		seen[l] = true
	}
	for _, p := range prods {
		ok, _, _ := p.snapshot()
		for _, s := range ok {
			if !seen[[2]int{p.k, s.i}] {
				return false
			}
		}
	}
	return true
}

// waitAllApplied waits until the store's file holds the line of every job
// whose Submit returned nil.
func waitAllApplied(t *testing.T, store string, prods []*producer, within time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	path := filepath.Join(store, clusterLogFile)
	require.Eventually(t, func() bool { return allApplied(t, readFile(t, path), prods) }, within, 50*time.Millisecond,
		"the jobs whose Submit returned were not all applied")
	return time.Since(began)
}

// checkProducerLog checks the producers' file: every line is a job a
// producer submitted, at most once; every job whose Submit returned nil
// is there exactly once; each producer's lines are in the order it
// submitted them. It returns the number of lines.
func checkProducerLog(t *testing.T, content string, prods []*producer) int {
	t.Helper()
	byK := map[int]*producer{}
	for _, p := range prods {
		byK[p.k] = p
	}
	count := map[[2]int]int{}
	last := map[int]int{}
	lines := producerLines(t, content)
	for n, l := range lines {
		k, i := l[0], l[1]
		count[l]++
		p := byK[k]
		if !assert.NotNil(t, p, "line %d: p%d is no producer of this test", n+1, k) {
			continue
		}
		_, _, tried := p.snapshot()
		assert.Less(t, i, tried, "line %d: p%d %d was never submitted", n+1, k, i)
		if prev, ok := last[k]; ok {
			assert.Greater(t, i, prev, "line %d: p%d %d after p%d %d: out of the producer's order", n+1, k, i, k, prev)
		}
		last[k] = i
	}
	doubled := 0
	for l, c := range count {
		if c > 1 {
			doubled++
			if doubled <= 10 {
				t.Errorf("job p%d-%d applied %d times", l[0], l[1], c)
			}
		}
	}
	assert.Zero(t, doubled, "jobs applied more than once")
	lost := 0
	for _, p := range prods {
		ok, bad, _ := p.snapshot()
		for _, s := range ok {
			if count[[2]int{p.k, s.i}] != 1 {
				lost++
				if lost <= 10 {
					t.Errorf("job p%d-%d: Submit returned nil but it is not applied", p.k, s.i)
				}
			}
		}
		if len(bad) > 0 {
			p.mu.Lock()
			t.Logf("producer p%d (%s): %d Submits failed (fate unknown; each applied at most once, checked): %v", p.k, p.via, len(bad), p.errs)
			p.mu.Unlock()
		}
	}
	assert.Zero(t, lost, "jobs lost")
	return len(lines)
}

// pauses returns the longest gap between successive successful Submit
// returns across all producers (the pause everyone saw) and the longest
// any one producer saw, between from and to.
func pauses(prods []*producer, from, to time.Time) (all, one time.Duration, who string) {
	var times []time.Time
	for _, p := range prods {
		ok, _, _ := p.snapshot()
		prev := from
		for _, s := range ok {
			if s.at.Before(from) || s.at.After(to) {
				continue
			}
			times = append(times, s.at)
			if g := s.at.Sub(prev); g > one {
				one, who = g, fmt.Sprintf("p%d (%s)", p.k, p.via)
			}
			prev = s.at
		}
	}
	sort.Slice(times, func(a, b int) bool { return times[a].Before(times[b]) })
	prev := from
	for _, at := range times {
		all = max(all, at.Sub(prev))
		prev = at
	}
	return all, one, who
}

// requireAlive fails the test if d exited.
func requireAlive(t *testing.T, d *daemon, what string) {
	t.Helper()
	select {
	case <-d.exited:
		t.Fatalf("%s exited (%v); log:\n%s", what, d.err, d.log.String())
	default:
	}
}

// A 3-node JetStream cluster of `scribe serve --nats-config`
// processes, the store's stream R3, producers connected to nodes 1 and 2
// (Go clients and `scribe submit` processes), the writer to node 3: every
// job is applied exactly once, in each producer's order, and its outcome
// is recorded.
func TestClusterThreeNodes(t *testing.T) {
	t.Parallel()
	heavy(t)
	e := startScribeCluster(t, newStore(t))
	w := e.startWriter(t, e.c.URLs[2])
	disc, err := queue.ReadDiscovery(e.store)
	require.NoError(t, err)
	assert.Equal(t, queue.QueueNATS, disc.Queue, "daemon.json")
	assert.Equal(t, e.c.URLs[2], disc.URL, "daemon.json")
	assert.Contains(t, w.log.String(), "holding the store's claim")

	js := e.daemonConn(t)
	info, err := e.streamInfo(t.Context(), js, queue.StreamName(e.id))
	require.NoError(t, err)
	assert.Equal(t, 3, info.Config.Replicas, "the store's stream is R3")
	require.NotNil(t, info.Cluster)
	assert.Len(t, info.Cluster.Replicas, 2, "the stream's followers")
	t.Logf("stream %s: leader %s, followers %d", info.Config.Name, info.Cluster.Leader, len(info.Cluster.Replicas))

	const perGo, perCLI = 150, 10
	var prods []*producer
	var wg sync.WaitGroup
	began := time.Now()
	k := 0
	for node := range 2 {
		for range 2 {
			k++
			p := newProducer(k, fmt.Sprintf("go@%s", e.c.Names[node]))
			cl := openSubmitter(t, e.id, e.c.URLs[node])
			prods = append(prods, p)
			wg.Go(func() { p.runGo(cl, perGo, nil) })
		}
	}
	for node := range 2 {
		k++
		p := newProducer(k, fmt.Sprintf("cli@%s", e.c.Names[node]))
		prods = append(prods, p)
		wg.Go(func() { p.runCLI(e.c.URLs[node], e.id, perCLI, nil) })
	}
	wg.Wait()
	submitting := time.Since(began)
	total := 4*perGo + 2*perCLI
	for _, p := range prods {
		_, bad, _ := p.snapshot()
		assert.Empty(t, bad, "producer p%d (%s): failed Submits: %v", p.k, p.via, p.errs)
	}
	drain := waitAllApplied(t, e.store, prods, 60*time.Second)
	requireAlive(t, w, "the writer")
	n := checkProducerLog(t, readFile(t, filepath.Join(e.store, clusterLogFile)), prods)
	assert.Equal(t, total, n, "lines")
	t.Logf("%d jobs (%d Go producers on n1/n2, 2 scribe submit producers), writer on n3: submitted in %s (%.0f jobs/s), all applied %s later",
		total, 4, submitting.Round(time.Millisecond), float64(total)/submitting.Seconds(), drain.Round(time.Millisecond))

	// Every job's outcome is recorded, applied, through the status service.
	cl := openSubmitter(t, e.id, e.c.URLs[0])
	for _, p := range prods {
		ok, _, _ := p.snapshot()
		for _, s := range ok {
			id := fmt.Sprintf("p%d-%d", p.k, s.i)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			l, err := cl.Status(ctx, id)
			cancel()
			if assert.NoError(t, err, id) && assert.True(t, l.Found, id) {
				assert.Equal(t, queue.StatusApplied, l.Outcome.Status, id)
			}
		}
	}
	// And through `scribe status --nats-url` from a host that has only
	// the store's ID.
	r := runWith(t, scribeBin, []string{"SCRIBE_NATS_PASSWORD=" + natsSubmitPass(e.id)}, nil,
		"status", "--nats-url", e.c.URLs[1], "--user", natsSubmitUser(e.id), "--store-id", e.id, "--json", "p5-0")
	assert.Equal(t, 0, r.code, "scribe status: %s", r.stderr)
	assert.Contains(t, r.stdout, `"applied"`)
}

// Under continuous load, the store's stream leader's node is
// SIGKILLed; then (the node restarted) the node the writer is connected
// to. Producers retry with the same IDs, those on a killed node reconnect
// to another; every job whose Submit returned nil is applied exactly
// once, in each producer's order, and the writer keeps serving. The
// longest pause producers saw is logged.
func TestClusterLeaderLoss(t *testing.T) {
	t.Parallel()
	heavy(t)
	e := startScribeCluster(t, newStore(t))
	w := e.startWriter(t, e.c.URLs[2]) // node 3 only: its reconnects go to the servers the cluster advertises
	js := e.daemonConn(t)
	stream := queue.StreamName(e.id)
	e.waitReplicasCurrent(t, js, stream)

	var all []*producer
	k := 0
	// phase loads the cluster, SIGKILLs the node victim picks (given the
	// stream's leader) mid-load, and checks what the producers got.
	phase := func(name string, victim func(leader string) int) {
		t.Logf("--- %s", name)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var prods []*producer
		for node := range 2 {
			for range 2 {
				k++
				p := newProducer(k, "go@"+e.c.Names[node])
				cl := openSubmitter(t, e.id, e.c.URLs[node])
				prods = append(prods, p)
				wg.Go(func() { p.runGo(cl, 0, stop) })
			}
		}
		k++
		cli := newProducer(k, "cli@all")
		prods = append(prods, cli)
		wg.Go(func() { cli.runCLI(e.c.URL(), e.id, 0, stop) })
		all = append(all, prods...)
		defer func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			wg.Wait()
		}()

		began := time.Now()
		require.Eventually(t, func() bool {
			for _, p := range prods {
				if p.okSince(began) < 10 {
					return false
				}
			}
			return true
		}, 60*time.Second, 20*time.Millisecond, "the producers get going")
		time.Sleep(time.Second) // load, for a while

		info, err := e.streamInfo(t.Context(), js, stream)
		require.NoError(t, err)
		require.NotNil(t, info.Cluster)
		v := victim(info.Cluster.Leader)
		require.GreaterOrEqual(t, v, 0, "stream leader %q", info.Cluster.Leader)
		e.nodes[v].kill(t)
		killed := time.Now()
		t.Logf("SIGKILLed %s (the stream's leader is %s; the writer is connected to %s)", e.c.Names[v], info.Cluster.Leader, e.c.Names[2])

		require.Eventually(t, func() bool {
			for _, p := range prods {
				if p.okSince(killed) < 10 {
					return false
				}
			}
			return true
		}, 90*time.Second, 50*time.Millisecond, "every producer submits again after %s's loss", e.c.Names[v])
		resumed := time.Now()
		time.Sleep(time.Second) // load, for a while
		close(stop)
		wg.Wait()
		ended := time.Now()

		// 60 s: a job delivered to a connection that died is delivered
		// again after the consumer's AckWait (30 s), if it is still queued.
		if !assert.Eventually(t, func() bool { return allApplied(t, readFile(t, filepath.Join(e.store, clusterLogFile)), all) },
			60*time.Second, 50*time.Millisecond, "%s: the jobs whose Submit returned were not all applied (nothing lost, promise 1)", name) {
			e.logQueue(t, js)
			e.logMissing(t, all, w)
			t.FailNow()
		}
		drain := time.Since(ended)
		requireAlive(t, w, "the writer")
		n := checkProducerLog(t, readFile(t, filepath.Join(e.store, clusterLogFile)), all)
		gap, one, who := pauses(prods, began, ended)
		submits := 0
		for _, p := range prods {
			ok, _, _ := p.snapshot()
			submits += len(ok)
		}
		t.Logf("%s: %d Submits returned nil in %s; every producer submitted again %s after the kill; longest pause across all producers %s, longest of one producer %s (%s); all applied %s after the load stopped; %d lines in the file",
			name, submits, ended.Sub(began).Round(time.Millisecond), resumed.Sub(killed).Round(time.Millisecond),
			gap.Round(time.Millisecond), one.Round(time.Millisecond), who, drain.Round(time.Millisecond), n)
		if reconnects := strings.Count(w.log.String(), "NATS reconnected"); reconnects > 0 {
			t.Logf("the writer reconnected %d times so far", reconnects)
		}
	}

	phase("stream leader lost", func(leader string) int { return e.c.index(leader) })
	var killed int
	for i, n := range e.nodes {
		if n.killed {
			killed = i
		}
	}
	e.restartNode(t, killed)
	e.waitReplicasCurrent(t, js, stream)
	e.waitReplicasCurrent(t, js, "KV_"+claim.Bucket)
	phase("the writer's node lost", func(string) int { return 2 })
	assert.Contains(t, w.log.String(), "NATS reconnected", "the writer lost its server and reconnected to another")
	requireAlive(t, w, "the writer")
	// The writer stops cleanly (releasing its claim) with the cluster
	// whole again.
	e.restartNode(t, 2)
	w.stop(t)
}

// markScript is an exec command that checks that it runs alone: it
// creates the marker file $MARK exclusively (set -C), or reports an
// overlap and fails; it logs enter and leave lines in $TRACE, with its
// job, epoch and pid, sleeps $1 seconds inside, and removes the marker.
const markScript = `set -C
if ! echo "$SCRIBE_JOB_ID $SCRIBE_EPOCH $$" 2>/dev/null > "$MARK"; then
  echo "overlap $SCRIBE_JOB_ID $SCRIBE_EPOCH $$ inside: $(cat "$MARK")" >> "$TRACE"
  echo "OVERLAP: $(cat "$MARK") is inside" >&2
  exit 3
fi
echo "enter $SCRIBE_JOB_ID $SCRIBE_EPOCH $$" >> "$TRACE"
sleep "$1"
echo "leave $SCRIBE_JOB_ID $SCRIBE_EPOCH $$" >> "$TRACE"
rm -f "$MARK"
`

// markJob is an exec job of the marker command that stays inside secs.
func markJob(id, secs string) *queue.Job {
	return &queue.Job{ID: id, Ops: []queue.Op{{Kind: queue.OpExec, Name: "mark", Args: []string{secs}}}}
}

// spawnStandby starts a writer daemon of the store that finds the claim
// held, and waits until it says it stands by.
func (e *clusterEnv) spawnStandby(t *testing.T, extra ...string) *daemon {
	t.Helper()
	d := spawnDaemon(t, e.store, daemonEnv, writerArgs(e.c.URL(), extra...)...)
	waitDaemonLog(t, d, "standing by: another daemon holds the store's claim", 30*time.Second)
	assert.NotContains(t, d.log.String(), "holding the store's claim", "a standby")
	return d
}

// waitDaemonLog waits until d's log says what.
func waitDaemonLog(t *testing.T, d *daemon, what string, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		return strings.Contains(d.log.String(), what)
	}, within, 10*time.Millisecond, "daemon pid %d never logged %q; log:\n%s", d.cmd.Process.Pid, what, d.log)
}

// copyToTemp copies src to a new file in a temporary folder.
func copyToTemp(t *testing.T, src string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	require.NoError(t, os.WriteFile(dst, b, 0o600))
	return dst
}

// journalOutcomes reads every outcome of a journal no writer holds,
// oldest first by stream sequence, and its meta.
func journalOutcomes(t *testing.T, path string) (outs []*queue.Outcome, info queue.JournalInfo) {
	t.Helper()
	j, err := journal.OpenReadOnly(path, 5*time.Second)
	require.NoError(t, err)
	defer j.Close()
	outs, err = j.Recent(journal.OutcomeFilter{})
	require.NoError(t, err)
	info, err = j.Info()
	require.NoError(t, err)
	slices.SortFunc(outs, func(a, b *queue.Outcome) int { return cmpUint(a.Seq, b.Seq) })
	return outs, info
}

// Two daemons for the same store against the cluster. One
// holds the claim and applies, the other stands by; the journal's epochs
// never interleave, and an exec command that checks a marker file under
// the store lock never finds another run inside. SIGKILL the holder: the
// standby takes over within the claim TTL plus 3 s, nothing lost or
// doubled. Then the new holder is paused with SIGSTOP, mid exec run, for
// three claim TTLs: a third daemon takes the claim over, and the paused
// one, resumed, exits non-zero and commits nothing more.
func TestClusterTwoDaemonsOneWriter(t *testing.T) {
	// Not parallel: it times processes (the standby's take-over within
	// the claim TTL + 3 s), and the other tests' load would time the
	// machine instead.
	const ttl = time.Second
	e := startScribeCluster(t, newStore(t))
	out := t.TempDir()
	mark, trace := filepath.Join(out, "marker"), filepath.Join(out, "trace")
	writeConfig(t, e.store, fmt.Sprintf("[exec.mark]\nprogram = \"/bin/sh\"\nargs = %s\nallow_args = [\"[0-9.]+\"]\ntimeout = \"30s\"\nenv = { MARK = %s, TRACE = %s }\n",
		tomlStrings([]string{"-c", markScript, "mark"}), tomlString(mark), tomlString(trace)), 0o600)
	extra := []string{"--claim-ttl", ttl.String()}

	a := e.startWriter(t, e.c.URL(), extra...)
	waitDaemonLog(t, a, "holding the store's claim", 5*time.Second)
	b := e.spawnStandby(t, extra...)

	// Load: two append producers and one of marker runs, through all nodes.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var prods []*producer
	for k := 1; k <= 2; k++ {
		p := newProducer(k, "go@all")
		cl := openSubmitter(t, e.id, e.c.URL())
		prods = append(prods, p)
		wg.Go(func() { p.runGo(cl, 0, stop) })
	}
	// The marker runs are applied one at a time (Apply), so that they
	// never queue up faster than they run.
	execCl := openSubmitter(t, e.id, e.c.URL())
	var execMu sync.Mutex
	var execDone []string // exec jobs whose outcome their caller got, or that were queued
	execErrs := map[string]int{}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			j := markJob(fmt.Sprintf("x-%d", i), "0.01")
			_, err := execCl.Apply(ctx, j)
			cancel()
			execMu.Lock()
			if err != nil {
				execErrs[err.Error()]++
			} else {
				execDone = append(execDone, j.ID)
			}
			execMu.Unlock()
		}
	})
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()
	logPath := filepath.Join(e.store, clusterLogFile)
	loaded := func(since time.Time, n int) func() bool {
		return func() bool {
			for _, p := range prods {
				if p.okSince(since) < n {
					return false
				}
			}
			return true
		}
	}
	began := time.Now()
	require.Eventually(t, loaded(began, 30), 60*time.Second, 20*time.Millisecond, "the producers get going")
	require.Eventually(t, func() bool { return len(producerLines(t, readFile(t, logPath))) >= 20 }, 30*time.Second, 20*time.Millisecond, "A applies")
	assert.NotContains(t, b.log.String(), "holding the store's claim", "B stands by while A holds the claim")

	// SIGKILL the holder: B takes over.
	a.kill(t)
	killedA := time.Now()
	waitDaemonLog(t, b, "took over the store's claim", 10*time.Second+ttl)
	waitDaemonLog(t, b, "holding the store's claim", 10*time.Second)
	t.Logf("A SIGKILLed; B logged that it took the claim over %s later", time.Since(killedA).Round(time.Millisecond))
	require.Eventually(t, func() bool {
		disc, err := queue.ReadDiscovery(e.store)
		return err == nil && disc.PID == b.cmd.Process.Pid
	}, 30*time.Second, 10*time.Millisecond, "B serves")
	require.Eventually(t, loaded(time.Now(), 20), 60*time.Second, 20*time.Millisecond, "the producers keep going with B")

	// SIGSTOP phase: B holds, C stands by. A long marker run is B's; B is
	// paused while it runs, when no journal transaction is in flight.
	c := e.spawnStandby(t, extra...)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	require.NoError(t, execCl.Submit(ctx, markJob("stop-1", "2")))
	cancel()
	execMu.Lock()
	execDone = append(execDone, "stop-1")
	execMu.Unlock()
	require.Eventually(t, func() bool { return strings.HasPrefix(readFile(t, mark), "stop-1 ") }, 30*time.Second, 5*time.Millisecond,
		"B runs the long marker command")
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGSTOP))
	stoppedB := time.Now()
	t.Cleanup(func() { _ = b.cmd.Process.Signal(syscall.SIGCONT) }) // a failed test must not leave it stopped
	waitDaemonLog(t, c, "took over the store's claim", 10*time.Second+ttl)
	t.Logf("B SIGSTOPped; C logged that it took the claim over %s later", time.Since(stoppedB).Round(time.Millisecond))
	if d := 3*ttl - time.Since(stoppedB); d > 0 {
		time.Sleep(d) // B stays stopped for three claim TTLs
	}
	requireAlive(t, b, "B (stopped)")
	select {
	case <-c.exited:
		t.Fatalf("C exited: %v\n%s", c.err, c.log)
	default:
	}
	disc, err := queue.ReadDiscovery(e.store)
	require.NoError(t, err)
	assert.Equal(t, b.cmd.Process.Pid, disc.PID, "C cannot serve while B, stopped, holds the daemon lock on this host")
	// What B has committed, as the journal file holds it while B is
	// stopped (a copy: B holds the file's lock).
	snap := copyToTemp(t, journal.Path(e.store))
	snapOuts, snapInfo := journalOutcomes(t, snap)
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGCONT))
	resumedB := time.Now()
	select {
	case <-b.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("B, resumed after losing its claim, is still running; log:\n%s", b.log)
	}
	exitedB := time.Now()
	b.killed = true // its non-zero exit is expected: no complaint at cleanup
	var ee *exec.ExitError
	if assert.ErrorAs(t, b.err, &ee, "B must exit non-zero once resumed: its claim is lost") {
		assert.NotZero(t, ee.ExitCode(), "B's exit code")
	}
	assert.Regexp(t, `lost the store's claim|another daemon is the store's writer now`, b.log.String(), "B says why it stops")
	t.Logf("B resumed after %s stopped; it exited (%v) %s later", resumedB.Sub(stoppedB).Round(time.Millisecond), b.err, exitedB.Sub(resumedB).Round(time.Millisecond))
	waitDaemonLog(t, c, "holding the store's claim", 10*time.Second)
	require.Eventually(t, func() bool {
		disc, err := queue.ReadDiscovery(e.store)
		return err == nil && disc.PID == c.cmd.Process.Pid
	}, 30*time.Second, 10*time.Millisecond, "C serves once B is gone")
	require.Eventually(t, loaded(time.Now(), 20), 60*time.Second, 20*time.Millisecond, "the producers keep going with C")
	stopLoad()

	allProds := prods
	waitAllApplied(t, e.store, allProds, 60*time.Second)
	execMu.Lock()
	wantExec := slices.Clone(execDone)
	assert.Empty(t, execErrs, "failed exec Submits")
	execMu.Unlock()
	// Every exec job decided (through C), then C stopped cleanly.
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		l, err := execCl.Status(ctx, wantExec[len(wantExec)-1])
		return err == nil && l.Found
	}, 60*time.Second, 50*time.Millisecond, "the last exec job is decided")
	c.stop(t)

	checkProducerLog(t, readFile(t, logPath), allProds)
	outs, info := journalOutcomes(t, journal.Path(e.store))
	byID := map[string]*queue.Outcome{}
	for _, o := range outs {
		byID[o.ID] = o
	}
	t.Logf("journal: %d outcomes, epoch %d, last seq %d", info.Outcomes, info.Epoch, info.LastSeq)
	assert.Equal(t, len(outs), info.Outcomes, "every outcome is settled")

	// Epochs never interleave: in stream order, they never go back.
	for i := 1; i < len(outs); i++ {
		if outs[i].Epoch < outs[i-1].Epoch {
			t.Errorf("epochs interleave: %s (seq %d) epoch %d after %s (seq %d) epoch %d",
				outs[i].ID, outs[i].Seq, outs[i].Epoch, outs[i-1].ID, outs[i-1].Seq, outs[i-1].Epoch)
		}
	}
	// The marker was never found taken: no run overlapped another.
	traceText := readFile(t, trace)
	assert.NotContains(t, traceText, "overlap", "a marker run found another inside")
	inside := ""
	for n, l := range strings.Split(strings.TrimSpace(traceText), "\n") {
		f := strings.Fields(l)
		require.Len(t, f, 4, "trace line %d %q", n+1, l)
		switch f[0] {
		case "enter":
			assert.Empty(t, inside, "trace line %d: %s entered while %s was inside", n+1, f[1], inside)
			inside = f[1]
		case "leave":
			assert.Equal(t, inside, f[1], "trace line %d", n+1)
			inside = ""
		}
	}
	interrupted := 0
	for _, id := range wantExec {
		o := byID[id]
		if !assert.NotNil(t, o, "exec job %s has no outcome", id) {
			continue
		}
		switch {
		case o.Applied():
		case o.Reason == queue.ReasonInterrupted:
			interrupted++ // a run its writer died or was stopped in
		default:
			t.Errorf("exec job %s: %s %s: %s (%+v)", id, o.Status, o.Reason, o.Detail, o.Exec)
		}
	}
	t.Logf("%d marker runs, %d of them interrupted by a lost writer", len(wantExec), interrupted)
	assert.LessOrEqual(t, interrupted, 2, "at most A's run at its SIGKILL and B's at its SIGSTOP")

	// Takeover: from A's SIGKILL to the first job decided by B.
	var firstB *queue.Outcome
	for _, o := range outs {
		if o.At.After(killedA) && (firstB == nil || o.At.Before(firstB.At)) {
			firstB = o
		}
	}
	require.NotNil(t, firstB, "nothing decided after A's SIGKILL")
	takeover := firstB.At.Sub(killedA)
	t.Logf("takeover: A SIGKILLed, B decided its first job (%s, epoch %d) %s later (claim TTL %s)", firstB.ID, firstB.Epoch, takeover.Round(time.Millisecond), ttl)
	assert.Less(t, takeover, ttl+3*time.Second, "the standby takes over within the claim TTL + 3 s")
	maxEpochA := uint64(0)
	for _, o := range outs {
		if o.At.Before(killedA) {
			maxEpochA = max(maxEpochA, o.Epoch)
		}
	}
	for _, o := range outs {
		if o.Epoch > maxEpochA && o.Applied() {
			t.Logf("takeover: B's first applied job in an epoch of its own (%s, epoch %d) %s after A's SIGKILL", o.ID, o.Epoch, o.At.Sub(killedA).Round(time.Millisecond))
			break
		}
	}

	// B, stopped past its claim's expiry and resumed, committed nothing:
	// the outcomes of B's time (and before) are exactly those the
	// journal held while B was stopped; stop-1, whose run B was in, was
	// decided after B had exited (interrupted, by C); everything of a
	// later epoch was decided after B had exited.
	t.Logf("journal while B was stopped: %d outcomes (%d settled), epoch %d", snapInfo.Outcomes, len(snapOuts), snapInfo.Epoch)
	snapByID := map[string]*queue.Outcome{}
	for _, o := range snapOuts {
		snapByID[o.ID] = o
	}
	old := 0
	for _, o := range outs {
		if o.ID == "stop-1" {
			assert.True(t, o.At.After(exitedB), "stop-1 decided at %s, before B exited at %s", o.At, exitedB)
			assert.Equal(t, queue.ReasonInterrupted, o.Reason, "stop-1: %s %s", o.Status, o.Detail)
			continue
		}
		if o.Epoch <= snapInfo.Epoch {
			old++
			assert.True(t, o.At.Before(stoppedB), "%s (epoch %d) decided at %s, after B was stopped at %s", o.ID, o.Epoch, o.At, stoppedB)
			if s := snapByID[o.ID]; s != nil {
				assert.Equal(t, s, o, "a recorded outcome never changes")
			}
		} else {
			assert.True(t, o.At.After(exitedB), "%s (epoch %d) decided at %s, before B exited at %s", o.ID, o.Epoch, o.At, exitedB)
		}
	}
	assert.Equal(t, snapInfo.Outcomes, old, "outcomes of B's epochs and before: as many as when B was stopped")
	for _, o := range snapOuts {
		assert.Contains(t, byID, o.ID, "an outcome recorded while B was stopped is gone")
	}
}

// singleNodeConfig writes a plain nats-server configuration of one node
// on loopback with JetStream and the account layout for storeIDs, and
// returns the file and the client URL.
func singleNodeConfig(t *testing.T, storeIDs ...string) (conf, url string) {
	t.Helper()
	port := testkit.FreePorts(t, 1)[0]
	dir := t.TempDir()
	conf = filepath.Join(dir, "single.conf")
	text := fmt.Sprintf("server_name: single\nlisten: 127.0.0.1:%d\nmax_payload: 1114112\njetstream {\n  store_dir: %q\n}\n%s",
		port, filepath.Join(dir, "jetstream"), natsAccountsConf(storeIDs...))
	require.NoError(t, os.WriteFile(conf, []byte(text), 0o600))
	return conf, fmt.Sprintf("nats://127.0.0.1:%d", port)
}

// filesOf is a store's files (not .scribe), relative path → content.
func filesOf(t *testing.T, store string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(store, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(store, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == ".scribe" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(path)
		files[rel] = string(b)
		return err
	}))
	return files
}

// `scribe serve --nats-url` against a plain nats-server
// binary (built from the module scribe depends on) works as the embedded
// default does: the same workload gives the same exit codes, outcomes
// and files, byte for byte. A pre-existing stream of the store's name
// with another retention stops the daemon, naming the difference.
func TestClusterPlainNATSServer(t *testing.T) {
	t.Parallel()
	embedded := newStore(t)
	remote, err := filepath.EvalSymlinks(newStore(t))
	require.NoError(t, err)
	conflicting, err := filepath.EvalSymlinks(newStore(t))
	require.NoError(t, err)
	id, conflictID := queue.StoreID(remote), queue.StoreID(conflicting)
	conf, url := singleNodeConfig(t, id, conflictID)
	srv := startNATSProcess(t, natsServerBin(t), conf)
	srv.waitReady(t, url)

	startDaemon(t, embedded)
	d := startDaemonEnv(t, remote, daemonEnv, "--nats-url", url, "--user", natsDaemonUser)
	disc, err := queue.ReadDiscovery(remote)
	require.NoError(t, err)
	assert.Equal(t, queue.QueueNATS, disc.Queue)
	assert.Equal(t, url, disc.URL)

	steps := [][]string{
		{"--id", "s1", "put", "notes.txt", "hello\n"},
		{"--id", "s2", "append", "notes.txt", "world\n"},
		{"--id", "s3", "put", "data.json", `{"a":1,"b":{"c":2,"x":true}}`},
		{"--id", "s4", "merge", "data.json", `{"b":{"c":null,"d":3},"e":[1,2]}`},
		{"--id", "s5", "put", "gone.txt", "soon gone"},
		{"--id", "s6", "delete", "gone.txt"},
		{"--id", "s7", "--if-match", "absent", "put", "notes.txt", "clobber"},
		{"--id", "s8", "merge", "notes.txt", `{"a":1}`},
		{"--id", "s9", "put", "../escape.txt", "out"},
		{"--id", "s10", "put", ".scribe/x", "in"},
		{"--id", "s11", "--if-match", "sha256:" + strings.Repeat("0", 64), "append", "notes.txt", "no"},
		{"--id", "s12", "put", "sub/dir/deep.txt", "deep\n"},
		{"--id", "s1", "put", "notes.txt", "hello\n"}, // the same job again: its first outcome
		{"--id", "s1", "put", "notes.txt", "other"},   // the same ID, another job: a conflict
	}
	remoteEnv := []string{"SCRIBE_NATS_PASSWORD=" + natsSubmitPass(id)}
	for _, step := range steps {
		re := runWith(t, scribeBin, nil, nil, append([]string{"submit", "--store", embedded, "--wait=30s", "--json"}, step...)...)
		rr := runWith(t, scribeBin, remoteEnv, nil, append([]string{"submit", "--nats-url", url, "--user", natsSubmitUser(id),
			"--store-id", id, "--wait=30s", "--json"}, step...)...)
		oe, or := jsonOutcome(re.stdout), jsonOutcome(rr.stdout)
		what := fmt.Sprintf("%q", step)
		assert.Equal(t, re.code, rr.code, "%s: exit code (embedded stderr %q, nats stderr %q)", what, re.stderr, rr.stderr)
		if assert.Equal(t, oe == nil, or == nil, "%s: an outcome on one side only: %q / %q", what, re.stdout, rr.stdout) && oe != nil {
			assert.Equal(t, oe.Status, or.Status, what)
			assert.Equal(t, oe.Reason, or.Reason, what)
			// A conflict names when the first job was recorded, on each
			// side at its own instant.
			assert.Equal(t, recordedAt.ReplaceAllString(oe.Detail, "recorded TIME"), recordedAt.ReplaceAllString(or.Detail, "recorded TIME"), what)
			assert.Equal(t, oe.Mode, or.Mode, what)
		}
		if oe != nil {
			t.Logf("%-70s exit %d: %s %s", what, re.code, oe.Status, oe.Reason)
		} else {
			t.Logf("%-70s exit %d (no outcome): %s", what, re.code, strings.TrimSpace(re.stderr))
		}
	}
	assert.Equal(t, filesOf(t, embedded), filesOf(t, remote), "the stores' files")
	assert.Equal(t, "hello\nworld\n", readFile(t, filepath.Join(remote, "notes.txt")))
	t.Logf("files: %v", filesOf(t, remote))
	requireAlive(t, d, "the daemon on the plain nats-server")

	// A stream of the store's name that someone created with limits
	// retention instead of work-queue: the daemon refuses to run.
	nc, err := nats.Connect(url, nats.UserInfo(natsDaemonUser, natsDaemonPass))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cfg := queue.StreamConfig(conflictID, queue.Limits{Replicas: 1})
	require.NotEqual(t, jetstream.LimitsPolicy, cfg.Retention)
	cfg.Retention = jetstream.LimitsPolicy
	_, err = js.CreateStream(t.Context(), cfg)
	require.NoError(t, err)
	r := runWith(t, scribeBin, daemonEnv, nil, "serve", "--store", conflicting, "--nats-url", url, "--user", natsDaemonUser)
	assert.NotEqual(t, 0, r.code, "serve against a conflicting stream; stderr:\n%s", r.stderr)
	assert.Less(t, r.duration, 30*time.Second)
	assert.Contains(t, r.stderr, queue.StreamName(conflictID), "the message names the stream")
	assert.Regexp(t, `retention \S+ where scribe needs`, r.stderr, "the message names the difference")
	t.Logf("serve against the conflicting stream: exit %d in %s:\n%s", r.code, r.duration.Round(time.Millisecond), tailLines(r.stderr, 3))
	s, err := js.Stream(t.Context(), queue.StreamName(conflictID))
	require.NoError(t, err)
	assert.Equal(t, jetstream.LimitsPolicy, s.CachedInfo().Config.Retention, "the stream is left as it was")
	_, err = os.Stat(filepath.Join(conflicting, ".scribe", "daemon.json"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "no discovery file for a daemon that did not serve")
}

// jsonOutcome decodes the outcome `submit --json` printed, nil if none.
func jsonOutcome(stdout string) *queue.Outcome {
	o, err := queue.DecodeOutcome([]byte(strings.TrimSpace(stdout)))
	if err != nil || o.ID == "" {
		return nil
	}
	return o
}

// tailLines is the last n lines of s.
func tailLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(len(l)-n, 0):], "\n")
}

// recordedAt is the time an id_conflict's detail gives the first job.
var recordedAt = regexp.MustCompile(`recorded [0-9TZ:.-]+`)
