package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/tests/testkit"
)

// rawMCP is an MCP server of a fresh store on a lineTransport over pipes,
// spoken to line by line, as a host would, initialised.
type rawMCP struct {
	in   *io.PipeWriter
	out  *lineLog
	done chan error // the server's Run, once it has returned
	n    int        // requests sent by call
}

// answerWithin bounds the wait for an answer: no call of these tests
// waits for a store, and a tool call is bounded by DefaultWait.
const answerWithin = DefaultWait

// startRawMCP serves a fresh store by the direct route; max bounds a
// message (0: maxMessage).
func startRawMCP(t testing.TB, max int) *rawMCP {
	t.Helper()
	return startRawMCPWith(t, max, Config{Store: t.TempDir(), Route: client.RouteDirect}, nil)
}

// startRawMCPWith is startRawMCP of cfg, the transport logging to log.
func startRawMCPWith(t testing.TB, max int, cfg Config, log *slog.Logger) *rawMCP {
	t.Helper()
	srv, err := New(cfg)
	require.NoError(t, err)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &rawMCP{in: inW, out: newLineLog(outR), done: make(chan error, 1)}
	go func() {
		err := srv.sdk.Run(context.Background(), &lineTransport{Reader: inR, Writer: outW, MaxMessage: max, Log: log})
		_ = outW.Close()
		s.done <- err
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case <-s.done:
		case <-time.After(answerWithin):
			t.Errorf("the server did not end with its input")
		}
	})
	s.send(t, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	s.answer(t, `"init"`)
	s.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

// send writes lines as they are, each followed by a newline.
func (s *rawMCP) send(t testing.TB, lines ...string) {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	_, err := io.WriteString(s.in, b.String())
	require.NoError(t, err, "the server stopped reading")
}

// answer waits for the answer to the request of this id (raw JSON) and
// returns it with the lines the server wrote before it since the last
// answer.
func (s *rawMCP) answer(t testing.TB, id string) (answer map[string]json.RawMessage, before []map[string]json.RawMessage) {
	t.Helper()
	for {
		line, ok := s.out.next(answerWithin)
		require.True(t, ok, "no answer to id %s; the server ended: %v", id, s.ended())
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(line, &m), "the server wrote %q", line)
		assert.JSONEq(t, `"2.0"`, string(m["jsonrpc"]), "%s", line)
		if string(m["id"]) == id && m["method"] == nil {
			return m, before
		}
		before = append(before, m)
	}
}

