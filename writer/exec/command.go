package exec

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/lock"
)

// Command defaults and bounds.
const (
	// DefaultGrace is a Command's Grace when it sets none.
	DefaultGrace = 5 * time.Second
	// DefaultMaxOutput is a Command's MaxOutput when it sets none.
	DefaultMaxOutput = 16 << 10
	// MaxOutputLimit bounds MaxOutput: an exec outcome carries both
	// streams and travels as one NATS message (1 MiB at most,
	// queue.MaxJobBytes), with room left for JSON escapes and the rest
	// of the outcome.
	MaxOutputLimit = 256 << 10
)

// Command is an entry of the daemon's exec allowlist: a program that exec
// jobs may run by name, in the store's turn, with the store lock held
// (docs/exec.md). Build one in Go and Check it, or read the [exec.NAME]
// tables of a config file (Decode), which checks them.
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
	// and SIGKILL after its timeout; 0 means DefaultGrace.
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
	// at before each run, without being taken (LockBusy): while another
	// process holds it, the job is deferred. It must not be the store
	// lock, nor in the store's .scribe folder (CheckLock): the command
	// would find it held by its own daemon.
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
// directory that stays inside the store, a positive timeout, bounded
// output, busy exit codes of 1 to 255, an absolute lock file, argument
// patterns that compile, environment variables that are KEY=VALUE with
// a portable name and none of scribe's own. Whether its lock file is the
// store's is CheckLock's question, once the store is known.
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
	if c.MaxOutput > MaxOutputLimit {
		return fmt.Errorf("max_output %d: want at most %d bytes (both streams of a run travel in one outcome message)", c.MaxOutput, MaxOutputLimit)
	}
	if c.LockFile != "" && !filepath.IsAbs(c.LockFile) {
		return fmt.Errorf("lock_file %q: want an absolute path", c.LockFile)
	}
	for _, code := range c.BusyExitCodes {
		if code <= 0 || code > 255 {
			return fmt.Errorf("busy_exit_codes: %d: want 1 to 255", code)
		}
	}
	for _, kv := range c.Env {
		name, value, ok := strings.Cut(kv, "=")
		if err := checkEnvName(name); err != nil || !ok {
			return fmt.Errorf("env %q: want KEY=VALUE: %v", kv, cmp.Or(err, errors.New("no =")))
		}
		if strings.IndexByte(value, 0) >= 0 {
			return fmt.Errorf("env %s: contains a NUL byte", name)
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

// envName reports whether name is a portable environment variable name
// (POSIX): a letter or _, then letters, digits and _.
func envName(name string) bool {
	for i, c := range []byte(name) {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return name != ""
}

// checkEnvName refuses a name a command's Env may not set: not a portable
// name, or one of scribe's own, which the daemon sets (SCRIBE_STORE,
// SCRIBE_JOB_ID, SCRIBE_EPOCH, the store lock's): a command must get
// those.
func checkEnvName(name string) error {
	switch {
	case !envName(name):
		return fmt.Errorf("%q is not an environment variable name: want [A-Za-z_][A-Za-z0-9_]*", name)
	case strings.HasPrefix(strings.ToUpper(name), "SCRIBE_"):
		return fmt.Errorf("%s: SCRIBE_ variables are the daemon's to set", name)
	}
	return nil
}

// Allows reports the first of args that no pattern of AllowArgs matches
// whole, if any: a job may pass only arguments the command allows. The
// command must have passed Check.
func (c *Command) Allows(args []string) (string, bool) {
	for _, a := range args {
		if !slices.ContainsFunc(c.allow, func(re *regexp.Regexp) bool { return re.MatchString(a) }) {
			return a, false
		}
	}
	return "", true
}

// Admit decides how much of the command an exec op may run: arguments
// the command allows (Allows), and a timeout no longer than its own (0:
// its own). It returns the run's timeout, or a *queue.RejectError
// (queue.ReasonNotAllowed) for an op that may not run.
func (c *Command) Admit(op queue.Op) (time.Duration, error) {
	if a, ok := c.Allows(op.Args); !ok {
		return 0, queue.Reject(queue.ReasonNotAllowed, "command %s does not allow the argument %q", c.Name, truncateArg(a))
	}
	if op.Timeout <= 0 {
		return c.Timeout, nil
	}
	if op.Timeout > c.Timeout {
		return 0, queue.Reject(queue.ReasonNotAllowed, "timeout %s is longer than command %s allows (%s)", op.Timeout, c.Name, c.Timeout)
	}
	return op.Timeout, nil
}

// grace is the command's Grace, or DefaultGrace.
func (c *Command) grace() time.Duration {
	if c.Grace > 0 {
		return c.Grace
	}
	return DefaultGrace
}

// maxOutput is the command's MaxOutput, or DefaultMaxOutput.
func (c *Command) maxOutput() int {
	if c.MaxOutput > 0 {
		return c.MaxOutput
	}
	return DefaultMaxOutput
}

// CheckLock refuses a command whose own lock file is the store lock,
// storeLock (by path, folders' symlinks resolved, and by device and
// inode when both exist), or lies in the store's .scribe folder, meta
// ("" to skip): the daemon holds those files itself, so the command would
// find them held by its own daemon and its jobs would wait for ever.
func (c *Command) CheckLock(storeLock, meta string) error {
	switch {
	case c.LockFile == "":
		return nil
	case storeLock != "" && lock.SameFile(c.LockFile, storeLock):
		same := ""
		if c.LockFile != storeLock {
			same = " " + storeLock
		}
		return fmt.Errorf("%s is the store lock file%s: the command would find it held by its own daemon; give the command's own lock file, or leave the key out", c.LockFile, same)
	case meta != "" && inside(c.LockFile, meta):
		return fmt.Errorf("%s is in the store's %s folder, whose locks the daemon holds itself; give the command's own lock file", c.LockFile, queue.MetaDir)
	}
	return nil
}

// inside reports whether path p lies in folder dir, symlinks of both
// resolved.
func inside(p, dir string) bool {
	d := dir
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		d = r
	}
	rel, err := filepath.Rel(d, lock.RealPath(p))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// Index checks an allowlist for the store whose lock file is storeLock
// and whose .scribe folder is meta (see CheckLock), and indexes it by
// name: each command passes Check and CheckLock, and no name is listed
// twice. The commands are copies: changing cmds later changes nothing.
func Index(cmds []Command, storeLock, meta string) (map[string]*Command, error) {
	byName := make(map[string]*Command, len(cmds))
	for i := range cmds {
		c := cmds[i]
		if err := c.Check(); err != nil {
			return nil, fmt.Errorf("exec command %s: %w", c.Name, err)
		}
		if byName[c.Name] != nil {
			return nil, fmt.Errorf("exec command %s is listed twice", c.Name)
		}
		if err := c.CheckLock(storeLock, meta); err != nil {
			return nil, fmt.Errorf("exec command %s: lock_file: %w", c.Name, err)
		}
		c.Args, c.AllowArgs, c.BusyExitCodes, c.Env = slices.Clone(c.Args), slices.Clone(c.AllowArgs), slices.Clone(c.BusyExitCodes), slices.Clone(c.Env)
		byName[c.Name] = &c
	}
	return byName, nil
}

// LockBusy says why the command's own lock file is busy, or "" if it is
// free (or there is none), as lock.Holders tells it, without reading or
// taking the file: it is the tool's, not scribe's. While it is busy, the
// command's jobs are deferred.
func (c *Command) LockBusy() string {
	if c.LockFile == "" {
		return ""
	}
	held, pids := lock.Holders(c.LockFile)
	switch {
	case !held:
		return ""
	case pids == nil:
		return fmt.Sprintf("its lock %s is held by another process", c.LockFile)
	}
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return fmt.Sprintf("its lock %s is held by pid %s", c.LockFile, strings.Join(s, ", "))
}
