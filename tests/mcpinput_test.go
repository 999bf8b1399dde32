package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
)

// mcpLines is a `scribe mcp` process spoken to line by line on its stdin
// and stdout, as a host's transport does, so that the test can send what
// no SDK client would.
type mcpLines struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    chan []byte // the lines of its stdout; closed at its end
	stderr *testkit.SyncBuffer
	exited chan struct{}
}

// mcpCallWait is the --wait the tests give scribe mcp: the longest a tool
// call may take. An answer is awaited twice as long.
const mcpCallWait = 30 * time.Second

// startMCPLines runs `scribe mcp --store store` and initialises the
// session.
func startMCPLines(t *testing.T, store string) *mcpLines {
	t.Helper()
	cmd := exec.Command(scribeBin, "mcp", "--store", store, "--log-level", "debug", "--wait", mcpCallWait.String())
	cmd.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_AUTOSTART=", "SCRIBE_EXIT_IDLE=")
	s := &mcpLines{cmd: cmd, out: make(chan []byte, 64), stderr: &testkit.SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = s.stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	s.in = in
	require.NoError(t, cmd.Start())
	go func() {
		defer close(s.out)
		br := bufio.NewReader(out)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				s.out <- bytes.TrimSuffix(line, []byte("\n"))
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		_ = s.in.Close()
		select {
		case <-s.exited:
		case <-time.After(mcpTerminate):
			_ = cmd.Process.Kill()
			<-s.exited
		}
		for range s.out { // what was left unread, so that the reader ends
		}
		if t.Failed() {
			t.Logf("scribe mcp stderr:\n%s", s.stderr.String())
		}
	})
	s.send(t, []byte(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"scribe-tests","version":"0"}}}`))
	s.answer(t, `"init"`)
	s.send(t, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	return s
}

// send writes a line and its newline.
func (s *mcpLines) send(t *testing.T, line []byte) {
	t.Helper()
	_, err := s.in.Write(append(line, '\n'))
	require.NoError(t, err, "scribe mcp stopped reading its stdin")
}

// answer waits for the response to the request of this id (raw JSON) and
// returns it and the messages written before it.
func (s *mcpLines) answer(t *testing.T, id string) (answer map[string]json.RawMessage, before []map[string]json.RawMessage) {
	t.Helper()
	deadline := time.After(2 * mcpCallWait)
	for {
		select {
		case line, ok := <-s.out:
			require.True(t, ok, "scribe mcp ended its output before answering %s", id)
			var m map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(line, &m), "not JSON on stdout: %q", line)
			assert.JSONEq(t, `"2.0"`, string(m["jsonrpc"]), "%s", line)
			if string(m["id"]) == id && m["method"] == nil {
				return m, before
			}
			before = append(before, m)
		case <-deadline:
			require.FailNow(t, "no answer", "to %s within %s", id, 2*mcpCallWait)
		}
	}
}

// mcpBigLine is a line of 60 MB: far over what scribe mcp reads of one
// message (32 MiB).
const mcpBigLine = 60_000_000

// One malformed line must not kill `scribe mcp`: each gets its JSON-RPC
// error (-32700 for what is not JSON, -32600 for JSON that is no valid
// request, with the request's id when it can be read, else null), or no
// answer for an empty line, a notification or a response, and the tool
// call sent after it is answered and applied, through the daemon.
func TestMCPServerSurvivesMalformedLines(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	s := startMCPLines(t, store)

	// A tools/call as the TypeScript SDK writes one: the id last, after
	// 60 MB of arguments.
	bigCall := append([]byte(`{"method":"tools/call","params":{"name":"append","arguments":{"path":"big.txt","data":"`),
		bytes.Repeat([]byte("a"), mcpBigLine)...)
	bigCall = append(bigCall, `"}},"jsonrpc":"2.0","id":"big-1"}`...)

	cases := []struct {
		name string
		line []byte
		code int64  // 0: no answer
		id   string // the error's id, raw
	}{
		{"not JSON", []byte(`hello`), -32700, "null"},
		{"truncated JSON", []byte(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"append"`), -32700, "null"},
		{`"jsonrpc":"1.0"`, []byte(`{"jsonrpc":"1.0","id":5,"method":"tools/list"}`), -32600, "5"},
		{"missing jsonrpc", []byte(`{"id":"x-5","method":"tools/list"}`), -32600, `"x-5"`},
		{"object id", []byte(`{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}`), -32600, "null"},
		{"array id", []byte(`{"jsonrpc":"2.0","id":[1],"method":"tools/list"}`), -32600, "null"},
		{"bool id", []byte(`{"jsonrpc":"2.0","id":true,"method":"tools/list"}`), -32600, "null"},
		{"null id", []byte(`{"jsonrpc":"2.0","id":null,"method":"tools/list"}`), -32600, "null"},
		{"fractional id", []byte(`{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}`), -32600, "null"},
		{"method a number", []byte(`{"jsonrpc":"2.0","id":5,"method":7}`), -32600, "5"},
		{"a 60 MB line, id last", bigCall, -32600, `"big-1"`},
		{"a 60 MB line of no JSON", bytes.Repeat([]byte("x"), mcpBigLine), -32600, "null"},
		{"a JSON array", []byte(`[{"jsonrpc":"2.0","id":5,"method":"tools/list"}]`), -32600, "null"},
		{"a non-object", []byte(`42`), -32600, "null"},
		{"a string", []byte(`"tools/list"`), -32600, "null"},
		{"an empty line", []byte(``), 0, ""},
		{"a malformed notification", []byte(`{"jsonrpc":"1.0","method":"notifications/initialized"}`), 0, ""},
		{"a malformed response", []byte(`{"jsonrpc":"2.0","id":5,"error":"boom"}`), 0, ""},
	}
	// What the lines that ran (-run may pick some) should have done.
	var (
		want             strings.Builder
		last             string
		refused, dropped bool
	)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fmt.Fprintf(&want, "after %d\n", i)
			last = fmt.Sprintf("after-%d", i)
			refused, dropped = refused || tc.code != 0, dropped || tc.code == 0 && len(tc.line) > 0
			s.send(t, tc.line)
			call := fmt.Sprintf(`"call-%d"`, i)
			s.send(t, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"append","arguments":{"path":"log.txt","data":"after %d\n","id":"after-%d"}}}`, call, i, i))
			answer, before := s.answer(t, call)

			// The transport answers a line before it reads the next, so
			// whatever it said of the bad line came first.
			if tc.code == 0 {
				assert.Empty(t, before, "no answer")
			} else if assert.Len(t, before, 1, "one answer: %v", before) {
				var e struct {
					Code    int64  `json:"code"`
					Message string `json:"message"`
				}
				require.Contains(t, before[0], "error", "answered to id %s without an error", before[0]["id"])
				require.NoError(t, json.Unmarshal(before[0]["error"], &e), "%s", before[0]["error"])
				assert.Equal(t, tc.code, e.Code, e.Message)
				assert.NotEmpty(t, e.Message)
				assert.Equal(t, tc.id, string(before[0]["id"]), "the error's id")
			}

			var res struct {
				IsError           bool          `json:"isError"`
				StructuredContent queue.Outcome `json:"structuredContent"`
			}
			require.NoError(t, json.Unmarshal(answer["result"], &res), "the call after it: %v", answer)
			assert.False(t, res.IsError, "%s", answer["result"])
			assert.Equal(t, fmt.Sprintf("after-%d", i), res.StructuredContent.ID)
			assert.Equal(t, queue.StatusApplied, res.StructuredContent.Status)
			assert.Equal(t, queue.ModeDaemon, res.StructuredContent.Mode)
		})
		if t.Failed() {
			t.FailNow() // the server is gone: the other lines would say nothing more
		}
	}

	assert.Equal(t, want.String(), readFile(t, filepath.Join(store, "log.txt")), "every call after a bad line applied, once, in order")
	assert.NoFileExists(t, filepath.Join(store, "big.txt"), "the refused call wrote nothing")
	assert.Equal(t, queue.ModeDaemon, outcomeOf(t, store, last).Mode, "the journal agrees")
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmHWM:") {
				t.Logf("scribe mcp's peak memory (VmHWM): %s", strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:")))
			}
		}
	}

	require.NoError(t, s.in.Close())
	select {
	case <-s.exited:
	case <-time.After(mcpTerminate):
		t.Fatal("scribe mcp did not exit when its stdin closed")
	}
	assert.True(t, s.cmd.ProcessState.Success(), "%v", s.cmd.ProcessState)
	if refused {
		assert.Contains(t, s.stderr.String(), "refused a message")
	}
	if dropped {
		assert.Contains(t, s.stderr.String(), "dropped a message")
	}
	assert.Contains(t, s.stderr.String(), "stdin closed, exiting")
}