// ping sends a ping request and returns what the server wrote before its
// answer, which must come.
func (s *rawMCP) ping(t testing.TB) []map[string]json.RawMessage {
	t.Helper()
	s.n++
	id := fmt.Sprintf(`"ping-%d"`, s.n)
	s.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"ping"}`, id))
	answer, before := s.answer(t, id)
	require.Contains(t, answer, "result", "ping: %v", answer)
	return before
}

// ended says whether the server's Run has returned, and with what.
func (s *rawMCP) ended() string {
	select {
	case err := <-s.done:
		s.done <- err
		return fmt.Sprintf("yes (%v)", err)
	default:
		return "no"
	}
}

// lineLog collects the lines of a stream as they come, so that the writer
// never waits for the test to read.
type lineLog struct {
	mu    sync.Mutex
	lines [][]byte
	eof   bool
	more  chan struct{} // signalled on each line and at the end
}

func newLineLog(r io.Reader) *lineLog {
	l := &lineLog{more: make(chan struct{}, 1)}
	go func() {
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadBytes('\n')
			l.mu.Lock()
			if len(line) > 0 {
				l.lines = append(l.lines, bytes.TrimSuffix(line, []byte("\n")))
			}
			l.eof = err != nil
			l.mu.Unlock()
			select {
			case l.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return l
}

// next returns the next line, or false at the end of the stream or after
// within.
func (l *lineLog) next(within time.Duration) ([]byte, bool) {
	deadline := time.After(within)
	for {
		l.mu.Lock()
		if len(l.lines) > 0 {
			line := l.lines[0]
			l.lines = l.lines[1:]
			l.mu.Unlock()
			return line, true
		}
		eof := l.eof
		l.mu.Unlock()
		if eof {
			return nil, false
		}
		select {
		case <-l.more:
		case <-deadline:
			return nil, false
		}
	}
}

// testMaxMessage is the bound the tests give the transport, so that
// lines over it are quick to make.
const testMaxMessage = 4096

// malformed are lines the transport must refuse, each with its answer:
// code and id (raw JSON), or code 0 for none.
var malformed = []struct {
	name string
	line string
	code int64
	id   string
}{
	{"not JSON", `hello`, jsonrpc.CodeParseError, "null"},
	{"truncated JSON", `{"jsonrpc":"2.0","id":5,"method":"tools/list"`, jsonrpc.CodeParseError, "null"},
	{"two values on a line", `{"jsonrpc":"2.0","id":5,"method":"ping"} {}`, jsonrpc.CodeParseError, "null"},
	{"invalid UTF-16 escape", `{"jsonrpc":"2.0","id":5,"method":"\u12"}`, jsonrpc.CodeParseError, "null"},
	// Text that would read as U+FFFD: an argument not as sent, or an id
	// that two requests share.
	{"an argument not UTF-8", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"append","arguments":{"path":"caf` + "\xe9" + `.txt","data":"x"}}}`, jsonrpc.CodeParseError, "5"},
	{"a lone surrogate in an argument", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"put","arguments":{"path":"a.txt","data":"A\ud800B"}}}`, jsonrpc.CodeParseError, "5"},
	{"an id not UTF-8", `{"jsonrpc":"2.0","id":"req-` + "\xff" + `","method":"ping"}`, jsonrpc.CodeParseError, "null"},
	{"an id with a lone surrogate", `{"jsonrpc":"2.0","id":"req-\udc00","method":"ping"}`, jsonrpc.CodeParseError, "null"},
	{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":5,"method":"tools/list"}`, jsonrpc.CodeInvalidRequest, "5"},
	{"jsonrpc a number", `{"jsonrpc":2.0,"id":"a-1","method":"tools/list"}`, jsonrpc.CodeInvalidRequest, `"a-1"`},
	{"no jsonrpc", `{"id":5,"method":"tools/list"}`, jsonrpc.CodeInvalidRequest, "5"},
	{"members in capitals", `{"JSONRPC":"2.0","id":5,"method":"tools/list"}`, jsonrpc.CodeInvalidRequest, "5"},
	{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}`, jsonrpc.CodeInvalidRequest, "null"},
	{"array id", `{"jsonrpc":"2.0","id":[1],"method":"tools/list"}`, jsonrpc.CodeInvalidRequest, "null"},
	{"bool id", `{"jsonrpc":"2.0","id":true,"method":"tools/list"}`, jsonrpc.CodeInvalidRequest, "null"},
	{"null id", `{"jsonrpc":"2.0","id":null,"method":"tools/list"}`, jsonrpc.CodeInvalidRequest, "null"},
	{"fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}`, jsonrpc.CodeInvalidRequest, "null"},
	{"id beyond 2^53", `{"jsonrpc":"2.0","id":12345678901234567890,"method":"tools/list"}`, jsonrpc.CodeInvalidRequest, "null"},
	{"method a number", `{"jsonrpc":"2.0","id":5,"method":7}`, jsonrpc.CodeInvalidRequest, "5"},
	{"method null", `{"jsonrpc":"2.0","id":5,"method":null}`, jsonrpc.CodeInvalidRequest, "5"},
	{"neither request nor response", `{"jsonrpc":"2.0","id":5}`, jsonrpc.CodeInvalidRequest, "5"},
	{"empty object", `{}`, jsonrpc.CodeInvalidRequest, "null"},
	{"error member not an object", `{"jsonrpc":"2.0","id":5,"method":"ping","error":"x"}`, jsonrpc.CodeInvalidRequest, "5"},
	{"nested deeper than the SDK reads", `{"jsonrpc":"2.0","id":5,"method":"ping","params":{"a":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}}`, jsonrpc.CodeInvalidRequest, "5"},
	{"a batch", `[{"jsonrpc":"2.0","id":5,"method":"ping"}]`, jsonrpc.CodeInvalidRequest, "null"},
	{"an empty batch", `[]`, jsonrpc.CodeInvalidRequest, "null"},
	{"a number", `42`, jsonrpc.CodeInvalidRequest, "null"},
	{"a string", `"tools/list"`, jsonrpc.CodeInvalidRequest, "null"},
	{"null", `null`, jsonrpc.CodeInvalidRequest, "null"},
	{"over the bound, id first", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"append","arguments":{"path":"a","data":"` + strings.Repeat("a", testMaxMessage) + `"}}}`, jsonrpc.CodeInvalidRequest, "5"},
	{"over the bound, id last", `{"method":"tools/call","params":{"name":"put","arguments":{"path":"a","data":"` + strings.Repeat(`\"}`, testMaxMessage) + `"}},"jsonrpc":"2.0","id":"big-1"}`, jsonrpc.CodeInvalidRequest, `"big-1"`},
	{"over the bound, id spelt with escapes", `{"i\u0064" : 6 ,"method":"x","params":[` + strings.Repeat(`{"id":1},`, testMaxMessage) + `0]}`, jsonrpc.CodeInvalidRequest, "6"},
	{"over the bound, not JSON", strings.Repeat("x", 3*testMaxMessage), jsonrpc.CodeInvalidRequest, "null"},
	{"over the bound, unterminated", `{"jsonrpc":"2.0","id":5,"method":"x","params":"` + strings.Repeat("a", testMaxMessage), jsonrpc.CodeInvalidRequest, "null"},
	{"over the bound, object id", `{"id":{"a":"` + strings.Repeat("a", testMaxMessage) + `"},"method":"x"}`, jsonrpc.CodeInvalidRequest, "null"},
	{"over the bound, a batch", `[` + strings.Repeat(`{"jsonrpc":"2.0","id":5,"method":"ping"},`, testMaxMessage/32) + `{}]`, jsonrpc.CodeInvalidRequest, "null"},

	// No answer: nothing was sent, or a notification or response, which
	// expect none.
	{"empty line", ``, 0, ""},
	{"blanks", " \t\r", 0, ""},
	{"notification, jsonrpc 1.0", `{"jsonrpc":"1.0","method":"notifications/initialized"}`, 0, ""},
	{"notification, method a number", `{"jsonrpc":"2.0","method":7}`, 0, ""},
	{"notification, not UTF-8", `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + "\xff" + `"}}`, 0, ""},
	{"notification over the bound", `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + strings.Repeat("a", testMaxMessage) + `"}}`, 0, ""},
	{"response, error not an object", `{"jsonrpc":"2.0","id":5,"error":"x"}`, 0, ""},
	{"response without an id", `{"jsonrpc":"2.0","result":{}}`, 0, ""},
	{"error response to null", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`, 0, ""},
	{"response, object id", `{"jsonrpc":"2.0","id":{},"result":{}}`, 0, ""},
	{"response over the bound", `{"jsonrpc":"2.0","id":5,"result":{"a":"` + strings.Repeat("a", testMaxMessage) + `"}}`, 0, ""},
}

// Each malformed line gets its error (or, for a notification, a response
// or an empty line, nothing) and the server serves the next line. The
// transport answers a line before it reads the next, so what the server
// wrote before the ping's answer is all it answered to the line.
func TestMCPTransportRefusesMalformed(t *testing.T) {
	s := startRawMCP(t, testMaxMessage)
	for _, tc := range malformed {
		t.Run(tc.name, func(t *testing.T) {
			s.send(t, tc.line)
			got := s.ping(t)
			if tc.code == 0 {
				assert.Empty(t, got, "no answer")
				return
			}
			require.Len(t, got, 1, "one answer: %v", got)
			var e jsonrpc.Error
			require.NoError(t, json.Unmarshal(got[0]["error"], &e), "%v", got[0])
			assert.Equal(t, tc.code, e.Code, e.Message)
			assert.Equal(t, tc.id, string(got[0]["id"]), "id")
			assert.NotContains(t, got[0], "result")
			assert.NotEmpty(t, e.Message)
		})
	}
}

// A request whose id is still in flight is dropped and logged, with no
// answer of its own: the SDK would drop it silently, and an answer would
// carry the id the host still waits on. Once the first is answered, the
// id may come again.
func TestMCPTransportDropsAnIDInFlight(t *testing.T) {
	store := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(store, ".scribe"), 0o700))
	held := flock.New(filepath.Join(store, ".scribe", "lock"))
	ok, err := held.TryLock()
	require.NoError(t, err)
	require.True(t, ok)
	var log testkit.SyncBuffer
	s := startRawMCPWith(t, testMaxMessage, Config{Store: store, Route: client.RouteDirect, Wait: time.Minute}, slog.New(slog.NewTextHandler(&log, nil)))
	put := func(data string) string {
		return `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"put","arguments":{"path":"a.txt","data":"` + data + `"}}}`
	}
	s.send(t, put("first"), put("second")) // the first waits for the store
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "still in flight") }, answerWithin, 10*time.Millisecond)
	require.NoError(t, held.Unlock())
	answer, before := s.answer(t, "7")
	assert.Empty(t, before)
	assert.Contains(t, string(answer["result"]), `\"status\":\"applied\"`, "%v", answer)
	assert.Empty(t, s.ping(t), "one answer to id 7")
	b, err := os.ReadFile(filepath.Join(store, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "first", string(b), "the second was not run")

	s.send(t, put("again"))
	answer, _ = s.answer(t, "7")
	assert.Contains(t, string(answer["result"]), `\"status\":\"applied\"`, "the id may come again once answered: %v", answer)
}

// What the SDK answers rightly is left to it: the transport passes
// valid messages on as they are.
func TestMCPTransportLeavesTheSDKItsAnswers(t *testing.T) {
	s := startRawMCP(t, testMaxMessage)
	for _, tc := range []struct {
		name, line, id string
		code           int64 // 0: a result
	}{
		{"unknown method", `{"jsonrpc":"2.0","id":"u","method":"nope"}`, `"u"`, jsonrpc.CodeMethodNotFound},
		{"params a number", `{"jsonrpc":"2.0","id":"p","method":"tools/list","params":5}`, `"p"`, jsonrpc.CodeInvalidParams},
		{"unknown tool", `{"jsonrpc":"2.0","id":"t","method":"tools/call","params":{"name":"nope","arguments":{}}}`, `"t"`, jsonrpc.CodeInvalidParams},
		{"integral id in another spelling", `{"jsonrpc":"2.0","id":1e2,"method":"ping"}`, `100`, 0},
		{"negative id", `{"jsonrpc":"2.0","id":-9007199254740991,"method":"ping"}`, `-9007199254740991`, 0},
		{"CRLF", "{\"jsonrpc\":\"2.0\",\"id\":\"crlf\",\"method\":\"ping\"}\r", `"crlf"`, 0},
		{"blanks around", " \t{\"jsonrpc\":\"2.0\",\"id\":\"sp\",\"method\":\"ping\"} ", `"sp"`, 0},
		{"unknown members", `{"jsonrpc":"2.0","id":"x","method":"ping","extra":[1]}`, `"x"`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.send(t, tc.line)
			answer, before := s.answer(t, tc.id)
			assert.Empty(t, before)
			if tc.code == 0 {
				assert.Contains(t, answer, "result", "%v", answer)
				return
			}
			var e jsonrpc.Error
			require.NoError(t, json.Unmarshal(answer["error"], &e), "%v", answer)
			assert.Equal(t, tc.code, e.Code, e.Message)
		})
	}
}

// A line at the bound is read whole; one byte more is refused.
func TestMCPTransportBound(t *testing.T) {
	s := startRawMCP(t, testMaxMessage)
	call := func(id string, pad int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"ping","params":{"_meta":{"pad":"%s"}}}`, id, strings.Repeat("a", pad))
	}
	fit := call("fit", 0)
	fit = call("fit", testMaxMessage-len(fit))
	require.Len(t, fit, testMaxMessage)
	s.send(t, fit+"\r") // the line ending is not the message's
	answer, _ := s.answer(t, `"fit"`)
	assert.Contains(t, answer, "result", "%v", answer)

	over := call("over", testMaxMessage+1-len(call("over", 0)))
	require.Len(t, over, testMaxMessage+1)
	s.send(t, over)
	answer, _ = s.answer(t, `"over"`)
	var e jsonrpc.Error
	require.NoError(t, json.Unmarshal(answer["error"], &e), "%v", answer)
	assert.Equal(t, int64(jsonrpc.CodeInvalidRequest), e.Code)
	assert.Equal(t, fmt.Sprintf("invalid request: message too large: %d bytes, the most is %d", testMaxMessage+1, testMaxMessage), e.Message)
	s.ping(t)
}

// docs/mcp.md's example of malformed lines runs as written: each line
// sent (>) gets the answers shown after it (<), and no other.
func TestMCPDocsMalformedExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/mcp.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)\n## Malformed messages\n.*?```text\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/mcp.md has no ## Malformed messages section with a ```text block")
	type step struct {
		send    string
		answers []string
	}
	var steps []step
	for _, l := range strings.Split(strings.TrimSpace(string(m[1])), "\n") {
		switch {
		case strings.HasPrefix(l, "> "):
			steps = append(steps, step{send: l[2:]})
		case strings.HasPrefix(l, "< ") && len(steps) > 0:
			steps[len(steps)-1].answers = append(steps[len(steps)-1].answers, l[2:])
		default:
			t.Fatalf("docs/mcp.md's example: a line neither sent nor answered: %q", l)
		}
	}
	require.NotEmpty(t, steps)

	s := startRawMCP(t, 0)
	for _, st := range steps {
		s.send(t, st.send)
		got := s.ping(t)
		// The server may answer the ping first: it handles requests side
		// by side.
		for len(got) < len(st.answers) {
			line, ok := s.out.next(answerWithin)
			require.True(t, ok, "answers to %s: %v, then nothing", st.send, got)
			var m map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(line, &m), "the server wrote %q", line)
			got = append(got, m)
		}
		require.Len(t, got, len(st.answers), "answers to %s: %v", st.send, got)
		for i, want := range st.answers {
			b, err := json.Marshal(got[i])
			require.NoError(t, err)
			assert.JSONEq(t, want, string(b), "answer to %s", st.send)
		}
	}
}

