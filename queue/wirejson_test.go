package queue

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Strings that encoding/json escapes, or replaces, each its own way.
var awkward = []string{"", "plain", "é", "\u2028\u2029", "<a>", "a&b", ">", `"\`, "\x00\x1f\x7f", "\xff\xfe", "tab\there\n", strings.Repeat("x", 300)}

// sameAsEncodingJSON holds the hand-written encoders to encoding/json:
// the same bytes for the same value, or an error from both.
func sameAsEncodingJSON(t *testing.T, s, t2 string, n int64, at time.Time) {
	t.Helper()
	p := Priority(s)
	nn := int(n)
	w := wireJob{V: int(n), ID: s, Store: t2, Submitted: at, Coalesce: &t2, Priority: &p, Meta: map[string]string{s: t2, t2: s},
		Ops: []wireOp{{Op: OpKind(s), Path: &t2, Data: &s, DataB64: &t2, DataLen: &nn, IfMatch: &s, Name: &t2, Args: []string{s, t2}, Dir: &s, TimeoutMS: &n}, {Op: OpPut}}}
	want, werr := json.Marshal(&w)
	got, gerr := w.appendJSON(nil)
	if werr != nil {
		require.EqualError(t, gerr, werr.Error())
	} else {
		require.NoError(t, gerr)
		assert.Equal(t, string(want), string(got))
	}
	for _, w := range []wireJob{{}, {Ops: []wireOp{}, Meta: map[string]string{}}} {
		want, _ := json.Marshal(&w)
		got, err := w.appendJSON(nil)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got))
	}

	o := Outcome{V: int(n), ID: s, Status: Status(t2), Reason: Reason(s), Detail: t2, Epoch: uint64(n), Seq: uint64(n) * 3, Mode: Mode(s), At: at,
		Meta: map[string]string{s: t2}, MetaCut: nn, Digest: t2, CoalescedInto: s,
		Exec: &ExecResult{Command: s, ExitCode: nn, Signal: t2, Stdout: s, Stderr: t2, StdoutCut: n, Started: at, DurationMS: n}}
	for _, o := range []Outcome{o, {}, {ID: s, At: at}} {
		want, werr := json.Marshal(&o)
		got, gerr := o.appendJSON(nil)
		if werr != nil {
			require.EqualError(t, gerr, werr.Error())
			continue
		}
		require.NoError(t, gerr)
		require.Equal(t, string(want), string(got))
		// Whatever the fast decoder takes, it takes as encoding/json does.
		if fast, ok := decodeOutcomeFast(got); ok {
			var slow Outcome
			require.NoError(t, json.Unmarshal(got, &slow))
			assert.Equal(t, &slow, fast)
		}
	}
}

func TestWireJSONIsEncodingJSONs(t *testing.T) {
	times := []time.Time{{}, time.Date(2026, 12, 7, 14, 1, 2, 345678900, time.UTC), time.Date(1999, 1, 2, 3, 4, 5, 0, time.FixedZone("x", -3*3600-1800)),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i, s := range awkward {
		for j, at := range times {
			sameAsEncodingJSON(t, s, awkward[(i+j+1)%len(awkward)], int64(i*j*1000003-7), at)
		}
	}
}

func FuzzWireJSON(f *testing.F) {
	f.Add("a", "b", int64(1), int64(0))
	f.Add("<é>", "\xff\"", int64(-5), int64(1e18))
	f.Add("\u2028", "", int64(1<<62), int64(-6e18))
	f.Fuzz(func(t *testing.T, s, t2 string, n, nanos int64) {
		sameAsEncodingJSON(t, s, t2, n, time.Unix(0, nanos).In(time.FixedZone("", int(n%50000))))
	})
}

// The outcomes a writer makes take the fast path: were it never taken, the
// tests above would hold of a decoder that always asks encoding/json.
func TestUsualOutcomesDecodeFast(t *testing.T) {
	for _, o := range []*Outcome{
		{ID: NewID(), Status: StatusApplied, Epoch: 3, Seq: 99, Mode: ModeDaemon, At: time.Now(), Digest: ContentHash([]byte("x"))},
		{ID: "j-1", Status: StatusRejected, Reason: ReasonPathEscapes, Detail: "path ../a leaves the store", Epoch: 1, Mode: ModeDirect, At: time.Now().UTC(), Meta: map[string]string{"k": "v", "turn": "7"}, MetaCut: 2},
	} {
		b, err := EncodeOutcome(o)
		require.NoError(t, err)
		fast, ok := decodeOutcomeFast(b)
		require.True(t, ok, "%s", b)
		var slow Outcome
		require.NoError(t, json.Unmarshal(b, &slow))
		assert.Equal(t, &slow, fast)
	}
}

// FuzzDecodeOutcomeFast: on any bytes, what the fast decoder takes is what
// encoding/json makes of them; what it does not take, DecodeOutcome still
// decodes as encoding/json does.
func FuzzDecodeOutcomeFast(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"id":"j","status":"applied","epoch":3,"seq":9,"mode":"daemon","at":"2026-12-07T14:01:02.3456789Z","digest":"sha256:00"}`,
		` { "v" : 1 , "id":"j","meta":{"a":"b","a":"c"},"meta_cut":0,"at":"2026-12-07T14:01:02+01:00"} `,
		`{"v":1,"ID":"j"}`, `{"v":1,"id":"j","id":"k"}`, `{"v":1,"meta":{"a":"1"},"meta":{"b":"2"}}`, `{"v":01}`, `{"v":1.0}`, `{"v":-1}`, `{"epoch":18446744073709551616}`,
		`{"id":"\u00e9"}`, "{\"id\":\"\xff\"}", `{"at":"2026-13-01T00:00:00Z"}`, `{"meta":null}`, `{"v":1}x`, `{"v":1,}`, `{`, `[]`, ``,
		`{"exec":{"command":"c","exit_code":1,"started":"2026-12-07T14:01:02Z","duration_ms":3}}`, `{"unknown":1,"v":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var slow Outcome
		serr := json.Unmarshal(b, &slow)
		if fast, ok := decodeOutcomeFast(b); ok {
			require.NoError(t, serr, "the fast decoder took what encoding/json refuses")
			assert.Equal(t, &slow, fast)
		}
		o, err := DecodeOutcome(b)
		switch {
		case serr != nil:
			require.Error(t, err)
		case slow.V != Version:
			require.ErrorContains(t, err, "version")
		default:
			require.NoError(t, err)
			assert.Equal(t, &slow, o)
		}
	})
}

// A discovery file as a daemon writes it takes the fast path, and reads
// as encoding/json reads it.
func TestUsualDiscoveryDecodesFast(t *testing.T) {
	d := Discovery{URL: "tls://127.0.0.1:4222", User: "u", Password: "p/+=", PID: 42, Version: "v1.2.3", Store: "/tmp/é s", StoreID: "0123456789abcdef",
		TLSCert: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", TLSCertSHA256: "ab", Started: time.Now(), LockFile: "/tmp/x/.scribe/lock",
		IdleReleaseMS: 500, MaxJobBytes: 1 << 20}
	b, err := json.MarshalIndent(&d, "", "  ")
	require.NoError(t, err)
	fast, ok := decodeDiscovery(b)
	require.True(t, ok, "%s", b)
	var slow Discovery
	require.NoError(t, json.Unmarshal(b, &slow))
	assert.Equal(t, &slow, fast)
}

// FuzzDecodeDiscovery: what the fast decoder takes is what encoding/json
// makes of the same bytes.
func FuzzDecodeDiscovery(f *testing.F) {
	for _, s := range []string{
		"{\n  \"url\": \"tls://127.0.0.1:1\",\n  \"pid\": 7,\n  \"tls_cert\": \"a\\nb\\u00e9\\ud800\",\n  \"started\": \"2026-12-07T14:01:02.5+01:00\",\n  \"idle_release_ms\": 500\n}",
		`{"url":"a","url":"b"}`, `{"URL":"a"}`, `{"pid":-1}`, `{"max_job_bytes":1e3}`, `{"queue":"nats","lock_file":"\/x"}`, `{"x":1}`, `{"started":"\u0032026-12-07T14:01:02Z"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if fast, ok := decodeDiscovery(b); ok {
			var slow Discovery
			require.NoError(t, json.Unmarshal(b, &slow), "the fast decoder took what encoding/json refuses")
			assert.Equal(t, &slow, fast)
		}
	})
}
