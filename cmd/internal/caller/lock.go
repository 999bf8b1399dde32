package caller

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

	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/lock"
)

// warnNetworkFS warns that flock cannot be trusted on a network filesystem.
func warnNetworkFS(w io.Writer, store string) {
	if fs := lock.NetworkFilesystem(store); fs != "" {
		fmt.Fprintf(w, "scribe: warning: %s is on %s, where flock(2) may not exclude other machines' writers; keep stores on a local disk\n", store, fs)
	}
}

// lockCommand is `scribe lock`, on the command line's streams.
type lockCommand struct{ *cli.Main }

// Lock is `scribe lock`: CMD run holding the store lock, like flock(1): a
// direct writer for tools that change the store's files themselves.
func Lock() cli.Command {
	return cli.Command{
		Name:  "lock",
		Forms: []cli.Form{{Args: "--store DIR [--wait DUR] -- CMD ARGS", Summary: "run CMD holding the store lock"}},
		Help: "Takes the store lock, runs CMD with it held and exits with CMD's code (75 if the lock was\n" +
			"busy). Fail-fast unless --wait DUR: it waits at most DUR (--wait 10s is --wait=10s), since\n" +
			"waiting for the store lock is always bounded. Flags go before CMD;\n" +
			"everything after -- is CMD, as given. While a daemon serves the store, the lock is the one\n" +
			"it takes (its --lock-file).",
		Setup: func(m *cli.Main, fs *cli.FlagSet) func(context.Context, []string) error {
			fs.Strict()
			store := fs.Store()
			var wait cli.Wait
			fs.BoundVar(&wait, "wait", "wait for a busy store at most `DUR` (--wait=DUR or --wait DUR; default: fail at once, exit 75)")
			lockFile := fs.LockFile()
			c := &lockCommand{m}
			return func(ctx context.Context, args []string) error {
				if wait.On && wait.Bound == 0 {
					return cli.Usagef("--wait needs a bound: waiting for the store lock is always bounded; give --wait=DUR (such as --wait=10s)")
				}
				return c.run(ctx, *store, lockFile, wait.Bound, args)
			}
		},
	}
}

// run takes the lock (fail-fast unless bound), runs the command with it
// held and exits with the command's code.
func (c *lockCommand) run(ctx context.Context, store string, lockFile *cli.LockFile, bound time.Duration, argv []string) error {
	if err := cli.RequireStore(store); err != nil {
		return err
	}
	given, configured, err := lockFile.Settle(c.Main, store)
	if err != nil {
		return err
	}
	if len(argv) == 0 {
		return cli.Usagef("want a command after --")
	}
	realStore, err := queue.ResolveStore(store)
	if err != nil {
		return err
	}
	// The lock the store's daemon takes, or the two would not exclude
	// each other (discovery.LockFile).
	lockPath, err := discovery.LockFile(realStore, given, configured)
	if err != nil {
		return cli.WithHint(err, lockFileHint(err))
	}
	// Take the store: the lock, then the epoch raised and any batch a
	// crashed writer left finished, with the journal closed again so that
	// CMD, or scribe commands it runs, may open it.
	hold, err := writer.Take(ctx, store, writer.Options{LockPath: lockPath, Command: strings.Join(argv, " "), Wait: bound})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, lock.ErrLocked) {
			return cli.Exit(cli.ExitInterrupted, fmt.Errorf("interrupted while waiting for the store lock: %s did not run", argv[0]))
		}
		return cli.WithHint(err, busyHint(store, err, false))
	}
	defer hold.Unlock()
	warnNetworkFS(c.Stderr, store)

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
		return cli.Exit(code, nil)
	}
	return fmt.Errorf("run %s: %w", argv[0], err)
}

// lockFileHint says how to give the lock file the store's daemon takes.
func lockFileHint(err error) string {
	var ol *discovery.OtherLockFileError
	if !errors.As(err, &ol) {
		return ""
	}
	return "give --lock-file " + cli.ShellQuote(ol.Daemon) + ", or none"
}
