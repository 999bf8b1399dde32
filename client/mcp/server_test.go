package mcp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// mcpSession serves cfg's store with New over the SDK's
// in-memory transport and returns a client session to it.
func mcpSession(t *testing.T, cfg Config) *sdk.ClientSession {
	t.Helper()
	srv, err := New(cfg)
	require.NoError(t, err)
	st, ct := sdk.NewInMemoryTransports()
	ss, err := srv.sdk.Connect(t.Context(), st, nil)
	require.NoError(t, err)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "scribe-test", Version: "v0"}, nil).Connect(t.Context(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, cs.Close())
		_ = ss.Wait()
	})
	return cs
}

// callTool calls a tool; args is anything that marshals to a JSON object.
func callTool(t *testing.T, cs *sdk.ClientSession, name string, args any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, "a tool's failure is a result, not a protocol error")
	return res
}

// resultText is a result's text content, its parts joined by newlines.
func resultText(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// structured decodes a result's structured content into v.
func structured(t *testing.T, res *sdk.CallToolResult, v any) {
	t.Helper()
	require.NotNil(t, res.StructuredContent, "no structured content: %s", resultText(res))
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, v), "%s", b)
}

// resultOutcome is a write tool's structured outcome.
func resultOutcome(t *testing.T, res *sdk.CallToolResult) *queue.Outcome {
	t.Helper()
	var o queue.Outcome
	structured(t, res, &o)
	return &o
}

func TestMCPListTools(t *testing.T) {
	cs := mcpSession(t, Config{Store: t.TempDir()})
	res, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	required := map[string][]string{
		"append":  {"path", "data"},
		"put":     {"path", "data"},
		"merge":   {"path", "patch"},
		"delete":  {"path"},
		"job":     {"ops"},
		"exec":    {"name"},
		"outcome": {"id"},
		"status":  nil,
		"cancel":  {"id"},
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		assert.NotEmpty(t, tool.Description, tool.Name)
		schema, ok := tool.InputSchema.(map[string]any)
		require.True(t, ok, "%s: input schema %T", tool.Name, tool.InputSchema)
		assert.Equal(t, "object", schema["type"], tool.Name)
		assert.Equal(t, false, schema["additionalProperties"], "%s refuses unknown arguments", tool.Name)
		var req []string
		if r, ok := schema["required"].([]any); ok {
			for _, s := range r {
				req = append(req, s.(string))
			}
		}
		assert.ElementsMatch(t, required[tool.Name], req, "%s: required arguments", tool.Name)
		props, _ := schema["properties"].(map[string]any)
		for name, p := range props {
			assert.NotEmpty(t, p.(map[string]any)["description"], "%s.%s has no description", tool.Name, name)
		}
		assert.NotNil(t, tool.OutputSchema, "%s: output schema", tool.Name)
	}
	slices.Sort(names)
	assert.Equal(t, []string{"append", "cancel", "delete", "exec", "job", "merge", "outcome", "put", "status"}, names)
}

// cancel changes the queue (it discards a pending write) but gives the
// same answer when repeated; without a daemon it cancels nothing.
func TestMCPCancel(t *testing.T) {
	store := t.TempDir()
	cs := mcpSession(t, Config{Store: store, Route: client.RoutePrefer, Wait: 10 * time.Second})
	res, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	i := slices.IndexFunc(res.Tools, func(tool *sdk.Tool) bool { return tool.Name == "cancel" })
	require.GreaterOrEqual(t, i, 0)
	a := res.Tools[i].Annotations
	require.NotNil(t, a)
	assert.False(t, a.ReadOnlyHint)
	assert.True(t, a.IdempotentHint)
	require.NotNil(t, a.DestructiveHint)
	assert.True(t, *a.DestructiveHint)

	r := callTool(t, cs, "cancel", map[string]any{"id": "job-1"})
	assert.True(t, r.IsError)
	assert.Contains(t, resultText(r), "no daemon serves this store")

	// A priority other than high or normal, and an empty coalescing key,
	// are refused before anything is sent: "" would pass as none.
	for _, bad := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"append", map[string]any{"path": "log.txt", "data": "x", "priority": "urgent"}, "/properties/priority"},
		{"append", map[string]any{"path": "log.txt", "data": "x", "priority": ""}, "/properties/priority"},
		{"exec", map[string]any{"name": "mine", "coalesce": ""}, "/properties/coalesce"},
	} {
		r = callTool(t, cs, bad.tool, bad.args)
		assert.True(t, r.IsError)
		assert.Contains(t, resultText(r), bad.want, bad.args)
	}
	assert.NoFileExists(t, filepath.Join(store, "log.txt"))
	// high is taken (a direct write applies it at once).
	r = callTool(t, cs, "append", map[string]any{"path": "log.txt", "data": "x", "priority": "high"})
	require.False(t, r.IsError, resultText(r))
	assert.FileExists(t, filepath.Join(store, "log.txt"))
}

