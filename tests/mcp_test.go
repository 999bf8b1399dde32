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
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
)

// mcpServer is a `scribe mcp` process and an MCP client session to it,
// over its stdin and stdout.
type mcpServer struct {
	cs     *mcp.ClientSession
	cmd    *exec.Cmd
	stderr *testkit.SyncBuffer
	closed bool
}

// mcpTerminate is how long the client waits, once it has closed the
// server's stdin, before it sends SIGTERM: far longer than a server that
// exits on end of input takes.
const mcpTerminate = 30 * time.Second

// startMCP runs `scribe mcp --store store EXTRA...` and connects to it
// with the SDK's client over the command transport.
func startMCP(t *testing.T, store string, extra ...string) *mcpServer {
	t.Helper()
	cmd := exec.Command(scribeBin, append([]string{"mcp", "--store", store, "--log-level", "debug"}, extra...)...)
	cmd.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_AUTOSTART=", "SCRIBE_EXIT_IDLE=")
	s := &mcpServer{cmd: cmd, stderr: &testkit.SyncBuffer{}}
	cmd.Stderr = s.stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "scribe-tests", Version: "v0"}, nil).
		Connect(t.Context(), &mcp.CommandTransport{Command: cmd, TerminateDuration: mcpTerminate}, nil)
	require.NoError(t, err, "stderr:\n%s", s.stderr.String())
	s.cs = cs
	t.Cleanup(func() {
		if !s.closed {
			_ = cs.Close()
		}
		if t.Failed() {
			t.Logf("scribe mcp stderr:\n%s", s.stderr.String())
		}
	})
	return s
}

// call calls a tool; a tool's failure is a result, never a protocol error.
func (s *mcpServer) call(t *testing.T, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := s.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	return res
}

// mcpText is a result's text content.
func mcpText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// mcpStructured decodes a result's structured content into v.
func mcpStructured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	require.NotNil(t, res.StructuredContent, "no structured content: %s", mcpText(res))
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, v), "%s", b)
}

// mcpApplied checks that a write tool's result is an applied outcome with
// this id, by the daemon, and returns it.
func mcpApplied(t *testing.T, res *mcp.CallToolResult, id string) queue.Outcome {
	t.Helper()
	require.False(t, res.IsError, mcpText(res))
	var o queue.Outcome
	mcpStructured(t, res, &o)
	assert.Equal(t, id, o.ID)
	assert.Equal(t, queue.StatusApplied, o.Status)
	assert.Equal(t, queue.ModeDaemon, o.Mode)
	assert.Contains(t, mcpText(res), "applied job "+id)
	return o
}

// close closes the session as a host does, by closing the server's stdin,
// and checks that the server exits 0 at once, before any signal.
func (s *mcpServer) close(t *testing.T) {
	t.Helper()
	s.closed = true
	start := time.Now()
	err := s.cs.Close()
	took := time.Since(start)
	assert.NoError(t, err, "scribe mcp exit")
	assert.Less(t, took, mcpTerminate/2, "scribe mcp did not exit when its stdin closed")
	require.NotNil(t, s.cmd.ProcessState, "the transport waited for the process")
	assert.True(t, s.cmd.ProcessState.Success(), "%v", s.cmd.ProcessState)
	assert.Contains(t, s.stderr.String(), "stdin closed, exiting")
}

