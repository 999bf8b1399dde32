// Package server holds the commands that run a server or a daemon, and so
// link what a hook's binary must not (nats-server, prometheus, the MCP
// SDK): mcp (client/mcp), demo (a daemon in this process), bench
// (client/bench, against `scribe serve` processes), and serve itself
// (writer/daemon, from its flags and config file). Each turns its flags
// into its library's config; the light commands are in
// cmd/internal/caller.
//
// # Caveats
//
// Every command here is cli.Command.Heavy: the tables say so; cmd/scribed
// links this package, and cmd/scribe, the binary meant to start fast (a
// hook's), leaves it out and forwards these commands to scribed.
package server
