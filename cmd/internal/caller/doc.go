// Package caller holds the commands a store's callers run, hooks first:
// submit, status, wait, jobs, lock, stop and recover. Each is a cli.Command
// that turns its flags into calls of package client (or, for lock and
// recover, writer: a direct hold of the store) and prints what they
// return, for people or as JSON.
//
// It links neither nats-server, nor prometheus, nor the MCP SDK: a binary
// of these commands starts as fast as a hook needs, and the commands
// that need those (serve, mcp, bench, demo) live in other packages.
//
// # Caveats
//
// submit and lock parse strictly: their flags go before OP (DATA may
// start with "-") and before CMD (or --): everything after is passed on as
// it is.
//
// A bare --wait waits for submit's outcome without bound, but a direct
// write's wait for the lock only within a bound (--wait=DUR); lock refuses
// a bare --wait: waiting for the store lock is always bounded.
package caller

import "github.com/scribehq/scribe/cmd/internal/cli"

// Commands are the light commands in the order `scribe --help` lists
// them: both binaries' tables take them from here.
func Commands() []cli.Command {
	return []cli.Command{Submit(), Status(), Wait(), Cancel(), Jobs(), Lock(), Recover(), Stop()}
}
