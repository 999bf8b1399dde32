package queue_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

const testStore = "0123456789abcdef"

// validJob returns a job that passes Validate, with ops if given.
func validJob(tb testing.TB, ops ...queue.Op) *queue.Job {
	tb.Helper()
	if len(ops) == 0 {
		ops = []queue.Op{{Kind: queue.OpPut, Path: "a.txt", Data: []byte("hello")}}
	}
	return &queue.Job{V: queue.Version, ID: "job-1", Store: testStore, Ops: ops}
}

// requireReason asserts that err is a *queue.RejectError with reason want,
// matching queue.ErrRejected.
func requireReason(tb testing.TB, err error, want queue.Reason) {
	tb.Helper()
	require.Error(tb, err)
	assert.ErrorIs(tb, err, queue.ErrRejected)
	var rej *queue.RejectError
	require.ErrorAs(tb, err, &rej)
	assert.Equal(tb, want, rej.Reason, "detail: %s", rej.Detail)
}

func TestOpJSON(t *testing.T) {
	tests := []struct {
		name    string
		data    []byte
		wantKey string // "data", "data_b64" or "" for neither
		wantVal string
	}{
		{"utf8", []byte("héllo\nwörld"), "data", "héllo\nwörld"},
		{"empty", []byte{}, "data", ""},
		{"nil", nil, "", ""},
		{"binary", []byte{0xff, 0x00, 0xfe}, "data_b64", "/wD+"},
		{"truncated rune", []byte("ab\xe2\x82"), "data_b64", "YWLigg=="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := queue.Op{Kind: queue.OpAppend, Path: "x/y", Data: tt.data, IfMatch: queue.IfAbsent}
			b, err := json.Marshal(op)
			require.NoError(t, err)

			var wire map[string]any
			require.NoError(t, json.Unmarshal(b, &wire))
			assert.Equal(t, "append", wire["op"])
			assert.Equal(t, "x/y", wire["path"])
			assert.Equal(t, "absent", wire["if_match"])
			for _, k := range []string{"data", "data_b64"} {
				if k == tt.wantKey {
					assert.Equal(t, tt.wantVal, wire[k], k)
				} else {
					assert.NotContains(t, wire, k)
				}
			}

			var back queue.Op
			require.NoError(t, json.Unmarshal(b, &back))
			assert.Equal(t, op, back)
		})
	}
}

