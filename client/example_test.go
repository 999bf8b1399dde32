package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// The library at work: no daemon serves this store, so the direct route
// applies the job at once, under the store lock, all or nothing.
func ExampleClient_Apply() {
	ctx := context.Background()
	store, err := os.MkdirTemp("", "scribe-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(store)

	c, err := client.Open(ctx, store, client.WithRoute(client.RouteDirect))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	out, err := c.Apply(ctx, &queue.Job{Ops: []queue.Op{
		{Kind: queue.OpAppend, Path: "log.txt", Data: []byte("hello\n")},
		{Kind: queue.OpMerge, Path: "state.json", Data: []byte(`{"last": "hello"}`)},
	}})
	switch {
	case errors.Is(err, client.ErrBusy): // store lock held: err names the holder
		log.Fatal(err)
	case err != nil: // outcome unknown: Apply again with the same job ID
		log.Fatal(err)
	case !out.Applied(): // rejected: nothing changed
		fmt.Println("rejected:", out.Reason, out.Detail)
		return
	}
	fmt.Println(out.Status, "by", out.Mode)
	logTxt, _ := os.ReadFile(filepath.Join(store, "log.txt"))
	state, _ := os.ReadFile(filepath.Join(store, "state.json"))
	fmt.Printf("log.txt: %q\nstate.json: %s", logTxt, state)
	// Output:
	// applied by direct
	// log.txt: "hello\n"
	// state.json: {"last":"hello"}
}

// Open picks the route once. The default, RoutePrefer, uses the store's
// daemon if one serves it and otherwise writes directly; RouteRequire
// insists on a daemon.
func ExampleOpen() {
	ctx := context.Background()
	store, err := os.MkdirTemp("", "scribe-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(store)

	c, err := client.Open(ctx, store)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if d := c.Daemon(); d != nil {
		fmt.Println("queued through daemon pid", d.PID)
	} else {
		fmt.Println("no daemon: direct writes")
	}

	_, err = client.Open(ctx, store, client.WithRoute(client.RouteRequire))
	fmt.Println("require:", errors.Is(err, client.ErrNoDaemon))
	// Output:
	// no daemon: direct writes
	// require: true
}

// A direct write fails fast while another process holds the store lock;
// the *BusyError says who that is.
func ExampleBusyError() {
	ctx := context.Background()
	store, err := os.MkdirTemp("", "scribe-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(store)
	release, err := holdStore(store) // another process: a nightly import
	if err != nil {
		log.Fatal(err)
	}
	defer release()

	c, err := client.Open(ctx, store, client.WithRoute(client.RouteDirect))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	_, err = c.Apply(ctx, &queue.Job{Ops: []queue.Op{
		{Kind: queue.OpAppend, Path: "log.txt", Data: []byte("hello\n")},
	}})
	var busy *client.BusyError
	if errors.As(err, &busy) && busy.Holder != nil {
		fmt.Printf("busy: held by a %s writer: %s\n", busy.Holder.Mode, busy.Holder.Command)
	}
	fmt.Println("ErrBusy:", errors.Is(err, client.ErrBusy))
	// Output:
	// busy: held by a direct writer: nightly-import
	// ErrBusy: true
}
