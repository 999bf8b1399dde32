// Command scribed is scribe's daemon binary: the whole table of commands
// of cmd/scribe (see its doc comment), serve, mcp, demo and bench
// included, so that scribed alone is a complete scribe. It links what a
// hook's binary must not (nats-server, prometheus, the MCP SDK); the lean
// scribe runs the light commands itself and replaces itself with scribed
// for the others, and autostart runs `scribed serve`.
//
// go install github.com/scribehq/scribe/cmd/...@latest installs both;
// -ldflags "-X main.Version=…" sets the version of both.
package main