func TestOpUnmarshalErrors(t *testing.T) {
	tests := []struct {
		name    string
		wire    string
		wantErr string
	}{
		{"both data and data_b64", `{"op":"put","path":"a","data":"x","data_b64":"eA=="}`, "both"},
		{"bad base64", `{"op":"put","path":"a","data_b64":"!!not base64!!"}`, "data_b64"},
		{"bad base64 padding", `{"op":"put","path":"a","data_b64":"eA="}`, "data_b64"},
		{"not an object", `["put","a"]`, "cannot unmarshal"},
		{"empty if_match", `{"op":"put","path":"a","data":"x","if_match":""}`, "if_match: empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var op queue.Op
			err := json.Unmarshal([]byte(tt.wire), &op)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func execOp() queue.Op { return queue.Op{Kind: queue.OpExec, Name: "mine"} }

// TestDecodeTextNotAsSent: a job whose JSON text encoding/json would read
// as other than sent (a byte that is not UTF-8, a lone surrogate escape:
// U+FFFD either way) does not decode, wherever it stands, and names where;
// escaped backslashes, pairs and U+FFFD itself are text.
func TestDecodeTextNotAsSent(t *testing.T) {
	job := func(path, data string) []byte {
		return []byte(`{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"` + path + `","data":"` + data + `"}]}`)
	}
	for name, b := range map[string][]byte{
		"path not UTF-8":    job("caf\xe9.txt", "x"),
		"data not UTF-8":    job("a", "a\xffb"),
		"encoded surrogate": job("a", "\xed\xa0\x80"),
		"lone high":         job("u2\\ud800.txt", "x"),
		"lone low":          job("a", "\\udc00"),
		"high, then high":   job("a", "\\ud83d\\ud83d"),
		"high at the end":   job("a", "x\\uD83D"),
		"exec arg":          []byte(`{"v":1,"id":"j1","store":"s","ops":[{"op":"exec","name":"mine","args":["\ud800"]}]}`),
		"meta":              []byte(`{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"a","data":"x"}],"meta":{"k":"` + "\xff" + `"}}`),
	} {
		j, err := queue.Decode(b)
		requireReason(t, err, queue.ReasonBadInput)
		assert.Regexp(t, `byte \d+`, err.Error(), name)
		assert.Equal(t, "j1", j.ID, "%s: the ID is salvaged", name)
	}
	for name, data := range map[string]string{
		"escaped backslash": `a\\ud800`,
		"pair":              `\ud83d\ude00`,
		"U+FFFD":            "\ufffd\uFFFD",
		"other escapes":     `\u00e9\n\"\\`,
	} {
		j, err := queue.Decode(job("a", data))
		require.NoError(t, err, name)
		assert.NotContains(t, string(j.Ops[0].Data), "\ufffd\ufffd\ufffd", name)
	}
}

// TestSalvageIDAsDecoded: a job that does not decode is recorded under
// the ID the decoder would have read: the key in any case, the last of
// several, none if that one is no ID.
func TestSalvageIDAsDecoded(t *testing.T) {
	for body, want := range map[string]string{
		`{"ID":"bigA","bogus":1}`:                     "bigA",
		`{"id":"first","id":"last","bogus":1}`:        "last",
		`{"id":"first","Id":{"x":["y"]},"bogus":1}`:   "",
		`{"id":"first","iD":7,"bogus":1}`:             "",
		`{"id":"first","x":{"id":"inner"},"bogus":1}`: "first",
		`{"id":"keep","ops":[{"id":"no"}],"v":`:       "keep",
	} {
		j, err := queue.Decode([]byte(body))
		requireReason(t, err, queue.ReasonBadInput)
		assert.Equal(t, want, j.ID, body)
	}
	big := `{"ID":"bigA","v":1,"ops":[{"op":"put","path":"a","data":"` + strings.Repeat("x", queue.MaxJobBytes) + `"}]}`
	j, err := queue.Decode([]byte(big))
	requireReason(t, err, queue.ReasonTooLarge)
	assert.Equal(t, "bigA", j.ID)
}

// TestExecWire: an exec op's wire form, and the explicit timeouts that
// decode but do not validate (0 would otherwise read as "none given").
func TestExecWire(t *testing.T) {
	op := queue.Op{Kind: queue.OpExec, Name: "mine", Args: []string{"--wing", "a b"}, Dir: "d", Timeout: 1500 * time.Millisecond}
	b, err := json.Marshal(op)
	require.NoError(t, err)
	assert.JSONEq(t, `{"op":"exec","name":"mine","args":["--wing","a b"],"dir":"d","timeout_ms":1500}`, string(b))
	var back queue.Op
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, op, back)

	for _, ms := range []string{"0", "-5"} {
		j, err := queue.Decode([]byte(`{"v":1,"id":"j1","store":"s","ops":[{"op":"exec","name":"mine","timeout_ms":` + ms + `}]}`))
		requireReason(t, err, queue.ReasonBadInput)
		assert.Contains(t, err.Error(), "timeout_ms")
		assert.Equal(t, "j1", j.ID)
	}
	j, err := queue.Decode([]byte(`{"v":1,"id":"j1","store":"s","ops":[{"op":"exec","name":"mine","args":[]}],"coalesce":"k"}`))
	require.NoError(t, err)
	assert.Nil(t, j.Ops[0].Args)
	assert.Equal(t, "k", j.Coalesce)
	assert.True(t, j.IsExec())
}

// TestExecTimeoutDigest: the digest hashes timeout_ms as sent, as the
// documented formula does ("0" if absent), for the timeouts that do not
// validate too, so that an invalid job cannot take a valid one's
// outcome; a Go timeout hashes as it goes on the wire; a number no
// time.Duration holds does not decode.
func TestExecTimeoutDigest(t *testing.T) {
	decode := func(timeout string) *queue.Job {
		j, _ := queue.Decode([]byte(`{"v":1,"id":"j1","store":"s","ops":[{"op":"exec","name":"mine"` + timeout + `}]}`))
		require.NotNil(t, j)
		return j
	}
	// The documented formula, by hand: netstrings of scribe-job-1, exec,
	// the name, the dir, timeout_ms in decimal and the args.
	formula := func(ms string) string {
		sum := sha256.Sum256([]byte("12:scribe-job-1,4:exec,4:mine,0:," + strconv.Itoa(len(ms)) + ":" + ms + ",2:[],"))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	assert.Equal(t, formula("0"), decode("").Digest())
	for _, ms := range []string{"0", "-5", "-7", "1", "600000", "-9223372036854"} {
		assert.Equal(t, formula(ms), decode(`,"timeout_ms":`+ms).Digest(), "timeout_ms %s", ms)
	}
	sub := &queue.Job{V: 1, ID: "j1", Store: "s", Ops: []queue.Op{{Kind: queue.OpExec, Name: "mine", Timeout: 500 * time.Microsecond}}}
	b, err := queue.Encode(sub)
	require.NoError(t, err)
	back, err := queue.Decode(b)
	require.NoError(t, err)
	assert.Equal(t, sub.Digest(), back.Digest(), "a sub-millisecond timeout goes as 1 ms, and hashes so")
	for _, ms := range []string{"9223372036855", "-9223372036855"} {
		j, err := queue.Decode([]byte(`{"v":1,"id":"j1","store":"s","ops":[{"op":"exec","name":"mine","timeout_ms":` + ms + `}]}`))
		requireReason(t, err, queue.ReasonBadInput)
		assert.Contains(t, err.Error(), "out of range")
		assert.Equal(t, "j1", j.ID)
	}
}

// TestExecDigest: every field of an exec job that changes what runs
// changes its digest; "args": [] and no args are the same job.
func TestExecDigest(t *testing.T) {
	base := func() *queue.Job {
		return &queue.Job{V: 1, ID: "j", Store: "s", Ops: []queue.Op{{Kind: queue.OpExec, Name: "mine", Args: []string{"a"}}}}
	}
	d := base().Digest()
	for name, mutate := range map[string]func(*queue.Job){
		"name":      func(j *queue.Job) { j.Ops[0].Name = "mine2" },
		"args":      func(j *queue.Job) { j.Ops[0].Args = []string{"b"} },
		"arg split": func(j *queue.Job) { j.Ops[0].Args = []string{"", "a"} },
		"dir":       func(j *queue.Job) { j.Ops[0].Dir = "d" },
		"timeout":   func(j *queue.Job) { j.Ops[0].Timeout = time.Second },
		"coalesce":  func(j *queue.Job) { j.Coalesce = "k" },
	} {
		j := base()
		mutate(j)
		assert.NotEqual(t, d, j.Digest(), name)
	}
	a, b := base(), base()
	a.Ops[0].Args, b.Ops[0].Args = nil, []string{}
	assert.Equal(t, a.Digest(), b.Digest())
	// The digest of file jobs is unchanged by exec support.
	put := &queue.Job{Ops: []queue.Op{{Kind: queue.OpPut, Path: "a", Data: []byte("x")}}}
	h := sha256.Sum256([]byte("12:scribe-job-1,3:put,1:a,0:,1:x,"))
	assert.Equal(t, "sha256:"+hex.EncodeToString(h[:]), put.Digest())
}

// TestExecDigestVectors pins the form exec args are hashed in, with the
// vectors docs/protocol.md gives: control characters and non-ASCII text.
func TestExecDigestVectors(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "protocol.md"))
	require.NoError(t, err)
	for _, v := range []struct{ args, hashed, digest string }{
		{`["tab\there","nl\n","\u0001\u001f\u007f","\b\f\r","q\"b\\"]`,
			"[\"tab\\there\",\"nl\\n\",\"\\u0001\\u001f\x7f\",\"\\b\\f\\r\",\"q\\\"b\\\\\"]",
			"sha256:5baf4bb48dc2495662a4daa61c701d38d99e04d2e4c43a1c930092ce2b977674"},
		{`["é","日本","😀","<a&b>","\u2028\u2029"]`,
			`["é","日本","😀","\u003ca\u0026b\u003e","\u2028\u2029"]`,
			"sha256:d72665afe7ecef76a78f8649fd6fd160f8d7fce6050248f60691f90d7d8b860b"},
	} {
		j, err := queue.Decode([]byte(`{"v":1,"id":"x","store":"s","ops":[{"op":"exec","name":"mine","args":` + v.args + `}]}`))
		require.NoError(t, err, v.args)
		got, err := json.Marshal(j.Ops[0].Args)
		require.NoError(t, err)
		assert.Equal(t, v.hashed, string(got), v.args)
		want := sha256.Sum256([]byte("12:scribe-job-1,4:exec,4:mine,0:,1:0," + strconv.Itoa(len(v.hashed)) + ":" + v.hashed + ","))
		assert.Equal(t, "sha256:"+hex.EncodeToString(want[:]), j.Digest(), v.args)
		assert.Equal(t, v.digest, j.Digest(), v.args)
		assert.True(t, strings.Contains(string(doc), v.digest), "docs/protocol.md gives the vector %s", v.digest)
	}
}

func TestValidate(t *testing.T) {
	manyOps := func(n int) []queue.Op {
		ops := make([]queue.Op, n)
		for i := range ops {
			ops[i] = queue.Op{Kind: queue.OpDelete, Path: "f"}
		}
		return ops
	}
	tests := []struct {
		name   string
		mutate func(j *queue.Job)
		want   queue.Reason // "" means valid
	}{
		{"valid", func(j *queue.Job) {}, ""},
		{"all op kinds", func(j *queue.Job) {
			j.Ops = []queue.Op{
				{Kind: queue.OpPut, Path: "a"}, {Kind: queue.OpAppend, Path: "b"},
				{Kind: queue.OpMerge, Path: "c.json", Data: []byte(`{}`)}, {Kind: queue.OpDelete, Path: "d"},
			}
		}, ""},
		{"version 0", func(j *queue.Job) { j.V = 0 }, queue.ReasonBadVersion},
		{"version 3", func(j *queue.Job) { j.V = 3 }, queue.ReasonBadVersion},
		{"empty id", func(j *queue.Job) { j.ID = "" }, queue.ReasonBadInput},
		{"id with space", func(j *queue.Job) { j.ID = "a b" }, queue.ReasonBadInput},
		{"id with dot", func(j *queue.Job) { j.ID = "a.b" }, queue.ReasonBadInput},
		{"id with subject wildcard", func(j *queue.Job) { j.ID = "a*" }, queue.ReasonBadInput},
		{"id non-ascii", func(j *queue.Job) { j.ID = "jöb" }, queue.ReasonBadInput},
		{"id max length", func(j *queue.Job) { j.ID = strings.Repeat("a", queue.MaxIDLen) }, ""},
		{"id too long", func(j *queue.Job) { j.ID = strings.Repeat("a", queue.MaxIDLen+1) }, queue.ReasonBadInput},
		{"id all classes", func(j *queue.Job) { j.ID = "AZaz09-_" }, ""},
		{"no store", func(j *queue.Job) { j.Store = "" }, queue.ReasonBadInput},
		{"nil ops", func(j *queue.Job) { j.Ops = nil }, queue.ReasonBadInput},
		{"max ops", func(j *queue.Job) { j.Ops = manyOps(queue.MaxOps) }, ""},
		{"too many ops", func(j *queue.Job) { j.Ops = manyOps(queue.MaxOps + 1) }, queue.ReasonTooLarge},
		{"unknown op", func(j *queue.Job) { j.Ops[0].Kind = "run" }, queue.ReasonUnknownOp},
		{"exec", func(j *queue.Job) { j.Ops = []queue.Op{execOp()} }, ""},
		{"exec with args, dir, timeout", func(j *queue.Job) {
			j.Ops = []queue.Op{{Kind: queue.OpExec, Name: "mine.v2", Args: []string{"--wing", "", "ö"}, Dir: "sub/dir", Timeout: time.Second}}
		}, ""},
		{"exec coalesced", func(j *queue.Job) { j.Ops, j.Coalesce = []queue.Op{execOp()}, "mine for ever" }, ""},
		{"exec among other ops", func(j *queue.Job) { j.Ops = append(j.Ops, execOp()) }, queue.ReasonBadInput},
		{"exec without name", func(j *queue.Job) { j.Ops = []queue.Op{{Kind: queue.OpExec}} }, queue.ReasonBadInput},
		{"exec name with slash", func(j *queue.Job) { j.Ops = []queue.Op{{Kind: queue.OpExec, Name: "../bin/sh"}} }, queue.ReasonBadInput},
		{"exec name starting with dash", func(j *queue.Job) { j.Ops = []queue.Op{{Kind: queue.OpExec, Name: "-x"}} }, queue.ReasonBadInput},
		{"exec name too long", func(j *queue.Job) { j.Ops = []queue.Op{{Kind: queue.OpExec, Name: strings.Repeat("m", 65)}} }, queue.ReasonBadInput},
		{"exec with path", func(j *queue.Job) { op := execOp(); op.Path = "a"; j.Ops = []queue.Op{op} }, queue.ReasonBadInput},
		{"exec with data", func(j *queue.Job) { op := execOp(); op.Data = []byte{}; j.Ops = []queue.Op{op} }, queue.ReasonBadInput},
		{"exec arg with NUL", func(j *queue.Job) { op := execOp(); op.Args = []string{"a\x00b"}; j.Ops = []queue.Op{op} }, queue.ReasonBadInput},
		{"exec arg not UTF-8", func(j *queue.Job) { op := execOp(); op.Args = []string{"\xff"}; j.Ops = []queue.Op{op} }, queue.ReasonBadInput},
		{"exec too many args", func(j *queue.Job) { op := execOp(); op.Args = make([]string, queue.MaxArgs+1); j.Ops = []queue.Op{op} }, queue.ReasonTooLarge},
		{"exec dir escapes", func(j *queue.Job) { op := execOp(); op.Dir = "../elsewhere"; j.Ops = []queue.Op{op} }, queue.ReasonPathEscapes},
		{"exec dir absolute", func(j *queue.Job) { op := execOp(); op.Dir = "/tmp"; j.Ops = []queue.Op{op} }, queue.ReasonPathEscapes},
		{"exec dir in .scribe", func(j *queue.Job) { op := execOp(); op.Dir = ".scribe"; j.Ops = []queue.Op{op} }, queue.ReasonPathEscapes},
		{"exec negative timeout", func(j *queue.Job) { op := execOp(); op.Timeout = -1; j.Ops = []queue.Op{op} }, queue.ReasonBadInput},
		{"meta value not UTF-8", func(j *queue.Job) { j.Meta = map[string]string{"k": "a\xffb"} }, queue.ReasonBadInput},
		{"meta key not UTF-8", func(j *queue.Job) { j.Meta = map[string]string{"\xe6\x97": "v"} }, queue.ReasonBadInput},
		{"file op with exec fields", func(j *queue.Job) { j.Ops[0].Args = []string{"x"} }, queue.ReasonBadInput},
		{"coalesce on a file job", func(j *queue.Job) { j.Coalesce = "k" }, queue.ReasonBadInput},
		{"coalesce key with newline", func(j *queue.Job) { j.Ops, j.Coalesce = []queue.Op{execOp()}, "a\nb" }, queue.ReasonBadInput},
		{"coalesce key too long", func(j *queue.Job) {
			j.Ops, j.Coalesce = []queue.Op{execOp()}, strings.Repeat("k", queue.MaxCoalesceLen+1)
		}, queue.ReasonBadInput},
		{"op kind case matters", func(j *queue.Job) { j.Ops[0].Kind = "PUT" }, queue.ReasonUnknownOp},
		{"missing op kind", func(j *queue.Job) { j.Ops[0].Kind = "" }, queue.ReasonBadInput},
		{"bad path", func(j *queue.Job) { j.Ops[0].Path = "../x" }, queue.ReasonPathEscapes},
		{"meta path", func(j *queue.Job) { j.Ops[0].Path = ".scribe/journal.db" }, queue.ReasonPathEscapes},
		{"if_match absent", func(j *queue.Job) { j.Ops[0].IfMatch = queue.IfAbsent }, ""},
		{"if_match hash", func(j *queue.Job) { j.Ops[0].IfMatch = queue.ContentHash([]byte("x")) }, ""},
		{"if_match bare hex", func(j *queue.Job) { j.Ops[0].IfMatch = queue.ContentHash(nil)[len("sha256:"):] }, queue.ReasonBadInput},
		{"if_match short hash", func(j *queue.Job) { j.Ops[0].IfMatch = queue.ContentHash(nil)[:70] }, queue.ReasonBadInput},
		{"if_match not hex", func(j *queue.Job) { j.Ops[0].IfMatch = "sha256:" + strings.Repeat("g", 64) }, queue.ReasonBadInput},
		{"if_match other algo", func(j *queue.Job) { j.Ops[0].IfMatch = "md5:" + strings.Repeat("0", 64) }, queue.ReasonBadInput},
		{"if_match Absent", func(j *queue.Job) { j.Ops[0].IfMatch = "Absent" }, queue.ReasonBadInput},
		{"second op bad", func(j *queue.Job) {
			j.Ops = append(j.Ops, queue.Op{Kind: "rename", Path: "b"})
		}, queue.ReasonUnknownOp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := validJob(t)
			tt.mutate(j)
			err := j.Validate()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			requireReason(t, err, tt.want)
		})
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		job  *queue.Job
	}{
		{"minimal", &queue.Job{ID: "a", Store: testStore, Ops: []queue.Op{{Kind: queue.OpDelete, Path: "x"}}}},
		{"full", &queue.Job{
			ID:    "Job_01-x",
			Store: testStore,
			Ops: []queue.Op{
				{Kind: queue.OpPut, Path: "docs/a.md", Data: []byte("# title\n"), IfMatch: queue.IfAbsent},
				{Kind: queue.OpAppend, Path: "log.bin", Data: []byte{0, 1, 2, 0xff}},
				{Kind: queue.OpMerge, Path: "state.json", Data: []byte(`{"a":null}`), IfMatch: queue.ContentHash([]byte("{}"))},
				{Kind: queue.OpDelete, Path: "old"},
			},
			Meta:      map[string]string{"caller": "hook", "pid": "42"},
			Submitted: time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := queue.Encode(tt.job)
			require.NoError(t, err)
			want := queue.Version
			for _, op := range tt.job.Ops {
				if op.Data != nil {
					want = queue.VersionRaw
				}
			}
			assert.Equal(t, want, tt.job.V, "Encode sets the version it writes")

			got, err := queue.Decode(b)
			require.NoError(t, err)
			assert.Equal(t, tt.job, got)

			again, err := queue.Encode(got)
			require.NoError(t, err)
			assert.Equal(t, string(b), string(again))
		})
	}
}

