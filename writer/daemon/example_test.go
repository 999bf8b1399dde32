package daemon_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/daemon"
)

// A Go program runs a daemon of two stores, as `scribe serve --store A
// --store B` does, and its callers submit to each through package client,
// which finds the daemon by the stores' discovery files. The stores'
// queues share one folder, here a temporary one.
func Example() {
	dir, err := os.MkdirTemp("", "scribe-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	notes, tasks := filepath.Join(dir, "notes"), filepath.Join(dir, "tasks")
	for _, store := range []string{notes, tasks} {
		if err := os.Mkdir(store, 0o755); err != nil {
			log.Fatal(err)
		}
	}
	ctx := context.Background()

	d, err := daemon.Start(ctx, daemon.Config{
		Stores: []daemon.Store{{Path: notes}, {Path: tasks}},
		Queue:  daemon.Queue{Dir: filepath.Join(dir, "queue")},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close() // or d.Run(ctx), which serves until ctx ends

	for _, store := range []string{notes, tasks} {
		c, err := client.Open(ctx, store, client.WithRoute(client.RouteRequire))
		if err != nil {
			log.Fatal(err)
		}
		out, err := c.Apply(ctx, &queue.Job{Ops: []queue.Op{
			{Kind: queue.OpAppend, Path: "log.txt", Data: []byte("hello\n")},
		}})
		c.Close()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(filepath.Base(store), out.Status, "by", out.Mode)
	}
	// Output:
	// notes applied by daemon
	// tasks applied by daemon
}
