// Package mcp is scribe's Model Context Protocol server: a store's writes
// as MCP tools (append, put, merge, delete, job, exec), with look-ups of
// outcomes (outcome) and of how writes reach the store (status), and
// cancelling a job still queued (cancel), served over stdio to an agent
// host. New builds it from a Config; Serve serves one host on a pair of
// streams. `scribe mcp` turns its flags into the
// Config (docs/mcp.md).
//
// Each tool call is a client call (package client): the route is found
// afresh for each one, as each `scribe submit` finds it, and a job whose
// outcome cannot be learnt is reported unknown with its ID, to look up or
// call again with, never redone another way.
//
// The transport reads newline-delimited JSON-RPC, as the SDK's stdio
// transport does, but answers a line that is not a valid JSON-RPC 2.0
// message itself, with an error response, instead of ending the session;
// a line is at most the largest job any daemon takes, and room for the
// call around it.
//
// # Caveats
//
// Serve never closes its streams, and a read of stdin cannot be
// interrupted: the goroutine that reads them ends with the input (or at
// its next line, once the session is over), as the SDK's own stdio
// connection does.
//
// Output schemas are inferred when a server is built (New), which takes
// about a millisecond; nothing is inferred at package initialization.
package mcp