func TestEncodeRejects(t *testing.T) {
	tests := []struct {
		name string
		job  *queue.Job
		want queue.Reason
	}{
		{"invalid job", &queue.Job{ID: "a", Store: testStore}, queue.ReasonBadInput},
		{"bad id", &queue.Job{ID: "a/b", Store: testStore, Ops: []queue.Op{{Kind: queue.OpDelete, Path: "x"}}}, queue.ReasonBadInput},
		{"oversized", &queue.Job{ID: "a", Store: testStore, Ops: []queue.Op{
			{Kind: queue.OpPut, Path: "big", Data: []byte(strings.Repeat("x", queue.MaxJobBytes))},
		}}, queue.ReasonTooLarge},
		{"oversized by its raw data", &queue.Job{ID: "a", Store: testStore, Ops: []queue.Op{
			{Kind: queue.OpPut, Path: "big", Data: []byte(strings.Repeat("\x01", queue.MaxJobBytes))},
		}}, queue.ReasonTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := queue.Encode(tt.job)
			requireReason(t, err, tt.want)
			assert.Nil(t, b)
		})
	}
}

func TestDecode(t *testing.T) {
	longID := strings.Repeat("i", queue.MaxIDLen+1)
	tests := []struct {
		name   string
		wire   string
		want   queue.Reason // "" means it decodes
		wantID string       // the ID the returned job carries
	}{
		{"valid", `{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"a","data":"x"}]}`, "", "j1"},
		{"valid binary", `{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"a","data_b64":"/wA="}]}`, "", "j1"},
		{"unknown job field", `{"v":1,"id":"j1","store":"s","x":[1],"ops":[{"op":"delete","path":"a"}]}`, queue.ReasonBadInput, "j1"},
		{"misspelt if_match", `{"v":1,"id":"j1","store":"s","ops":[{"op":"delete","path":"a","if-match":"absent"}]}`, queue.ReasonBadInput, "j1"},
		{"upper-case hash", `{"v":1,"id":"j1","store":"s","ops":[{"op":"delete","path":"a","if_match":"sha256:` + strings.Repeat("A", 64) + `"}]}`, queue.ReasonBadInput, "j1"},
		{"trailing data", `{"v":1,"id":"j1","store":"s","ops":[{"op":"delete","path":"a"}]} {}`, queue.ReasonBadInput, "j1"},
		{"no version", `{"id":"j1","store":"s","ops":[{"op":"put","path":"a"}]}`, queue.ReasonBadVersion, "j1"},
		{"future version", `{"v":3,"id":"j1","store":"s","ops":[{"op":"put","path":"a"}]}`, queue.ReasonBadVersion, "j1"},
		{"no id", `{"v":1,"store":"s","ops":[{"op":"put","path":"a"}]}`, queue.ReasonBadInput, ""},
		{"bad id", `{"v":1,"id":"a b","store":"s","ops":[{"op":"put","path":"a"}]}`, queue.ReasonBadInput, ""},
		{"long id", `{"v":1,"id":"` + longID + `","store":"s","ops":[{"op":"put","path":"a"}]}`, queue.ReasonBadInput, ""},
		{"no store", `{"v":1,"id":"j1","ops":[{"op":"put","path":"a"}]}`, queue.ReasonBadInput, "j1"},
		{"no ops", `{"v":1,"id":"j1","store":"s"}`, queue.ReasonBadInput, "j1"},
		{"empty ops", `{"v":1,"id":"j1","store":"s","ops":[]}`, queue.ReasonBadInput, "j1"},
		{"null op", `{"v":1,"id":"j1","store":"s","ops":[null]}`, queue.ReasonBadInput, "j1"},
		{"unknown op", `{"v":1,"id":"j1","store":"s","ops":[{"op":"chmod","path":"a"}]}`, queue.ReasonUnknownOp, "j1"},
		{"missing op kind", `{"v":1,"id":"j1","store":"s","ops":[{"path":"a"}]}`, queue.ReasonBadInput, "j1"},
		{"bad if_match", `{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"a","if_match":"yes"}]}`, queue.ReasonBadInput, "j1"},
		{"escaping path", `{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"/etc/passwd"}]}`, queue.ReasonPathEscapes, "j1"},
		{"both data forms", `{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"a","data":"x","data_b64":"eA=="}]}`, queue.ReasonBadInput, "j1"},
		{"bad base64", `{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"a","data_b64":"%%%"}]}`, queue.ReasonBadInput, "j1"},
		{"wrong type", `{"v":"one","id":"j1","store":"s","ops":[]}`, queue.ReasonBadInput, "j1"},
		{"wrong type, bad id", `{"v":"one","id":"j 1","store":"s","ops":[]}`, queue.ReasonBadInput, ""},
		{"wrong id type", `{"v":1,"id":7,"store":"s","ops":[]}`, queue.ReasonBadInput, ""},
		{"truncated after id", `{"v":1,"id":"j1","store":"s","ops":[{"op":`, queue.ReasonBadInput, "j1"},
		{"truncated before id", `{"v":1,"store":"s","ops":[{"op":`, queue.ReasonBadInput, ""},
		{"nested id is not the job's", `{"v":"x","meta":{"id":"inner"}}`, queue.ReasonBadInput, ""},
		{"not json", `hello`, queue.ReasonBadInput, ""},
		{"empty", ``, queue.ReasonBadInput, ""},
		{"array", `[{"id":"j1"}]`, queue.ReasonBadInput, ""},
		{"raw", "{\"v\":2,\"id\":\"j1\",\"store\":\"s\",\"ops\":[{\"op\":\"put\",\"path\":\"a\",\"data_len\":2}]}\n\x00\n", "", "j1"},
		{"raw, header over lines", "{\"v\":2,\n \"id\":\"j1\",\"store\":\"s\",\n \"ops\":[{\"op\":\"put\",\"path\":\"a\",\"data_len\":1}]}\nx", "", "j1"},
		{"raw, string data too", "{\"v\":2,\"id\":\"j1\",\"store\":\"s\",\"ops\":[{\"op\":\"put\",\"path\":\"a\",\"data\":\"x\"}]}\n", "", "j1"},
		{"raw, no newline", `{"v":2,"id":"j1","store":"s","ops":[{"op":"put","path":"a","data_len":1}]}x`, queue.ReasonBadInput, "j1"},
		{"raw, short data", "{\"v\":2,\"id\":\"j1\",\"store\":\"s\",\"ops\":[{\"op\":\"put\",\"path\":\"a\",\"data_len\":3}]}\nxy", queue.ReasonBadInput, "j1"},
		{"raw, bytes left over", "{\"v\":2,\"id\":\"j1\",\"store\":\"s\",\"ops\":[{\"op\":\"put\",\"path\":\"a\",\"data_len\":1}]}\nxy", queue.ReasonBadInput, "j1"},
		{"raw, negative length", "{\"v\":2,\"id\":\"j1\",\"store\":\"s\",\"ops\":[{\"op\":\"put\",\"path\":\"a\",\"data_len\":-1}]}\n", queue.ReasonBadInput, "j1"},
		{"raw, length and data", "{\"v\":2,\"id\":\"j1\",\"store\":\"s\",\"ops\":[{\"op\":\"put\",\"path\":\"a\",\"data\":\"x\",\"data_len\":1}]}\nx", queue.ReasonBadInput, "j1"},
		{"data_len in version 1", "{\"v\":1,\"id\":\"j1\",\"store\":\"s\",\"ops\":[{\"op\":\"put\",\"path\":\"a\",\"data_len\":1}]}\nx", queue.ReasonBadInput, "j1"},
		{"oversized", `{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"a","data":"` +
			strings.Repeat("x", queue.MaxJobBytes) + `"}]}`, queue.ReasonTooLarge, "j1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := queue.Decode([]byte(tt.wire))
			require.NotNil(t, j, "Decode always returns a job")
			assert.Equal(t, tt.wantID, j.ID)
			if tt.want == "" {
				require.NoError(t, err)
				assert.NoError(t, j.Validate())
				return
			}
			requireReason(t, err, tt.want)
		})
	}
}

