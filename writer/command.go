package writer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/scribehq/scribe/queue"
)

// Command defaults.
const (
	DefaultCommandGrace = 5 * time.Second
	DefaultMaxOutput    = 16 << 10
)

// Command is an entry of the daemon's exec allowlist: a program that exec
// jobs may run by name, in the store's turn, with the store lock held
// (docs/exec.md).
type Command struct {
	// Name is what exec jobs call it by (queue.ValidCommandName).
	Name string
	// Program is the absolute path of the program to run.
	Program string
	// Args are passed first, before the job's own.
	Args []string
	// AllowArgs are regular expressions; each argument of a job must match
	// one of them whole. None means a job may pass no arguments.
	AllowArgs []string
	// Dir is the working directory, relative to the store ("" for its
	// root). A job may name another one inside the store.
	Dir string
	// Timeout bounds a run; it is required. A job may shorten it.
	Timeout time.Duration
	// Grace is how long the command's process group has between SIGTERM
	// and SIGKILL after its timeout; 0 means DefaultCommandGrace.
	Grace time.Duration
	// MaxOutput is how many bytes of stdout, and of stderr, the outcome
	// keeps; 0 means DefaultMaxOutput.
	MaxOutput int
	// RerunSafe says the command may run again after the writer died while
	// it ran. If false, such a job's outcome is queue.ReasonInterrupted.
	RerunSafe bool
	// BusyExitCodes are exit codes by which the command says that what it
	// needs is busy (its own lock is held): the job is deferred and run
	// again later, and the run does not count as its outcome.
	BusyExitCodes []int
	// LockFile is the lock the command takes itself, if any. It is looked
	// at before each run, without being taken (LockHolders): while another
	// process holds it, the job is deferred. It must not be the store
	// lock: the command would find it held by its own daemon.
	LockFile string
	// Env is added to the command's environment (KEY=VALUE). That is
	// otherwise only HOME, LANG, LANGUAGE, LC_*, LOGNAME, PATH, SHELL,
	// TMPDIR, TZ and USER of the daemon's own, then SCRIBE_STORE,
	// SCRIBE_JOB_ID, SCRIBE_COMMAND, SCRIBE_EPOCH and the handed-down
	// store lock's SCRIBE_LOCK_* variables; nothing else of the daemon's
	// (its credentials, its route) reaches a command.
	Env []string

	allow []*regexp.Regexp
}

// Check validates the command, as the daemon's configuration is read: a
// name, an absolute program that exists and is executable, a working
// directory that stays inside the store, a positive timeout, argument
// patterns that compile.
func (c *Command) Check() error {
	if !queue.ValidCommandName(c.Name) {
		return fmt.Errorf("command name %q: want 1-64 characters of [A-Za-z0-9_.-], starting with a letter or digit", c.Name)
	}
	if !filepath.IsAbs(c.Program) {
		return fmt.Errorf("program %q: want an absolute path", c.Program)
	}
	fi, err := os.Stat(c.Program)
	switch {
	case err != nil:
		return fmt.Errorf("program %s: %w", c.Program, err)
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("program %s: not an executable file", c.Program)
	}
	if c.Dir != "" {
		if err := queue.CheckPath(c.Dir); err != nil {
			return fmt.Errorf("dir %q: %w", c.Dir, err)
		}
	}
	if c.Timeout <= 0 {
		return errors.New("timeout: want a positive duration")
	}
	if c.Grace < 0 || c.MaxOutput < 0 {
		return errors.New("grace and max_output may not be negative")
	}
	if c.LockFile != "" && !filepath.IsAbs(c.LockFile) {
		return fmt.Errorf("lock_file %q: want an absolute path", c.LockFile)
	}
	for _, code := range c.BusyExitCodes {
		if code <= 0 || code > 255 {
			return fmt.Errorf("busy_exit_codes: %d: want 1 to 255", code)
		}
	}
	c.allow = c.allow[:0]
	for _, p := range c.AllowArgs {
		re, err := regexp.Compile(`^(?:` + p + `)$`)
		if err != nil {
			return fmt.Errorf("allow_args %q: %w", p, err)
		}
		c.allow = append(c.allow, re)
	}
	return nil
}

// allowed reports the first argument no pattern allows, if any.
func (c *Command) allowed(args []string) (string, bool) {
	for _, a := range args {
		if !slices.ContainsFunc(c.allow, func(re *regexp.Regexp) bool { return re.MatchString(a) }) {
			return a, false
		}
	}
	return "", true
}