// An MCP host's writes go through the store's daemon, each
// exactly once; a call repeated with its id gets the recorded outcome.
func TestMCPServerThroughDaemon(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemon(t, store)
	s := startMCP(t, store)

	tools, err := s.cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		assert.NotNil(t, tool.InputSchema, tool.Name)
	}
	slices.Sort(names)
	assert.Equal(t, []string{"append", "cancel", "delete", "exec", "job", "merge", "outcome", "put", "status"}, names)

	first := mcpApplied(t, s.call(t, "append", map[string]any{"path": "notes/log.txt", "data": "first", "newline": true, "id": "mcp-first"}), "mcp-first")
	again := mcpApplied(t, s.call(t, "append", map[string]any{"path": "notes/log.txt", "data": "first", "newline": true, "id": "mcp-first"}), "mcp-first")
	assert.Equal(t, first.Seq, again.Seq, "the recorded outcome, not a second job")
	assert.True(t, first.At.Equal(again.At), "the recorded outcome, not a second job")
	mcpApplied(t, s.call(t, "append", map[string]any{"path": "notes/log.txt", "data": "second", "newline": true, "id": "mcp-second"}), "mcp-second")
	assert.Equal(t, "first\nsecond\n", readFile(t, filepath.Join(store, "notes", "log.txt")), "each write exactly once")
	assert.Equal(t, queue.ModeDaemon, outcomeOf(t, store, "mcp-second").Mode, "the journal agrees")

	res := s.call(t, "status", map[string]any{})
	require.False(t, res.IsError, mcpText(res))
	var st struct {
		Writes string              `json:"writes"`
		Daemon *queue.StatusReport `json:"daemon"`
	}
	mcpStructured(t, res, &st)
	assert.Equal(t, "daemon", st.Writes)
	require.NotNil(t, st.Daemon)
	assert.Equal(t, d.cmd.Process.Pid, st.Daemon.PID)
	assert.GreaterOrEqual(t, st.Daemon.Applied, uint64(2))
	assert.Contains(t, mcpText(res), fmt.Sprintf("daemon pid %d", d.cmd.Process.Pid))

	// Cancelling an applied job is too late, and changes nothing.
	res = s.call(t, "cancel", map[string]any{"id": "mcp-second"})
	assert.True(t, res.IsError)
	var ans queue.CancelAnswer
	mcpStructured(t, res, &ans)
	assert.Equal(t, queue.CancelTooLate, ans.Result)
	assert.Equal(t, queue.StateApplied, ans.State)
	assert.Contains(t, mcpText(res), "too late to cancel job mcp-second")
	assert.Equal(t, "first\nsecond\n", readFile(t, filepath.Join(store, "notes", "log.txt")))

	s.close(t)
}

// When the wait runs out, the result says the outcome is unknown and
// names the job; the job is applied once the store is free, and calling
// again with its id returns that outcome instead of writing twice.
func TestMCPServerUnknownOutcome(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	release := holdWithFlock(t, queue.Layout{Root: store}.Lock()) // the daemon applies nothing meanwhile
	s := startMCP(t, store, "--wait", "1s")

	args := map[string]any{"path": "log.txt", "data": "held back\n", "id": "mcp-held"}
	res := s.call(t, "append", args)
	require.True(t, res.IsError)
	assert.Nil(t, res.StructuredContent, "no outcome yet")
	text := mcpText(res)
	assert.Contains(t, text, "outcome unknown for job mcp-held")
	assert.Contains(t, text, `outcome tool (id "mcp-held")`)
	assert.Contains(t, text, "do not redo the write another way")

	// A cancel cannot be recorded while the lock is held: busy, as the
	// daemon answers, nothing changed.
	res = s.call(t, "cancel", map[string]any{"id": "mcp-held"})
	assert.True(t, res.IsError)
	var ans queue.CancelAnswer
	mcpStructured(t, res, &ans)
	assert.Equal(t, queue.CancelBusy, ans.Result)
	assert.Contains(t, mcpText(res), "job mcp-held not cancelled")
	assert.Contains(t, mcpText(res), "nothing changed")

	var l queue.Lookup
	res = s.call(t, "outcome", map[string]any{"id": "mcp-held"})
	require.False(t, res.IsError, mcpText(res))
	mcpStructured(t, res, &l)
	assert.False(t, l.Found, "still queued behind the lock holder")
	assert.Contains(t, mcpText(res), "no outcome recorded")

	release()
	require.Eventually(t, func() bool {
		res := s.call(t, "outcome", map[string]any{"id": "mcp-held"})
		l = queue.Lookup{}
		mcpStructured(t, res, &l)
		return l.Found
	}, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, queue.StatusApplied, l.Outcome.Status)

	again := mcpApplied(t, s.call(t, "append", args), "mcp-held")
	assert.Equal(t, l.Outcome.Seq, again.Seq)
	assert.Equal(t, "held back\n", readFile(t, filepath.Join(store, "log.txt")), "applied once")
	s.close(t)
}

