package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
	"github.com/scribehq/scribe/writer/lock"
)

// The flags the client commands share, each defined here once.

// Store adds --store, defaulting to $SCRIBE_STORE.
func (fs *FlagSet) Store() *string {
	p := fs.String("store", os.Getenv("SCRIBE_STORE"), "store folder `DIR` (default $SCRIBE_STORE)")
	fs.complete("store", completeDir)
	return p
}

// LockFile is --lock-file: the store lock a command takes or probes.
type LockFile struct{ given *string }

// LockFile adds --lock-file.
func (fs *FlagSet) LockFile() *LockFile {
	p := fs.String("lock-file", "", "the store lock `FILE` (default: the one the store's daemon takes, else the store's config file's lock_file, else <store>/.scribe/lock)")
	fs.complete("lock-file", completeFile)
	return &LockFile{p}
}

// Settle checks --lock-file and reads the lock file the store's config
// file sets (lock_file, "" for none), which the command takes when no
// --lock-file is given and no live daemon names its own
// (discovery.LockFile): a direct writer then excludes a daemon started
// later, which takes it too, and the tool that shares it. given is
// --lock-file, "" for none.
func (l *LockFile) Settle(m *Main, store string) (given, configured string, err error) {
	if err := CheckLockFileFolder(*l.given); err != nil {
		return "", "", err
	}
	if *l.given != "" {
		return *l.given, "", nil
	}
	cfg, err := m.callerConfig(store, "lock_file")
	if err != nil || cfg == nil || cfg.LockFile == nil {
		return "", "", err
	}
	return "", *cfg.LockFile, nil
}

// Options are Settle's as client options.
func (l *LockFile) Options(m *Main, store string) ([]client.Option, error) {
	given, configured, err := l.Settle(m, store)
	if err != nil {
		return nil, err
	}
	return []client.Option{client.WithLockFile(given), client.WithConfigLockFile(configured)}, nil
}

// Route adds --route, defaulting to $SCRIBE_ROUTE; client.ParseRoute
// checks it.
func (fs *FlagSet) Route() *string {
	p := fs.String("route", os.Getenv("SCRIBE_ROUTE"), "how writes reach the store, `ROUTE`: prefer (the daemon if one serves the store, else direct), "+
		"require (the daemon only) or direct (never the daemon) (default $SCRIBE_ROUTE, else prefer)")
	fs.complete("route", string(client.RoutePrefer), string(client.RouteRequire), string(client.RouteDirect))
	return p
}

// JSON adds --json, to print what as JSON (docs/cli.md has the keys).
func (fs *FlagSet) JSON(what string) *bool {
	return fs.Bool("json", false, "print "+what+" as JSON")
}

// Autostart is --autostart and --exit-idle: a daemon started on demand by
// a write that finds none, and how long it stays idle.
type Autostart struct {
	On       bool
	ExitIdle time.Duration
	fs       *FlagSet
}

// Autostart adds --autostart and --exit-idle, defaulting to
// $SCRIBE_AUTOSTART and $SCRIBE_EXIT_IDLE.
func (fs *FlagSet) Autostart() *Autostart {
	a := &Autostart{fs: fs}
	fs.BoolVar(&a.On, "autostart", envBool("SCRIBE_AUTOSTART"), "when no daemon serves the store, a write starts one (detached, logging to "+
		"<store>/.scribe/daemon.log) and goes through it (default $SCRIBE_AUTOSTART, else autostart in <store>/.scribe/config.toml)")
	fs.DurationVar(&a.ExitIdle, "exit-idle", envDuration("SCRIBE_EXIT_IDLE", client.DefaultExitIdle), "with --autostart: the started daemon "+
		"exits once idle for `DUR` (default $SCRIBE_EXIT_IDLE, else exit_idle in <store>/.scribe/config.toml, else 5m)")
	return a
}

// Check refuses an --exit-idle that is not positive.
func (a *Autostart) Check() error {
	if a.ExitIdle <= 0 {
		return Usagef("--exit-idle %s: want a positive duration", a.ExitIdle)
	}
	return nil
}

// CheckRoute refuses --autostart, given on the command line, with the
// direct route, which starts no daemon ($SCRIBE_AUTOSTART and the store's
// config are ignored there).
func (a *Autostart) CheckRoute(r client.Route) error {
	if r == client.RouteDirect && a.given() {
		return Usagef("--autostart starts a daemon when none serves the store, and --route direct writes the store without one: give one or the other")
	}
	return nil
}

// given reports whether --autostart was turned on by the command line.
func (a *Autostart) given() bool { return a.fs.Changed("autostart") && a.On }

// Settle settles --autostart and --exit-idle for store: the command line,
// else $SCRIBE_AUTOSTART and $SCRIBE_EXIT_IDLE, else the store's config
// file (autostart, the store's opt-in; exit_idle, if positive: a daemon
// started on demand must leave one day). The file is read only when it
// exists and something is left to settle, by serve's rules
// (m.CallerConfig): an insecure file, or an invalid value of those two
// keys, fails the command as it would fail serve, rather than being
// ignored. It returns the daemon to start, scribed's serve (m.Scribed;
// this binary's in scribed itself), or nil.
func (a *Autostart) Settle(m *Main, store string) (*client.Autostart, error) {
	on, idle, err := a.settle(m, store)
	if err != nil || !on {
		return nil, err
	}
	exe, err := daemonBinary(m, store)
	if err != nil {
		return nil, err
	}
	return &client.Autostart{Command: []string{exe, "serve"}, ExitIdle: idle}, nil
}

