package tests

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// What docs/protocol.md section 9 says a submitter may subscribe to, and
// what it may do with JetStream, checked with nats.go against a real
// daemon. NATS checks a subscription's subject against the permission token
// by token, so the permission's "*" also admits a subscription to
// outcomes.>: it sees what outcomes.* sees (job IDs are one token).
func TestProtocolSubmitterSubscriptions(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	s := connectSubmitter(t, store)
	sid := s.disc.StoreID

	allowed := map[string]*nats.Subscription{}
	for _, subject := range []string{
		queue.OutcomeSubject(sid, "proto-1"),
		queue.OutcomeSubject(sid, "*"),
		queue.OutcomeSubject(sid, ">"),
	} {
		sub, err := s.nc.SubscribeSync(subject)
		require.NoError(t, err)
		allowed[subject] = sub
	}
	inbox, err := s.nc.SubscribeSync("_INBOX.>")
	require.NoError(t, err)

	refused := []string{
		"scribe." + sid + ".>",
		"scribe." + sid + ".*",
		"scribe.*.outcomes.*",
		"scribe." + sid + ".outcomes",
		queue.OutcomeSubject(sid, "*.>"),
		queue.StatusSubject(sid), // answering status requests: a fake status service
		queue.CancelSubject(sid), // answering cancel requests: a fake writer
		queue.JobsSubject(sid),
		"$JS.API.>",
		"$SRV.>",
	}
	for _, subject := range refused {
		_, err := s.nc.SubscribeSync(subject)
		require.NoError(t, err, "nats.go reports a refused subscription asynchronously")
	}
	require.NoError(t, s.nc.Flush())
	for _, subject := range refused {
		assert.Eventually(t, func() bool { return s.violation(subject) }, 5*time.Second, 10*time.Millisecond,
			"a submitter may not subscribe to %s", subject)
	}

	// A plain core-NATS publish (no reply, so no PubAck) is stored and
	// applied like a JetStream publish.
	require.NoError(t, s.nc.PublishMsg(&nats.Msg{Subject: queue.JobsSubject(sid), Header: nats.Header{"Nats-Msg-Id": {"proto-1"}},
		Data: rawJob(t, sid, "proto-1", queue.Op{Kind: queue.OpAppend, Path: "p.txt", Data: []byte("plain\n")})}))
	o := s.outcome(t, "proto-1")
	assert.Equal(t, queue.StatusApplied, o.Status, "%s: %s", o.Reason, o.Detail)
	assert.Equal(t, "plain\n", readFile(t, filepath.Join(store, "p.txt")))
	for subject, sub := range allowed {
		m, err := sub.NextMsg(10 * time.Second)
		if assert.NoError(t, err, "%s got the outcome", subject) {
			var got queue.Outcome
			require.NoError(t, json.Unmarshal(m.Data, &got))
			assert.Equal(t, "proto-1", got.ID, subject)
			assert.Equal(t, queue.OutcomeSubject(sid, "proto-1"), m.Subject)
		}
		assert.False(t, s.violation(subject), "%s is allowed", subject)
	}
	// Besides outcomes, outcomes.> gets only what someone addressed below
	// them: here JetStream's PubAck to a reply subject a submitter chose.
	deep := queue.OutcomeSubject(sid, "deep.reply")
	require.NoError(t, s.nc.PublishMsg(&nats.Msg{Subject: queue.JobsSubject(sid), Reply: deep,
		Data: rawJob(t, sid, "proto-deep", queue.Op{Kind: queue.OpAppend, Path: "deep.txt", Data: []byte("d")})}))
	m, err := allowed[queue.OutcomeSubject(sid, ">")].NextMsg(10 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, deep, m.Subject)
	assert.Contains(t, string(m.Data), `"stream":"`+queue.StreamName(sid)+`"`, "a PubAck")
	assert.Equal(t, queue.StatusApplied, s.outcome(t, "proto-deep").Status)
	for _, subject := range []string{queue.OutcomeSubject(sid, "*"), queue.OutcomeSubject(sid, ">")} {
		m, err := allowed[subject].NextMsg(10 * time.Second)
		require.NoError(t, err)
		assert.Equal(t, queue.OutcomeSubject(sid, "proto-deep"), m.Subject, subject)
	}

	// The JetStream client publishes (a request on the jobs subject, its
	// PubAck on _INBOX.…); the JetStream API, which managers and stream
	// look-ups use, is refused.
	dup, err := queue.Publish(t.Context(), s.js, sid, queue.JobsSubject(sid), "proto-2",
		rawJob(t, sid, "proto-2", queue.Op{Kind: queue.OpAppend, Path: "p.txt", Data: []byte("js\n")}))
	require.NoError(t, err)
	assert.False(t, dup)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err = s.js.Stream(ctx, queue.StreamName(sid))
	assert.Error(t, err)
	assert.Eventually(t, func() bool { return s.violation("$JS.API.STREAM.INFO." + queue.StreamName(sid)) },
		5*time.Second, 10*time.Millisecond)
	assert.Equal(t, queue.StatusApplied, s.outcome(t, "proto-2").Status)
	assert.Equal(t, "plain\njs\n", readFile(t, filepath.Join(store, "p.txt")))
	_, err = inbox.NextMsg(5 * time.Second)
	assert.NoError(t, err, "replies arrive on _INBOX.>")
}