// With --autostart and no daemon, the first write starts one and goes
// through it, as `scribe submit --autostart` does.
func TestMCPServerAutostart(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	stopAutostarted(t, store)
	s := startMCP(t, store, "--autostart", "--exit-idle", testExitIdle)

	res := s.call(t, "status", map[string]any{})
	require.False(t, res.IsError, mcpText(res))
	var st struct {
		Writes string `json:"writes"`
	}
	mcpStructured(t, res, &st)
	assert.Equal(t, "autostart", st.Writes, "status starts no daemon")
	assert.Empty(t, serveProcs(t, store))

	mcpApplied(t, s.call(t, "put", map[string]any{"path": "state.txt", "data": "on demand", "id": "mcp-auto"}), "mcp-auto")
	assert.Equal(t, "on demand", readFile(t, filepath.Join(store, "state.txt")))
	s.close(t)
}

// A host that writes its requests and closes the server's stdin at once
// (a script piping them in) still gets every answer: the server answers
// what it has read before it exits, and the write is done.
func TestMCPAnswersWhatCameBeforeEndOfInput(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"append","arguments":{"path":"log.txt","data":"piped\n","id":"piped-1"}}}`,
	}, "\n") + "\n"
	cmd := exec.Command(scribeBin, "mcp", "--store", store)
	cmd.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_AUTOSTART=")
	cmd.Stdin = strings.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	var ids []float64
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m struct {
			ID     float64         `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		ids = append(ids, m.ID)
		if m.ID == 2 {
			assert.Contains(t, string(m.Result), "applied job piped-1")
		}
	}
	assert.Equal(t, []float64{1, 2}, ids, "an answer to each request: %s", out)
	assert.Equal(t, "piped\n", readFile(t, filepath.Join(store, "log.txt")))
}

// A host that goes away while a call waits (stdin and stdout closed) does
// not make the server die of SIGPIPE when the call's answer is written:
// it exits 0, as when stdin closes between calls.
func TestMCPHostGoneMidCall(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	startDaemon(t, store)
	holdWithFlock(t, queue.Layout{Root: store}.Lock()) // the job waits in the queue
	cmd := exec.Command(scribeBin, "mcp", "--store", store, "--route", "require", "--wait", "1s")
	cmd.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_AUTOSTART=")
	var stderr testkit.SyncBuffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	_, err = io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"gone","version":"1"}}}`+"\n")
	require.NoError(t, err)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, `"id":1`)
	_, err = io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"+
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"append","arguments":{"path":"log.txt","data":"x\n","id":"gone-1"}}}`+"\n")
	require.NoError(t, err)
	// The host goes: the call's answer will find nobody to read it.
	require.NoError(t, stdout.Close())
	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait(), "exit 0, not SIGPIPE: %s", stderr.String())
}

// SIGTERM ends a call in progress at once, even one still trying to
// reach a daemon that accepts connections and never answers (SIGSTOP):
// the server does not sit out the call's --wait.
func TestMCPStopsAtOnceMidCall(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := startDaemon(t, store)
	d.freeze(t)
	cmd := exec.Command(scribeBin, "mcp", "--store", store, "--route", "require", "--wait", "20s", "--log-level", "debug")
	cmd.Env = append(os.Environ(), "SCRIBE_ROUTE=", "SCRIBE_STORE=", "SCRIBE_AUTOSTART=")
	var stderr testkit.SyncBuffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	_, err = io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"term","version":"1"}}}`+"\n"+
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"+
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"append","arguments":{"path":"log.txt","data":"x\n"}}}`+"\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "session initialized") }, 10*time.Second, 5*time.Millisecond)
	t0 := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), stderr.String())
	assert.Less(t, time.Since(t0), 5*time.Second, "stopped at once, not after the call's 20 s: %s", stderr.String())
	_ = stdin.Close()
}
