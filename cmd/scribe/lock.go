package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

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

// LockCommand runs a command holding the store lock, like flock(1): a
// direct writer for tools that change the store's files themselves.
type LockCommand struct{ *Main }

// Run takes the lock (fail-fast unless --wait), runs the command with it
// held and exits with the command's code.
func (c *LockCommand) Run(ctx context.Context, args []string) error {
	fs := c.newFlagSet("lock", "--store DIR [--wait=DUR] [--lock-file FILE] -- CMD [ARGS...]\n\n"+
		"Takes the store lock, runs CMD with it held and exits with CMD's code (75 if the lock was\n"+
		"busy). Fail-fast unless --wait. A duration right after a bare --wait is its bound:\n"+
		"--wait 10s is --wait=10s. Flags go before CMD; everything after -- is CMD, as given.\n"+
		"While a daemon serves the store, the lock is the one it takes (its --lock-file)")
	store := storeFlag(fs)
	var wait waitFlag
	fs.Var(&wait, "wait", "wait up to DUR for a busy store: --wait=DUR or --wait DUR (default: fail at once, exit 75)"+waitUsage)
	lockFile := fs.String("lock-file", "", "store lock `file` (default: the one a running daemon takes, else <store>/.scribe/lock)")
	if err := parseWait(fs, args, &wait); err != nil {
		return err
	}
	if wait.on && wait.d == 0 {
		return usageError("--wait needs a bound for the lock: --wait=DUR or --wait DUR (waiting is bounded; without --wait, lock fails at once)")
	}
	if err := requireStore(*store); err != nil {
		return err
	}
	if err := checkLockFileFolder(*lockFile); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return usageError("want a command after --")
	}
	realStore, err := queue.ResolveStore(*store)
	if err != nil {
		return err
	}
	// The lock the store's daemon takes, or the two would not exclude
	// each other (discovery.LockFile).
	lockPath, err := discovery.LockFile(realStore, *lockFile)
	if err != nil {
		return withHint(err, lockFileHint(err))
	}
	bound := wait.d
	// Take the store: the lock, then the epoch raised and any batch a
	// crashed writer left finished, with the journal closed again so that
	// CMD, or scribe commands it runs, may open it.
	hold, err := writer.Take(ctx, *store, writer.Options{LockPath: lockPath, Command: strings.Join(argv, " "), Wait: bound})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, lock.ErrLocked) {
			return &exitError{code: exitInterrupted, err: fmt.Errorf("interrupted while waiting for the store lock: %s did not run", argv[0])}
		}
		return withHint(err, busyHint(*store, err, false))
	}
	defer hold.Unlock()
	warnNetworkFS(c.Stderr, *store)

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

// lockFileHint says how to give the lock file the store's daemon takes.
func lockFileHint(err error) string {
	var ol *discovery.OtherLockFileError
	if !errors.As(err, &ol) {
		return ""
	}
	return "give --lock-file " + shellQuote(ol.Daemon) + ", or none"
}

// checkLockFileFolder refuses a --lock-file whose folder does not exist
// (a usage error naming it): no lock can be taken there, and a daemon
// would wait for it for ever.
func checkLockFileFolder(lockFile string) error {
	if lockFile == "" {
		return nil
	}
	abs, err := filepath.Abs(lockFile)
	if err != nil {
		return usageError("--lock-file %s: %v", lockFile, err)
	}
	dir := filepath.Dir(abs)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usageError("--lock-file %s: its folder %s does not exist", lockFile, dir)
	case err != nil:
		return usageError("--lock-file %s: %v", lockFile, err)
	case !fi.IsDir():
		return usageError("--lock-file %s: %s is not a folder", lockFile, dir)
	}
	return nil
}