// The line reader splits lines across buffer refills, keeps a line of
// max bytes (its "\r\n" aside), scans a longer one instead of keeping it,
// and reads a last line without a newline.
func TestLineReader(t *testing.T) {
	const max = 40
	long := `{"id":7,"method":"x","params":"` + strings.Repeat("p", max) + `"}`
	input := strings.Join([]string{
		"first",
		strings.Repeat("a", max) + "\r",
		strings.Repeat("b", max+1),
		"",
		long + "\r",
		"\r",
		"last",
	}, "\n")
	r := &lineReader{br: bufio.NewReaderSize(strings.NewReader(input), 16), max: max}
	want := []struct {
		line string
		over int // the size of a line scanned instead
	}{
		{"first", 0},
		{strings.Repeat("a", max), 0},
		{"", max + 1},
		{"", 0},
		{"", len(long) + 1},
		{"", 0},
		{"last", 0},
	}
	for i, w := range want {
		line, over, err := r.next()
		require.NoError(t, err, "line %d", i)
		if w.over > 0 {
			require.NotNil(t, over, "line %d is over the bound", i)
			assert.Nil(t, line)
			assert.Equal(t, w.over, over.size, "line %d", i)
			continue
		}
		require.Nil(t, over, "line %d", i)
		assert.Equal(t, w.line, string(line), "line %d", i)
	}
	_, _, err := r.next()
	assert.ErrorIs(t, err, io.EOF)
}

