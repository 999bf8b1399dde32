package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
)

// warnNetworkFS warns that flock cannot be trusted on a network filesystem.
func warnNetworkFS(w io.Writer, store string) {
	if fs := writer.NetworkFilesystem(store); fs != "" {
		fmt.Fprintf(w, "scribe: warning: %s is on %s, where flock(2) may not exclude other machines' writers; keep stores on a local disk\n", store, fs)
	}
}

// LockCommand runs a command holding the store lock, like flock(1): a
// direct writer for tools that change the store's files themselves.
type LockCommand struct{ *Main }

// Run takes the lock (fail-fast unless --wait), runs the command with it
// held and exits with the command's code.
func (c *LockCommand) Run(ctx context.Context, args []string) error {
	fs := c.newFlagSet("lock", "--store DIR [--wait DUR] -- CMD [ARGS...]")
	store := storeFlag(fs)
	wait := fs.Duration("wait", 0, "wait up to `DUR` for a busy store (default: fail at once, exit 75)")
	lockFile := fs.String("lock-file", "", "store lock `file` (default <store>/.scribe/lock)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := requireStore(*store); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return usageError("want a command after --")
	}
	// Take the store: the lock, then the epoch raised and any batch a
	// crashed writer left finished, with the journal closed again so that
	// CMD, or scribe commands it runs, may open it.
	hold, err := writer.Take(ctx, *store, writer.HoldOptions{LockPath: *lockFile, Command: strings.Join(argv, " "), Wait: *wait})
	if err != nil {
		return err
	}
	defer hold.Unlock()
	warnNetworkFS(c.Stderr, *store)
	realStore, err := queue.ResolveStore(*store)
	if err != nil {
		return err
	}

	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	// The hold is handed to CMD as descriptor 3, so that scribe commands it
	// runs join it instead of waiting on their parent, while it stands
	// (docs/locking.md). The epoch and token come from the hold: what its
	// identity in the lock file says. Once handed, the release waits for
	// the children that joined (a background one may outlive CMD).
	cmd.ExtraFiles = []*os.File{hold.File()}
	cmd.Env = append(os.Environ(), "SCRIBE_STORE="+realStore)
	cmd.Env = append(cmd.Env, hold.ChildEnv(3)...)
	// On SIGINT/SIGTERM, pass the signal on and give the command time to
	// finish its critical section before it is killed.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		code := ee.ExitCode()
		if code < 0 { // killed by a signal
			code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
		return &exitError{code: code}
	}
	return fmt.Errorf("run %s: %w", argv[0], err)
}
