// Command hook is a small program of the kind scribe is for: a hook that
// many processes may run at once, each appending one line to a store.
// Through the client's prefer route, the line goes through the store's
// daemon when one runs, and is written directly, under the store lock,
// when none does.
//
//	hook --store DIR [--file hooks.log] LINE
//
// It prints the job's outcome and exits 0 when the line was applied, 1
// when it was rejected, and 75 when the store was busy or the outcome is
// not known (run it again: the job ID makes a retry safe).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

func main() {
	store := flag.String("store", os.Getenv("SCRIBE_STORE"), "store `folder` (default $SCRIBE_STORE)")
	file := flag.String("file", "hooks.log", "`path` in the store to append to")
	id := flag.String("id", "", "job `ID` (default: a new one); the same ID makes a retry safe")
	flag.Parse()
	if *store == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: hook --store DIR [--file PATH] [--id ID] LINE")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// A hook must not hang on a daemon that went away.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	os.Exit(run(ctx, *store, *file, *id, flag.Arg(0)))
}

func run(ctx context.Context, store, file, id, line string) int {
	c, err := client.Open(ctx, store, client.WithRoute(client.RoutePrefer))
	if err != nil {
		fmt.Fprintln(os.Stderr, "hook:", err)
		return 75
	}
	defer c.Close()

	route := "direct"
	if d := c.Daemon(); d != nil {
		route = fmt.Sprintf("daemon pid %d", d.PID)
	}
	out, err := c.Apply(ctx, &queue.Job{ID: id, Ops: []queue.Op{
		{Kind: queue.OpAppend, Path: file, Data: []byte(line + "\n")},
	}})
	var busy *client.BusyError
	switch {
	case errors.As(err, &busy):
		who := "a process that did not say who it is"
		if h := busy.Holder; h != nil {
			who = fmt.Sprintf("pid %d (%s: %s)", h.PID, h.Mode, h.Command)
		}
		fmt.Fprintf(os.Stderr, "hook: store busy, held by %s\n", who)
		return 75
	case err != nil:
		fmt.Fprintln(os.Stderr, "hook: outcome unknown, run again with the same --id:", err)
		return 75
	case !out.Applied():
		fmt.Printf("%s %s via %s: %s: %s\n", out.ID, out.Status, route, out.Reason, out.Detail)
		return 1
	}
	fmt.Printf("%s %s via %s, epoch %d\n", out.ID, out.Status, route, out.Epoch)
	return 0
}