// FuzzMCPTransport: whatever lines come first, the server answers a
// valid request after them, never ends, and every line it writes is a
// JSON-RPC message.
func FuzzMCPTransport(f *testing.F) {
	for _, tc := range malformed {
		f.Add([]byte(tc.line))
	}
	const final = "fuzz-final"
	f.Fuzz(func(t *testing.T, data []byte) {
		if bytes.Contains(data, []byte(final)) {
			t.Skip("the input would answer for the last request")
		}
		s := startRawMCP(t, testMaxMessage)
		_, err := s.in.Write(append(data, '\n'))
		require.NoError(t, err, "the server stopped reading")
		s.send(t, `{"jsonrpc":"2.0","id":"`+final+`","method":"tools/list"}`)
		for {
			line, ok := s.out.next(answerWithin)
			require.True(t, ok, "no answer to the last request; the server ended: %v", s.ended())
			var m map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(line, &m), "the server wrote %q", line)
			require.JSONEq(t, `"2.0"`, string(m["jsonrpc"]), "%s", line)
			if string(m["id"]) == `"`+final+`"` && m["method"] == nil {
				_, result := m["result"]
				_, failed := m["error"]
				require.True(t, result || failed, "%s", line)
				break
			}
		}
		assert.Equal(t, "no", s.ended())
	})
}

