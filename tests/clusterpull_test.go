package tests

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// On a cluster of scribe nodes, a consumer queue.CreateConsumer returns
// answers its first pull request. One pulled just after its stream was
// created otherwise finds no leader now and then (1 in 10 here), and the
// writer's iterator, which drops that answer, would pull again only 10 s
// later: a high job submitted meanwhile was decided after normal ones.
// Not parallel: the nodes bind ports chosen free beforehand.
func TestClusterConsumerAnswersItsFirstPull(t *testing.T) {
	e := startScribeCluster(t, newStore(t))
	nc, err := nats.Connect(e.c.URLs[0], nats.UserInfo(natsDaemonUser, natsDaemonPass))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := t.Context()
	for i := range 20 {
		stream, err := queue.CreateStream(ctx, js, e.id, queue.Limits{Replicas: 3})
		require.NoError(t, err)
		_, err = queue.CreateConsumer(ctx, stream, queue.HighConsumerName, queue.HighJobsSubject(e.id))
		require.NoError(t, err)
		_, err = nc.Request("$JS.API.CONSUMER.MSG.NEXT."+queue.StreamName(e.id)+"."+queue.HighConsumerName, []byte(`{"batch":1,"no_wait":true}`), 5*time.Second)
		require.NoError(t, err, "pull %d", i) // "no messages" is an answer
		require.NoError(t, js.DeleteStream(ctx, queue.StreamName(e.id)))
	}
}