// daemonBinary is the binary whose serve autostart runs: scribed,
// installed or built (m.Scribed), or this binary where it is scribed.
// With no scribed installed and a daemon serving the store, this binary:
// nothing may need starting, and its serve looks for scribed (or builds
// it) only if a daemon must start after all.
func daemonBinary(m *Main, store string) (string, error) {
	if m.Scribed != nil {
		if exe, ok := installedScribed(); ok {
			return exe, nil
		}
		if d, _ := discovery.Find(store); d == nil {
			exe, err := m.Scribed(m.Stderr)
			if err != nil {
				return "", fmt.Errorf("autostart: %w", err)
			}
			return exe, nil
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("autostart: find the scribe binary: %w", err)
	}
	return exe, nil
}

func (a *Autostart) settle(m *Main, store string) (bool, time.Duration, error) {
	on, idle := a.On, a.ExitIdle
	onSet := a.fs.Changed("autostart") || os.Getenv("SCRIBE_AUTOSTART") != ""
	idleSet := a.fs.Changed("exit-idle") || os.Getenv("SCRIBE_EXIT_IDLE") != ""
	// A variable that says neither yes nor no, or no duration, is refused
	// rather than taken for no, or for the default, over the store's file.
	if v := os.Getenv("SCRIBE_AUTOSTART"); v != "" && !a.fs.Changed("autostart") {
		if _, err := strconv.ParseBool(v); err != nil {
			return false, 0, Usagef("$SCRIBE_AUTOSTART=%s: want 1 or true, 0 or false", v)
		}
	}
	if v := os.Getenv("SCRIBE_EXIT_IDLE"); v != "" && !a.fs.Changed("exit-idle") {
		if d, err := time.ParseDuration(v); err != nil || d <= 0 {
			return false, 0, Usagef("$SCRIBE_EXIT_IDLE=%s: want a positive duration, such as 10m", v)
		}
	}
	if onSet && (!on || idleSet) || m.CallerConfig == nil {
		return on, idle, nil
	}
	cfg, err := m.callerConfig(store, "autostart", "exit_idle")
	if err != nil {
		return false, 0, err
	}
	if cfg == nil {
		return on, idle, nil
	}
	if !onSet && cfg.Autostart != nil {
		on = *cfg.Autostart
	}
	if !idleSet && cfg.ExitIdle != nil && *cfg.ExitIdle > 0 {
		idle = *cfg.ExitIdle
	}
	return on, idle, nil
}

// callerConfig is what the command takes of keys from store's config
// file (m.CallerConfig), read once: nil if there is none, or nothing reads
// it (or the store is known by ID only). A problem in another key is
// serve's to report: it must not fail a hook's writes.
func (m *Main) callerConfig(store string, keys ...string) (*CallerConfig, error) {
	if m.CallerConfig == nil || store == "" {
		return nil, nil
	}
	path := configPath(store)
	at := path + "\x00" + strings.Join(keys, ",")
	if c, ok := m.configs[at]; ok {
		return c.cfg, c.err
	}
	var c configRead
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		c.cfg, c.err = m.CallerConfig(path, m.Stderr, keys...)
	}
	if m.configs == nil {
		m.configs = map[string]configRead{}
	}
	m.configs[at] = c
	return c.cfg, c.err
}

// configPath is a store's default config file (queue.Layout.Config).
func configPath(store string) string {
	root, err := queue.ResolveStore(store)
	if err != nil {
		root = store // a missing store is reported where it is used
	}
	return queue.Layout{Root: root}.Config()
}

// RequireStore checks that a store was named (--store, or $SCRIBE_STORE)
// and that its folder exists: scribe never creates one, since a typo
// would become a new, empty store.
func RequireStore(store string) error {
	if store == "" {
		return Usagef("--store is required (or set $SCRIBE_STORE)")
	}
	fi, err := os.Stat(store)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("store %s does not exist; create the folder first: mkdir -p %s", store, ShellQuote(store))
	case err == nil && !fi.IsDir():
		return fmt.Errorf("store %s is not a folder", store)
	}
	return nil // other errors: the command reports them where it uses the store
}

// CheckLockFileFolder refuses a --lock-file whose folder does not exist,
// that is one of scribe's own files (queue.CheckLockFile), or that is no
// regular file (lock.CheckLockPath), as a usage error naming it: no lock
// can be taken there, and a daemon would wait for it for ever.
func CheckLockFileFolder(lockFile string) error {
	if lockFile == "" {
		return nil
	}
	abs, err := filepath.Abs(lockFile)
	if err != nil {
		return Usagef("--lock-file %s: %v", lockFile, err)
	}
	dir := filepath.Dir(abs)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Usagef("--lock-file %s: its folder %s does not exist", lockFile, dir)
	case err != nil:
		return Usagef("--lock-file %s: %v", lockFile, err)
	case !fi.IsDir():
		return Usagef("--lock-file %s: %s is not a folder", lockFile, dir)
	}
	if err := queue.CheckLockFile(abs); err != nil {
		return Usagef("--lock-file: %v", err)
	}
	if err := lock.CheckLockPath(abs); err != nil {
		return Usagef("--lock-file: %v", err)
	}
	return nil
}

// ShellQuote quotes s for a sh command line when it needs it.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@%,=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// envBool is a boolean environment variable: false when unset or not a
// boolean.
func envBool(name string) bool {
	b, _ := strconv.ParseBool(os.Getenv(name))
	return b
}

// envDuration is a duration environment variable, def when unset or not a
// positive duration.
func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

// Ptr returns a pointer to v.
func Ptr[T any](v T) *T { return &v }

// Optional is s, or nil when s is empty.
func Optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