// Without a daemon, the prefer route writes directly: the tool's result
// is the outcome, and a call repeated with its id changes nothing more.
func TestMCPAppendDirect(t *testing.T) {
	store := t.TempDir()
	cs := mcpSession(t, Config{Store: store, Route: client.RoutePrefer, Wait: 10 * time.Second})

	for _, tc := range []struct {
		name string
		args map[string]any
		want string // log.txt after the call
	}{
		{"newline added", map[string]any{"path": "log.txt", "data": "one", "newline": true, "id": "mcp-1"}, "one\n"},
		{"same id again: applied once", map[string]any{"path": "log.txt", "data": "one", "newline": true, "id": "mcp-1"}, "one\n"},
		{"newline not doubled", map[string]any{"path": "log.txt", "data": "two\n", "newline": true, "id": "mcp-2"}, "one\ntwo\n"},
		{"verbatim without newline", map[string]any{"path": "log.txt", "data": "three", "id": "mcp-3"}, "one\ntwo\nthree"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := callTool(t, cs, "append", tc.args)
			require.False(t, res.IsError, resultText(res))
			o := resultOutcome(t, res)
			assert.Equal(t, tc.args["id"], o.ID)
			assert.Equal(t, queue.StatusApplied, o.Status)
			assert.Equal(t, queue.ModeDirect, o.Mode)
			assert.Contains(t, resultText(res), "applied job "+o.ID)
			b, err := os.ReadFile(filepath.Join(store, "log.txt"))
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(b))
		})
	}

	t.Run("a fresh id for each call without one", func(t *testing.T) {
		a := resultOutcome(t, callTool(t, cs, "append", map[string]any{"path": "fresh.txt", "data": "x"}))
		b := resultOutcome(t, callTool(t, cs, "append", map[string]any{"path": "fresh.txt", "data": "x"}))
		assert.NotEqual(t, a.ID, b.ID)
		assert.True(t, queue.ValidID(a.ID), a.ID)
		got, err := os.ReadFile(filepath.Join(store, "fresh.txt"))
		require.NoError(t, err)
		assert.Equal(t, "xx", string(got))
	})
}

