// Command scribe queues writes to a store through one writer.
//
//	scribe serve   --store DIR [flags]                 run the daemon for a store
//	scribe submit  --store DIR [flags] OP PATH [DATA|-] queue one op
//	scribe submit  --store DIR [flags] --job FILE       queue a multi-op job
//	scribe status  --store DIR [--json] [JOB_ID]        daemon status, or a job's outcome
//	scribe lock    --store DIR [--wait DUR] -- CMD ARGS run CMD holding the store lock
//	scribe recover --store DIR [--abandon]             finish, or give up, an interrupted batch
//	scribe stop    --store DIR [--timeout DUR]          stop the store's daemon gracefully
//	scribe demo                                         show the queue at work
//	scribe version                                      also scribe --version
//
// Each command's flags are in `scribe COMMAND -h`; routes, exit codes,
// environment variables and examples are in docs/cli.md; supervisors,
// logs and metrics in docs/running.md.
//
// In the layout (cmd → client, writer, embednats → queue) it is the top:
// it parses flags, reads the config file, sets up logging and signals,
// and maps errors to exit codes (0 done, 1 rejected or failed, 2 usage,
// 69 no daemon, 75 busy). What a command does is a library's: `scribe
// serve` turns its flags and config file into a writer/daemon Config and
// runs that daemon, `scribe lock` takes the store through writer.Take,
// the others call package client. Nothing imports it.
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
package main
