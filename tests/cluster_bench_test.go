package tests

// The queue on a 3-node JetStream cluster (R3) against the embedded single
// node, side by side in one run (the README's performance section). Only with -bench:
//
//	go test -run '^$' -bench ClusterVsEmbedded -benchtime 1x -count 3 ./tests
//
// Each producer goroutine has a client of its own and Applies jobs that
// append a 100-byte line to one file: a counted job is applied, its file and
// the journal fsynced. Embedded: `scribe serve --store S`, clients through
// its discovery file. Cluster: three `scribe serve --nats-config` nodes
// (processes), the writer a fourth process, `scribe serve --store S
// --nats-url <node 3> --replicas 3`, and producers connected to nodes 1 and
// 2 in turn, as producers on other hosts would be.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// clusterBenchJobs is how many jobs each run applies, over all producers.
const clusterBenchJobs = 3200

func BenchmarkClusterVsEmbedded(b *testing.B) {
	for _, producers := range []int{8, 32} {
		var rates [2]float64
		for i, name := range []string{"embedded", "cluster-r3"} {
			b.Run(fmt.Sprintf("%s/producers=%d", name, producers), func(b *testing.B) {
				open := benchEmbedded(b)
				if name == "cluster-r3" {
					open = benchCluster(b)
				}
				var total time.Duration
				for b.Loop() {
					total += applyAll(b, open, producers, clusterBenchJobs)
				}
				rates[i] = float64(clusterBenchJobs*b.N) / total.Seconds()
				b.ReportMetric(rates[i], "jobs/s")
			})
		}
		if rates[0] > 0 && rates[1] > 0 {
			b.Logf("producers=%d: cluster-r3 %.0f jobs/s, embedded %.0f jobs/s: %.2f×", producers, rates[1], rates[0], rates[1]/rates[0])
		}
	}
}

// opener opens the client of producer k.
type opener func(ctx context.Context, k int) (*client.Client, error)

// benchEmbedded starts a daemon on a fresh store, with its embedded queue.
func benchEmbedded(b *testing.B) opener {
	store := newStore(b)
	startDaemon(b, store)
	return func(ctx context.Context, _ int) (*client.Client, error) {
		return client.Open(ctx, store, client.WithRoute(client.RouteRequire))
	}
}

// benchCluster starts a 3-node cluster of scribe nodes and a writer for a
// fresh store connected to node 3; producer k connects to node 1 or 2.
func benchCluster(b *testing.B) opener {
	store := newStore(b)
	real, err := filepath.EvalSymlinks(store)
	require.NoError(b, err)
	id := queue.StoreID(real)
	c := writeClusterConfigs(b, 3, id)
	nodes := make([]*daemon, 3)
	for i := range nodes {
		nodes[i] = startScribeNode(b, c.Confs[i])
	}
	for i, n := range nodes {
		n.waitReady(b, c.URLs[i])
	}
	spawnDaemon(b, store, []string{"SCRIBE_NATS_PASSWORD=" + natsDaemonPass},
		"--nats-url", c.URLs[2], "--user", natsDaemonUser, "--replicas", "3")
	require.Eventually(b, func() bool {
		d, err := queue.ReadDiscovery(real)
		return err == nil && d.Queue == queue.QueueNATS
	}, 30*time.Second, 20*time.Millisecond, "the writer does not serve")
	return func(ctx context.Context, k int) (*client.Client, error) {
		urls := []string{c.URLs[k%2], c.URLs[(k+1)%2]}
		return client.OpenRemote(ctx, id, queue.Remote{URL: strings.Join(urls, ","), User: natsSubmitUser(id), Password: natsSubmitPass(id)})
	}
}

// applyAll has producers clients Apply jobs jobs in all, each appending a
// line, and returns how long it took from the first to the last outcome.
func applyAll(b *testing.B, open opener, producers, jobs int) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	clients := make([]*client.Client, producers)
	for k := range clients {
		cl, err := open(ctx, k)
		require.NoError(b, err)
		defer cl.Close()
		clients[k] = cl
	}
	line := []byte(strings.Repeat("x", benchLineBytes-1) + "\n")
	errs := make(chan error, producers)
	start := time.Now()
	var wg sync.WaitGroup
	for k, cl := range clients {
		wg.Go(func() {
			for i := k; i < jobs; i += producers {
				o, err := cl.Apply(ctx, &queue.Job{Ops: []queue.Op{{Kind: queue.OpAppend, Path: "log.txt", Data: line}}})
				if err == nil && !o.Applied() {
					err = fmt.Errorf("job %s: %s %s", o.ID, o.Reason, o.Detail)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
	return elapsed
}