// A rejected job is a tool error carrying the reason; it changes nothing.
func TestMCPRejected(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	require.NoError(t, os.Mkdir(store, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(store, "owner.txt"), []byte("alice"), 0o644))
	cs := mcpSession(t, Config{Store: store})

	t.Run("path escapes: refused before it reaches the store", func(t *testing.T) {
		res := callTool(t, cs, "append", map[string]any{"path": "../x", "data": "evil", "id": "esc-1"})
		require.True(t, res.IsError)
		o := resultOutcome(t, res)
		assert.Equal(t, "esc-1", o.ID)
		assert.Equal(t, queue.StatusRejected, o.Status)
		assert.Equal(t, queue.ReasonPathEscapes, o.Reason)
		assert.Contains(t, resultText(res), "rejected (path_escapes)")
		assert.NoFileExists(t, filepath.Join(filepath.Dir(store), "x"))

		// Nothing was recorded either: the look-up finds no outcome.
		res = callTool(t, cs, "outcome", map[string]any{"id": "esc-1"})
		require.False(t, res.IsError, resultText(res))
		var l queue.Lookup
		structured(t, res, &l)
		assert.False(t, l.Found)
		assert.Contains(t, resultText(res), "job esc-1: no outcome recorded")
	})

	t.Run("precondition failed: recorded, and found by the look-up", func(t *testing.T) {
		res := callTool(t, cs, "put", map[string]any{"path": "owner.txt", "data": "mallory", "if_match": "absent", "id": "own-1"})
		require.True(t, res.IsError)
		o := resultOutcome(t, res)
		assert.Equal(t, queue.ReasonPreconditionFailed, o.Reason)
		assert.Equal(t, queue.ModeDirect, o.Mode)
		b, err := os.ReadFile(filepath.Join(store, "owner.txt"))
		require.NoError(t, err)
		assert.Equal(t, "alice", string(b))

		res = callTool(t, cs, "outcome", map[string]any{"id": "own-1"})
		require.False(t, res.IsError, "the look-up worked: %s", resultText(res))
		var l queue.Lookup
		structured(t, res, &l)
		require.True(t, l.Found)
		assert.Equal(t, queue.ReasonPreconditionFailed, l.Outcome.Reason)
		assert.Contains(t, resultText(res), "job own-1: rejected (precondition_failed)")
	})

	t.Run("a refusal names the job, with an ID made for it", func(t *testing.T) {
		res := callTool(t, cs, "job", map[string]any{"ops": []any{map[string]any{"op": "put", "path": "owner.txt", "data": "x", "data_b64": "eA=="}}})
		require.True(t, res.IsError)
		o := resultOutcome(t, res)
		assert.True(t, queue.ValidID(o.ID), "id %q", o.ID)
		assert.Contains(t, resultText(res), "job "+o.ID+" rejected (bad_input)")
	})

	for _, tc := range []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"unknown argument", "put", map[string]any{"path": "owner.txt", "data": "x", "if_mach": "absent"}, `unexpected additional properties ["if_mach"]`},
		{"missing argument", "append", map[string]any{"data": "x"}, `missing properties: ["path"]`},
		{"patch not an object", "merge", map[string]any{"path": "s.json", "patch": "[1]"}, `/properties/patch: type: [1] has type "string", want "object"`},
		{"empty if_match", "put", map[string]any{"path": "owner.txt", "data": "x", "if_match": ""}, `/properties/if_match: pattern: "" does not match`},
		{"empty if_match in a job", "job", map[string]any{"ops": []any{map[string]any{"op": "put", "path": "owner.txt", "data": "x", "if_match": ""}}}, `pattern: "" does not match`},
		{"bad id", "delete", map[string]any{"path": "owner.txt", "id": "no spaces"}, `/properties/id: pattern: "no spaces" does not match`},
		{"no ops", "job", map[string]any{"ops": []any{}}, "minItems: array length 0 is less than 1"},
		{"unknown op", "job", map[string]any{"ops": []any{map[string]any{"op": "chmod", "path": "owner.txt"}}}, "enum: chmod does not equal any of"},
		{"both data and data_b64", "job", map[string]any{"ops": []any{map[string]any{"op": "put", "path": "owner.txt", "data": "x", "data_b64": "eA=="}}}, "both data and data_b64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := callTool(t, cs, tc.tool, tc.args)
			assert.True(t, res.IsError)
			assert.Contains(t, resultText(res), tc.want)
			b, err := os.ReadFile(filepath.Join(store, "owner.txt"))
			require.NoError(t, err)
			assert.Equal(t, "alice", string(b), "nothing changed")
		})
	}
}