func TestDecodeData(t *testing.T) {
	j, err := queue.Decode([]byte(`{"v":1,"id":"j1","store":"s","ops":[` +
		`{"op":"put","path":"a","data":"h\u00e9"},` +
		`{"op":"put","path":"b","data_b64":"/wA="},` +
		`{"op":"delete","path":"c"}]}`))
	require.NoError(t, err)
	require.Len(t, j.Ops, 3)
	assert.Equal(t, []byte("hé"), j.Ops[0].Data)
	assert.Equal(t, []byte{0xff, 0x00}, j.Ops[1].Data)
	assert.Nil(t, j.Ops[2].Data)
}

func TestRejectError(t *testing.T) {
	err := error(queue.Reject(queue.ReasonTooLarge, "file is %d bytes", 5))
	wrapped := errors.Join(errors.New("context"), err)
	assert.ErrorIs(t, wrapped, queue.ErrRejected)
	var rej *queue.RejectError
	require.ErrorAs(t, wrapped, &rej)
	assert.Equal(t, queue.ReasonTooLarge, rej.Reason)
	assert.Equal(t, "file is 5 bytes", rej.Detail)
	assert.Contains(t, err.Error(), "too_large")
	assert.NotErrorIs(t, errors.New("other"), queue.ErrRejected)
}

