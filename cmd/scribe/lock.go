package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"scribe/writer"
)

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
	s, err := writer.OpenSessionWait(ctx, *store, *wait, writer.SessionOptions{
		LockPath: *lockFile, Mode: writer.ModeDirect, Command: strings.Join(argv, " "),
	})
	if err != nil {
		return err
	}
	defer s.Close()

	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	cmd.Env = append(os.Environ(),
		"SCRIBE_STORE="+s.Store(),
		"SCRIBE_EPOCH="+strconv.FormatUint(s.Epoch(), 10),
	)
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