// The merge patch reaches the file as the host wrote it: its key order
// and its numbers, which a decode into Go maps would lose.
func TestMCPMergeKeepsPatchAsSent(t *testing.T) {
	store := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(store, "s.json"), []byte(`{"m":0,"b":1}`), 0o644))
	cs := mcpSession(t, Config{Store: store})
	res := callTool(t, cs, "merge", json.RawMessage(`{"path":"s.json","patch":{"z":1,"b":null,"a":12345678901234567890123,"f":0.10}}`))
	require.False(t, res.IsError, resultText(res))
	b, err := os.ReadFile(filepath.Join(store, "s.json"))
	require.NoError(t, err)
	assert.Equal(t, `{"m":0,"z":1,"a":12345678901234567890123,"f":0.10}`+"\n", string(b))
}

// A merge repeated with the same patch spaced another way is the same
// call: the repeat gets the recorded outcome, not id_conflict. (Sent as
// raw lines: the SDK's client would compact the patch itself.)
func TestMCPMergeRepeatSpacedAnotherWay(t *testing.T) {
	s := startRawMCP(t, 0)
	call := func(id, patch string) json.RawMessage {
		s.send(t, `{"jsonrpc":"2.0","id":"`+id+`","method":"tools/call","params":{"name":"merge","arguments":{"path":"s.json","id":"m-1","patch":`+patch+`}}}`)
		answer, _ := s.answer(t, `"`+id+`"`)
		var res struct {
			IsError           bool            `json:"isError"`
			StructuredContent json.RawMessage `json:"structuredContent"`
		}
		require.NoError(t, json.Unmarshal(answer["result"], &res), "%s", answer)
		require.False(t, res.IsError, "%s", answer["result"])
		return res.StructuredContent
	}
	first := call("a", `{"theme":"dark"}`)
	assert.JSONEq(t, string(first), string(call("b", `{ "theme" : "dark" }`)))
	assert.JSONEq(t, string(first), string(call("c", "{\t\"theme\":\t\"dark\"\r}")))
}

// A multi-op job is all or nothing, in order; data_b64 carries bytes.
func TestMCPJob(t *testing.T) {
	store := t.TempDir()
	cs := mcpSession(t, Config{Store: store})
	for _, tc := range []struct {
		name    string
		ops     []any
		applied bool
		files   map[string]string // expected content; "" for absent
	}{
		{
			name: "applied",
			ops: []any{
				map[string]any{"op": "put", "path": "cfg/app.json", "data": `{"theme":"dark"}`, "if_match": "absent"},
				map[string]any{"op": "merge", "path": "cfg/app.json", "data": `{"lang":"en"}`},
				map[string]any{"op": "append", "path": "bin.dat", "data_b64": "/wA="},
			},
			applied: true,
			files:   map[string]string{"cfg/app.json": `{"theme":"dark","lang":"en"}` + "\n", "bin.dat": "\xff\x00"},
		},
		{
			name: "one op rejected: none applied",
			ops: []any{
				map[string]any{"op": "append", "path": "other.txt", "data": "x"},
				map[string]any{"op": "put", "path": "cfg/app.json", "data": "{}", "if_match": "absent"},
			},
			files: map[string]string{"other.txt": "", "cfg/app.json": `{"theme":"dark","lang":"en"}` + "\n"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := callTool(t, cs, "job", map[string]any{"ops": tc.ops})
			o := resultOutcome(t, res)
			assert.Equal(t, !tc.applied, res.IsError, resultText(res))
			assert.Equal(t, tc.applied, o.Applied())
			for name, want := range tc.files {
				b, err := os.ReadFile(filepath.Join(store, name))
				if want == "" {
					assert.ErrorIs(t, err, os.ErrNotExist, name)
					continue
				}
				require.NoError(t, err)
				assert.Equal(t, want, string(b), name)
			}
		})
	}
}