func TestOutcome(t *testing.T) {
	tests := []struct {
		name    string
		outcome queue.Outcome
		wantErr queue.Reason // "" for applied
	}{
		{"applied", queue.Outcome{ID: "j", Status: queue.StatusApplied, Epoch: 3, Seq: 9, Mode: "daemon",
			At: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), Meta: map[string]string{"k": "v"}}, ""},
		{"rejected", queue.Outcome{ID: "j", Status: queue.StatusRejected, Reason: queue.ReasonPathEscapes,
			Detail: "no", Epoch: 1, Mode: "direct", At: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}, queue.ReasonPathEscapes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.outcome
			b, err := queue.EncodeOutcome(&o)
			require.NoError(t, err)
			got, err := queue.DecodeOutcome(b)
			require.NoError(t, err)
			assert.Equal(t, tt.outcome, o, "EncodeOutcome changed its argument")
			want := o
			want.V = queue.Version
			assert.Equal(t, &want, got)
			assert.Equal(t, tt.wantErr == "", got.Applied())
			if tt.wantErr == "" {
				assert.NoError(t, got.Err())
			} else {
				requireReason(t, got.Err(), tt.wantErr)
			}
		})
	}
}

func TestDecodeOutcomeErrors(t *testing.T) {
	tests := []struct{ name, wire string }{
		{"wrong version", `{"v":2,"id":"j","status":"applied"}`},
		{"no version", `{"id":"j","status":"applied"}`},
		{"not json", `{`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := queue.DecodeOutcome([]byte(tt.wire))
			assert.Error(t, err)
			assert.Nil(t, o)
		})
	}
}

