// Command scribe queues writes to a store through one writer.
//
//	scribe serve      --store DIR [flags]                    run the daemon for a store
//	scribe serve      --store DIR --nats-url URL [flags]     … its queue on a NATS cluster
//	scribe serve      --nats-config FILE [--store DIR]       run a NATS cluster node (serving DIR through it)
//	scribe submit     --store DIR [flags] OP PATH [DATA|-]   queue one op (DATA -: from stdin)
//	scribe submit     --store DIR [flags] --job FILE         queue a multi-op job (FILE may be -)
//	scribe submit     --store DIR [flags] exec NAME [ARGS]   run an allowlisted command in the daemon
//	scribe status     --store DIR [--json] [JOB_ID]          daemon status, or a job's outcome
//	scribe status     --store DIR --dead [--json]            the daemon's dead letters
//	scribe status     --nats-url URL --store-id ID [JOB_ID]  … of a store whose queue is remote
//	scribe wait       --store DIR [--timeout DUR] JOB_ID     wait for a job's outcome
//	scribe cancel     --store DIR [--timeout DUR] JOB_ID     cancel a job still queued
//	scribe jobs       --store DIR [--state S] [--since DUR]  recent outcomes, queued jobs
//	scribe lock       --store DIR [--wait DUR] -- CMD ARGS   run CMD holding the store lock
//	scribe recover    --store DIR [--abandon] [--json]       finish, or give up, an interrupted batch
//	scribe stop       --store DIR [--timeout DUR]            stop the store's daemon gracefully
//	scribe mcp        --store DIR [flags]                    serve the store's writes as MCP tools
//	scribe demo       [--workers N] [--jobs N] [--keep]      show the queue at work
//	scribe bench      [--producers 1,8,32] [--svg FILE]      measure scribe against flock, side by side
//	scribe completion bash|zsh|fish                          print the shell completion script
//	scribe help       [COMMAND]                              the commands, or a command's help
//	scribe version                                           the version (also --version)
//
// Each command's flags are in `scribe COMMAND --help`; routes, exit codes,
// environment variables and examples are in docs/cli.md; supervisors,
// logs and metrics in docs/running.md.
//
// It is the top of the layout (cmd → client, writer, embednats → queue):
// main sets up signals and the table of commands above, which the
// packages under cmd/internal implement: cli, the framework (flags, help,
// completion, exit codes: 0 done, 1 rejected or failed, 2 usage, 69 no
// daemon, 75 busy), caller, the commands a hook runs, config, the config
// file's decoding, and server, those that run a server. What a command
// does is a library's: `scribe serve` turns its flags and config file
// into a writer/daemon Config and runs that daemon, `scribe lock` takes
// the store through writer.Take, `scribe mcp` and `scribe bench` run
// client/mcp and client/bench, the others call package client. Nothing
// imports it.
//
// # Two binaries
//
// This binary is the lean one hooks run: it links the light commands only
// (no nats-server, prometheus or MCP SDK), and for serve, mcp, demo, bench
// and completion it replaces itself (same PID, arguments, environment)
// with scribed, the daemon's binary, which links the whole table
// (cmd/scribed); autostart starts `scribed serve`. It finds scribed beside
// itself (symlinks resolved), else on $PATH; go install
// github.com/scribehq/scribe/cmd/...@latest installs both. Built from
// source with none at hand (go run ./cmd/scribe demo), it builds scribed
// from the same source into the user's cache dir, saying so on stderr the
// first time, and go build relinks it when the source changes. Without
// scribed those commands and autostart exit 69, naming the fix.
//
// # Caveats
//
// Keep stores on a local disk: `scribe serve` and `scribe lock` warn about
// network filesystems, where flock(2) does not reliably exclude writers;
// direct submits do not check.
//
// `scribe lock` hands its hold to CMD; scribe commands run inside CMD join
// it only while it stands, and `scribe lock` waits for them before it lets
// go. `scribe serve` never joins an inherited hold.
//
// The fault-injection variables (SCRIBE_CRASH_AT, SCRIBE_PANIC_ON,
// SCRIBE_CRASH_ON, SCRIBE_PAUSE_AT) take effect only in a binary built with
// -tags scribefault, as the crash tests build it.
//
// serve still parses its flags with the standard flag package
// (cmd/internal/server/serveflags.go): GNU spellings and completion of
// its flags come when it moves onto cli.
package main