// What cannot be written says so, and writes nothing.
func TestMCPNotWritten(t *testing.T) {
	for _, tc := range []struct {
		name  string
		route client.Route
		held  bool // another process holds the store lock
		tool  string
		args  map[string]any
		want  []string
	}{
		{"exec without a daemon", client.RoutePrefer, false, "exec", map[string]any{"name": "mine"}, []string{"not written", "exec jobs run in the daemon", "--autostart"}},
		{"exec on the direct route", client.RouteDirect, false, "exec", map[string]any{"name": "mine"}, []string{"not written", "--route direct never uses it"}},
		{"require without a daemon", client.RouteRequire, false, "append", map[string]any{"path": "f", "data": "x"}, []string{"not written", "no daemon serves this store", "scribe serve --store"}},
		{"busy store", client.RoutePrefer, true, "append", map[string]any{"path": "f", "data": "x"}, []string{"not written: job", "store is busy", "call again later"}},
		// An earlier call with the host's id may have queued the job, which
		// may still be applied: never "certainly not applied" then.
		{"busy store, the host's id", client.RoutePrefer, true, "append", map[string]any{"path": "f", "data": "x", "id": "retry-1"},
			[]string{"not written by this call: job retry-1 was not handed over", "store is busy", `An earlier call with id "retry-1" may still be applied`,
				`call append again with the same arguments and id "retry-1"`, "do not redo the write another way"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := t.TempDir()
			if tc.held {
				holdLock(t, queue.Layout{Root: store}.Lock())
			}
			cs := mcpSession(t, Config{Store: store, Route: tc.route, Wait: 200 * time.Millisecond})
			res := callTool(t, cs, tc.tool, tc.args)
			require.True(t, res.IsError)
			assert.Nil(t, res.StructuredContent, "no outcome")
			for _, w := range tc.want {
				assert.Contains(t, resultText(res), w)
			}
			assert.NoFileExists(t, filepath.Join(store, "f"))
			assert.NoFileExists(t, queue.Layout{Root: store}.Journal(), "nothing was done")
		})
	}
}

// holdLock takes an flock on path, as another process would (flock
// locks belong to open files, not processes), until the test ends.
func holdLock(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	l := flock.New(path)
	ok, err := l.TryLock()
	require.NoError(t, err)
	require.True(t, ok)
	t.Cleanup(func() { _ = l.Unlock() })
}

func TestMCPStatusWithoutDaemon(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       Config
		writes    string
		autostart bool
	}{
		{"prefer", Config{}, "direct", false},
		{"require", Config{Route: client.RouteRequire}, "refused", false},
		{"autostart", Config{Autostart: &client.Autostart{Command: []string{"/nonexistent/scribe", "serve"}}}, "autostart", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Store = t.TempDir()
			cs := mcpSession(t, tc.cfg)
			res := callTool(t, cs, "status", map[string]any{})
			require.False(t, res.IsError, resultText(res))
			var st statusResult
			structured(t, res, &st)
			real, err := queue.ResolveStore(tc.cfg.Store)
			require.NoError(t, err)
			assert.Equal(t, real, st.Store)
			assert.Equal(t, queue.StoreID(real), st.StoreID)
			assert.Nil(t, st.Daemon)
			assert.Equal(t, tc.writes, st.Writes)
			assert.Equal(t, tc.autostart, st.Autostart)
			assert.Contains(t, resultText(res), "no daemon serves the store")
		})
	}
}

// docs/mcp.md shows each tool's input schema as the server lists it.
func TestMCPDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/mcp.md")
	require.NoError(t, err)
	cs := mcpSession(t, Config{Store: t.TempDir()})
	res, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	for _, tool := range res.Tools {
		m := regexp.MustCompile("(?s)\n### `" + tool.Name + "`\n.*?```json\n(.*?)```").FindSubmatch(doc)
		require.NotNil(t, m, "docs/mcp.md has no ### `%s` section with a ```json block", tool.Name)
		var documented any
		require.NoError(t, json.Unmarshal(m[1], &documented), "%s's schema in docs/mcp.md", tool.Name)
		assert.Equal(t, tool.InputSchema, documented, "docs/mcp.md's schema of %s is not the server's", tool.Name)
	}

}