func TestContentHash(t *testing.T) {
	// SHA-256 of the empty string.
	assert.Equal(t, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", queue.ContentHash(nil))
	assert.Equal(t, queue.ContentHash([]byte("a")), queue.ContentHash([]byte("a")))
	assert.NotEqual(t, queue.ContentHash([]byte("a")), queue.ContentHash([]byte("b")))
}

// NewID makes distinct valid IDs of 32 lower-case hex digits, each one
// after the last in byte order, as the journal's keys (its outcomes by
// ID) are: IDs made one after another land beside one another.
func TestNewID(t *testing.T) {
	before := time.Now().UnixMilli()
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = queue.NewID()
	}
	after := time.Now().UnixMilli()
	for i, id := range ids {
		require.True(t, queue.ValidID(id), id)
		require.Regexp(t, `^[0-9a-f]{32}$`, id)
		if i > 0 {
			require.Less(t, ids[i-1], id, "IDs %d and %d", i-1, i)
		}
	}
	// The first 12 digits are the time it was made, in Unix milliseconds.
	ms, err := strconv.ParseInt(ids[0][:12], 16, 64)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, ms, before)
	assert.LessOrEqual(t, ms, after)
	// The last 62 bits are random: two IDs made in the same instant differ
	// there, not only in the time.
	assert.NotEqual(t, ids[0][16:], ids[1][16:])
}