// FuzzMCPScan: whatever the bytes, in whatever chunks, the scan of a
// line too long to hold never panics, and over a JSON object it finds
// what decoding the object finds: its top-level members and its id. So
// a message over the bound is refused to the id a shorter one would be.
func FuzzMCPScan(f *testing.F) {
	for i, tc := range malformed {
		f.Add([]byte(tc.line), uint8(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		var s scan
		for rest, n := data, int(chunk)+1; len(rest) > 0; {
			n = min(n, len(rest))
			s.feed(rest[:n])
			rest = rest[n:]
		}
		v := s.verdict(len(data))
		require.Equal(t, len(data), s.size)

		var m map[string]json.RawMessage
		if json.Unmarshal(data, &m) != nil || m == nil {
			return // not a JSON object: the scan may guess
		}
		require.Equal(t, scanDone, s.state, "a JSON object is scanned whole")
		_, hasID := m["id"]
		_, hasMethod := m["method"]
		_, hasResult := m["result"]
		_, hasError := m["error"]
		sh := shape{id: hasID, method: hasMethod, result: hasResult || hasError}
		require.Equal(t, sh, s.shape)
		if !sh.answered() {
			require.Nil(t, v.reply, "a notification or a response is not answered")
			return
		}
		require.NotNil(t, v.reply)
		var want json.RawMessage
		if checkID(m["id"]) == nil && len(m["id"]) <= maxScanID {
			want = m["id"]
		}
		require.Equal(t, string(want), string(v.id))
	})
}

// A merge patch with a number no float64 holds is refused by the SDK's
// reading of the arguments, as mcp.md says, and nothing is written.
func TestMCPMergeRefusesANumberNoFloatHolds(t *testing.T) {
	store := t.TempDir()
	s := startRawMCPWith(t, testMaxMessage, Config{Store: store, Route: client.RouteDirect}, nil)
	s.send(t, `{"jsonrpc":"2.0","id":"m","method":"tools/call","params":{"name":"merge","arguments":{"path":"a.json","patch":{"e":1e400}}}}`)
	answer, _ := s.answer(t, `"m"`)
	var res struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	require.NoError(t, json.Unmarshal(answer["result"], &res), "%v", answer)
	assert.True(t, res.IsError)
	require.NotEmpty(t, res.Content)
	assert.Contains(t, res.Content[0].Text, `validating "arguments"`)
	assert.NoFileExists(t, filepath.Join(store, "a.json"))
}
