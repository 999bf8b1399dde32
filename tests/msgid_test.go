package tests

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// A message whose Nats-Msg-Id header and job ID disagree
// is rejected and kept as a dead letter, recorded under neither ID (either
// may be someone else's); a message without the header is accepted.
func TestMsgIDMismatchIsDeadLettered(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	s := connectSubmitter(t, store)
	sid := s.disc.StoreID
	op := func(data string) queue.Op { return queue.Op{Kind: queue.OpAppend, Path: "log.txt", Data: []byte(data)} }

	mismatched := rawJob(t, sid, "body-id", op("mismatched\n"))
	s.publish(t, "header-id", mismatched) // queue.Publish sends its id argument as Nats-Msg-Id
	// Without the header (as another language's client may send it).
	_, err := s.js.Publish(t.Context(), queue.JobsSubject(sid), rawJob(t, sid, "no-header", op("no header\n")))
	require.NoError(t, err)
	s.publish(t, "last", rawJob(t, sid, "last", op("last\n")))

	assert.Equal(t, queue.StatusApplied, s.outcome(t, "last").Status)
	assert.Equal(t, queue.StatusApplied, s.outcome(t, "no-header").Status, "a job without Nats-Msg-Id is accepted")
	assert.Equal(t, "no header\nlast\n", readFile(t, filepath.Join(store, "log.txt")), "the mismatched job changed nothing")
	l := onlyDeadLetter(t, store, "body-id", "header-id")
	assert.Equal(t, queue.ReasonBadInput, l.Reason)
	assert.Contains(t, l.Detail, `"header-id"`)
	assert.Contains(t, l.Detail, `"body-id"`)
	assert.Equal(t, string(mismatched), string(l.Data))
	r := scribe(t, "", "status", "--store", store, "--dead")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "does not match job id")
}

// The NATS server dedupes by the first Nats-Msg-Id line that follows a
// CRLF; nats.go also ends a header line at a bare LF. A message naming
// several is no job's: the one the server took (here "victim", which
// JetStream then holds as a duplicate) cannot be told from the one a
// reader of the parsed headers would take ("evil", the job's own ID),
// and applying it under either could hand one job's ID to another.
func TestMsgIDHeaderNamedTwiceIsDeadLettered(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	s := connectSubmitter(t, store)
	sid := s.disc.StoreID
	op := func(data string) queue.Op { return queue.Op{Kind: queue.OpAppend, Path: "log.txt", Data: []byte(data)} }

	acks, err := s.nc.SubscribeSync("_INBOX.raw-hpub")
	require.NoError(t, err)
	require.NoError(t, s.nc.Flush())
	rawHPub(t, s.disc, queue.JobsSubject(sid), "_INBOX.raw-hpub",
		"NATS/1.0\r\nX-Pad: a\nNats-Msg-Id: evil\r\nNats-Msg-Id: victim\r\n\r\n", rawJob(t, sid, "evil", op("evil\n")))
	m, err := acks.NextMsg(10 * time.Second)
	require.NoError(t, err)
	var ack struct {
		Seq       uint64 `json:"seq"`
		Duplicate bool   `json:"duplicate"`
	}
	require.NoError(t, json.Unmarshal(m.Data, &ack), "%s", m.Data)
	require.NotZero(t, ack.Seq, "stored: %s", m.Data)

	s.publish(t, "last", rawJob(t, sid, "last", op("last\n")))
	assert.Equal(t, queue.StatusApplied, s.outcome(t, "last").Status)
	assert.Equal(t, "last\n", readFile(t, filepath.Join(store, "log.txt")), "the message named twice changed nothing")
	l := onlyDeadLetter(t, store, "evil", "victim")
	assert.Equal(t, queue.ReasonBadInput, l.Reason)
	assert.Contains(t, l.Detail, "2 Nats-Msg-Id headers")
	// What the server took: JetStream holds "victim" as a duplicate for
	// its window (documented in security.md).
	dup, err := queue.Publish(t.Context(), s.js, sid, queue.JobsSubject(sid), "victim", rawJob(t, sid, "victim", op("victim\n")))
	require.NoError(t, err)
	assert.True(t, dup, "the server deduped the message under its CRLF-led Nats-Msg-Id")
}

// onlyDeadLetter checks that no outcome is recorded under any of ids,
// waits for the store's dead letters, and returns the one there must be.
func onlyDeadLetter(t *testing.T, store string, ids ...string) queue.DeadLetter {
	t.Helper()
	for _, id := range ids {
		r := scribe(t, "", "status", "--store", store, "--json", id)
		assert.NotEqual(t, 0, r.code, "no outcome may be recorded under %s: %s", id, r.stdout)
	}
	var dead queue.DeadLetters
	require.Eventually(t, func() bool {
		r := scribe(t, "", "status", "--store", store, "--dead", "--json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &dead) == nil && dead.Total > 0
	}, 10*time.Second, 20*time.Millisecond)
	require.Len(t, dead.Letters, 1)
	return dead.Letters[0]
}

// rawHPub sends one message with the header block hdr, byte for byte, on
// a connection of its own that speaks the NATS protocol by hand (as any
// client may), then waits for the server to have read it (PING, PONG).
func rawHPub(t testing.TB, disc *queue.Discovery, subject, reply, hdr string, payload []byte) {
	t.Helper()
	tc, err := disc.TLSConfig()
	require.NoError(t, err)
	u, err := url.Parse(disc.URL)
	require.NoError(t, err)
	tc.ServerName = u.Hostname()
	conn, err := tls.Dial("tcp", u.Host, tc) // the daemon takes TLS first
	require.NoError(t, err)
	defer conn.Close()
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(info, "INFO "), info)
	connect, err := json.Marshal(map[string]any{"user": disc.User, "pass": disc.Password, "headers": true, "verbose": false, "pedantic": false, "protocol": 1})
	require.NoError(t, err)
	_, err = fmt.Fprintf(conn, "CONNECT %s\r\nHPUB %s %s %d %d\r\n%s%s\r\nPING\r\n", connect, subject, reply, len(hdr), len(hdr)+len(payload), hdr, payload)
	require.NoError(t, err)
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		require.False(t, strings.HasPrefix(line, "-ERR"), line)
		if strings.HasPrefix(line, "PONG") {
			return
		}
	}
}