// IDProblem is empty exactly for the IDs ValidID takes, and otherwise
// names the rule, with the ID cut short if long.
func TestIDProblem(t *testing.T) {
	for _, id := range []string{"a", "job-1_X", strings.Repeat("z", queue.MaxIDLen)} {
		assert.Empty(t, queue.IDProblem(id), id)
	}
	for _, id := range []string{"", "a.b", "a b", "é", strings.Repeat("z", queue.MaxIDLen+1), strings.Repeat("y", 10000)} {
		p := queue.IDProblem(id)
		assert.Contains(t, p, fmt.Sprintf("want 1-%d characters of [A-Za-z0-9_-]", queue.MaxIDLen), "%.20q", id)
		assert.Less(t, len(p), 200, "a long ID is cut short")
	}
}

// TestDecodeRefusesFieldsGivenEmpty: a field given empty is not taken for
// one left out. A file op with "name": "" or "args": [] has a field a file
// op cannot have; "priority": "" and "coalesce": "" are no values of
// theirs. Each is bad_input, as any other field the job cannot have.
func TestDecodeRefusesFieldsGivenEmpty(t *testing.T) {
	put := `{"op":"put","path":"a","data":"x"`
	exec := `{"op":"exec","name":"mine"`
	for _, tc := range []struct{ name, ops, top, want string }{
		{"priority", put + `}`, `,"priority":""`, "priority: empty"},
		{"coalesce on file ops", put + `}`, `,"coalesce":""`, "coalesce: empty"},
		{"coalesce on exec", exec + `}`, `,"coalesce":""`, "coalesce: empty"},
		{"file op name", put + `,"name":""}`, ``, "op name: empty"},
		{"file op dir", put + `,"dir":""}`, ``, "op dir: empty"},
		{"file op args", put + `,"args":[]}`, ``, "only an exec op has args"},
		{"exec op path", exec + `,"path":""}`, ``, "op path: an exec op has none"},
		{"exec op dir", exec + `,"dir":""}`, ``, "op dir: empty"},
		{"exec op name", `{"op":"exec","name":""}`, ``, "op name: empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(`{"v":1,"id":"j1","store":"s","ops":[` + tc.ops + `]` + tc.top + `}`)
			j, err := queue.Decode(b)
			var rej *queue.RejectError
			require.ErrorAs(t, err, &rej, "%s", b)
			assert.Equal(t, queue.ReasonBadInput, rej.Reason)
			assert.Contains(t, rej.Detail, tc.want)
			assert.Equal(t, "j1", j.ID, "recorded under its ID")
		})
	}
	// A file op's empty path is an empty path, as one left out.
	_, err := queue.Decode([]byte(`{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"","data":"x"}]}`))
	var rej *queue.RejectError
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, queue.ReasonPathEscapes, rej.Reason)
	assert.Contains(t, rej.Detail, "empty path")
	// A job file decoded into a Job is held to the same rule.
	assert.ErrorContains(t, queue.CheckGivenEmpty([]byte(`{"ops":[],"priority":""}`)), "priority: empty")
	assert.ErrorContains(t, queue.CheckGivenEmpty([]byte(`{"ops":[],"Coalesce":""}`)), "coalesce: empty")
	assert.NoError(t, queue.CheckGivenEmpty([]byte(`{"ops":[],"priority":"high","coalesce":null}`)))
	// An exec op's "args": [] is no args, as before.
	j, err := queue.Decode([]byte(`{"v":1,"id":"j1","store":"s","ops":[{"op":"exec","name":"mine","args":[]}]}`))
	require.NoError(t, err)
	assert.Nil(t, j.Ops[0].Args)
}
