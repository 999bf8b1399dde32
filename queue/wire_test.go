package queue_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// TestWireGolden pins the JSON of a job, an outcome and a lock holder
// byte for byte: op kinds, statuses and modes are typed in Go, but the
// wire format other languages speak must not move.
func TestWireGolden(t *testing.T) {
	at := time.Date(2024, 1, 2, 3, 4, 5, 600, time.UTC)
	tests := []struct {
		name   string
		v      any
		golden string
	}{
		{"job", &queue.Job{V: queue.Version, ID: "job-1", Store: testStore, Ops: []queue.Op{
			{Kind: queue.OpPut, Path: "docs/a.md", Data: []byte("# title\n"), IfMatch: queue.IfAbsent},
			{Kind: queue.OpAppend, Path: "log.bin", Data: []byte{0, 1, 0xff}},
			{Kind: queue.OpMerge, Path: "state.json", Data: []byte(`{"a":null}`), IfMatch: queue.ContentHash([]byte("{}"))},
			{Kind: queue.OpDelete, Path: "old"},
		}, Meta: map[string]string{"by": "hook"}, Submitted: at},
			`{"v":1,"id":"job-1","store":"0123456789abcdef","ops":[` +
				`{"op":"put","path":"docs/a.md","data":"# title\n","if_match":"absent"},` +
				`{"op":"append","path":"log.bin","data_b64":"AAH/"},` +
				`{"op":"merge","path":"state.json","data":"{\"a\":null}","if_match":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},` +
				`{"op":"delete","path":"old"}],` +
				`"meta":{"by":"hook"},"submitted":"2024-01-02T03:04:05.0000006Z"}`},
		{"applied outcome", &queue.Outcome{V: queue.Version, ID: "job-1", Status: queue.StatusApplied, Epoch: 3, Seq: 9,
			Mode: queue.ModeDaemon, At: at, Meta: map[string]string{"by": "hook"}, Digest: "sha256:ab"},
			`{"v":1,"id":"job-1","status":"applied","epoch":3,"seq":9,"mode":"daemon","at":"2024-01-02T03:04:05.0000006Z","meta":{"by":"hook"},"digest":"sha256:ab"}`},
		{"rejected outcome", &queue.Outcome{V: queue.Version, ID: "job-2", Status: queue.StatusRejected,
			Reason: queue.ReasonUnknownOp, Detail: `op 0: unknown op "exec"`, Epoch: 4, Mode: queue.ModeDirect, At: at},
			`{"v":1,"id":"job-2","status":"rejected","reason":"unknown_op","detail":"op 0: unknown op \"exec\"","epoch":4,"mode":"direct","at":"2024-01-02T03:04:05.0000006Z"}`},
		{"daemon holder", &queue.Holder{PID: 42, Host: "box", Mode: queue.ModeDaemon, Command: "scribe serve", Since: at, Epoch: 7, Token: "tok", Start: 1234},
			`{"pid":42,"host":"box","mode":"daemon","command":"scribe serve","since":"2024-01-02T03:04:05.0000006Z","epoch":7,"token":"tok","start":1234}`},
		{"direct holder", &queue.Holder{PID: 43, Host: "box", Mode: queue.ModeDirect, Command: "scribe lock", Since: at},
			`{"pid":43,"host":"box","mode":"direct","command":"scribe lock","since":"2024-01-02T03:04:05.0000006Z"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.v)
			require.NoError(t, err)
			assert.Equal(t, tt.golden, string(b))
		})
	}
	t.Run("encode", func(t *testing.T) {
		// Encode writes a job with data as VersionRaw: the data after the
		// JSON value, unescaped, in op order.
		b, err := queue.Encode(tests[0].v.(*queue.Job))
		require.NoError(t, err)
		assert.Equal(t, `{"v":2,"id":"job-1","store":"0123456789abcdef","ops":[`+
			`{"op":"put","path":"docs/a.md","data_len":8,"if_match":"absent"},`+
			`{"op":"append","path":"log.bin","data_len":3},`+
			`{"op":"merge","path":"state.json","data_len":10,"if_match":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},`+
			`{"op":"delete","path":"old"}],`+
			`"meta":{"by":"hook"},"submitted":"2024-01-02T03:04:05.0000006Z"}`+
			"\n# title\n\x00\x01\xff{\"a\":null}", string(b))
		back, err := queue.Decode(b)
		require.NoError(t, err)
		assert.Equal(t, tests[0].v.(*queue.Job).Ops, back.Ops)
		b, err = queue.EncodeOutcome(tests[1].v.(*queue.Outcome))
		require.NoError(t, err)
		assert.Equal(t, tests[1].golden, string(b))
	})
}

// TestWireGoldenDecode reads the golden forms back into the typed fields.
func TestWireGoldenDecode(t *testing.T) {
	j, err := queue.Decode([]byte(`{"v":1,"id":"job-1","store":"0123456789abcdef","ops":[` +
		`{"op":"put","path":"a"},{"op":"append","path":"b","data":"x"},` +
		`{"op":"merge","path":"c.json","data":"{}"},{"op":"delete","path":"d"}]}`))
	require.NoError(t, err)
	var kinds []queue.OpKind
	for _, op := range j.Ops {
		kinds = append(kinds, op.Kind)
	}
	assert.Equal(t, []queue.OpKind{queue.OpPut, queue.OpAppend, queue.OpMerge, queue.OpDelete}, kinds)

	o, err := queue.DecodeOutcome([]byte(`{"v":1,"id":"j","status":"rejected","reason":"too_large","epoch":1,"mode":"direct","at":"2024-01-02T03:04:05Z"}`))
	require.NoError(t, err)
	assert.Equal(t, queue.StatusRejected, o.Status)
	assert.Equal(t, queue.ModeDirect, o.Mode)
	assert.False(t, o.Applied())

	var h queue.Holder
	require.NoError(t, json.Unmarshal([]byte(`{"pid":1,"host":"h","mode":"daemon","command":"c","since":"2024-01-02T03:04:05Z"}`), &h))
	assert.Equal(t, queue.ModeDaemon, h.Mode)
}

// TestDecodeUnknownOp: a typed op kind still lets any string through
// JSON decoding, and Decode still rejects what is not a known kind, with
// the job's ID kept so that the rejection can be recorded under it.
func TestDecodeUnknownOp(t *testing.T) {
	tests := []struct {
		op     string
		reason queue.Reason
		detail string
	}{
		{`"run"`, queue.ReasonUnknownOp, `op 0: unknown op "run"`},
		{`"PUT"`, queue.ReasonUnknownOp, `op 0: unknown op "PUT"`},
		{`""`, queue.ReasonBadInput, `op 0: missing op kind`},
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			j, err := queue.Decode([]byte(`{"v":1,"id":"job-9","store":"0123456789abcdef","ops":[{"op":` + tt.op + `,"path":"a"}]}`))
			requireReason(t, err, tt.reason)
			var rej *queue.RejectError
			require.ErrorAs(t, err, &rej)
			assert.Equal(t, tt.detail, rej.Detail)
			require.NotNil(t, j)
			assert.Equal(t, "job-9", j.ID)
		})
	}
	t.Run("op field must be a string", func(t *testing.T) {
		j, err := queue.Decode([]byte(`{"v":1,"id":"job-9","store":"0123456789abcdef","ops":[{"op":1,"path":"a"}]}`))
		requireReason(t, err, queue.ReasonBadInput)
		assert.Equal(t, "job-9", j.ID)
	})
}
