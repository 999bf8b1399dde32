package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/scribehq/scribe/writer/exec"

	"github.com/BurntSushi/toml"

	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
)

// File is what a config file sets for `scribe serve` (docs/config.md):
// one top-level TOML key per flag, none of them tied to a store, so that
// one file can serve several stores; the stores of a daemon of several in
// [[store]] tables; and the exec allowlist in [exec.NAME] tables. A nil
// field is not set by the file.
type File struct {
	Host         *string        // host: listen address (--host)
	Port         *int64         // port: listen port, 0 for a free one (--port)
	Sync         *string        // sync: "always" or a positive duration (--sync)
	LockFile     *string        // lock_file: absolute, or relative to the file's folder (--lock-file)
	Batch        *int64         // batch: most jobs per batch (--batch)
	IdleRelease  *time.Duration // idle_release (--idle-release)
	HandOffGrace *time.Duration // hand_off_grace (--hand-off-grace)
	WarnAfter    *time.Duration // warn_after (--warn-after)
	MaxJobs      *int64         // max_jobs (--max-jobs)
	MaxBytes     *int64         // max_bytes (--max-bytes)
	MaxJobBytes  *int64         // max_job_bytes (--max-job-bytes)
	Retention    *time.Duration // retention (--retention)
	LogLevel     *string        // log_level: debug, info, warn or error (--log-level)
	ExitIdle     *time.Duration // exit_idle: 0 for never (--exit-idle)
	LogFormat    *string        // log_format: text or json (--log-format)
	MetricsAddr  *string        // metrics_addr: HOST:PORT, :PORT or unix:PATH of /metrics, "" for none (--metrics-addr)
	MetricsToken *string        // metrics_token_file: the bearer token scrapes must send (--metrics-token-file)
	QueueDir     *string        // queue_dir: the shared queue folder of a daemon of several stores (--queue-dir)
	NATSURL      *string        // nats_url: the NATS server or cluster of the queue (--nats-url, docs/cluster.md)
	NATSConfig   *string        // nats_config: a nats-server config file to run a node from (--nats-config)
	Creds        *string        // creds: the daemon's NATS credentials file (--creds)
	TLSCA        *string        // tls_ca: the CAs of the NATS servers (--tls-ca)
	TLSFirst     *bool          // tls_first: TLS before the NATS servers' INFO (--tls-first)
	Replicas     *int64         // replicas (--replicas)
	ClaimTTL     *time.Duration // claim_ttl (--claim-ttl)
	// Autostart is the store's opt-in for a daemon on demand: read by
	// `scribe submit` (its --autostart default), ignored by serve.
	Autostart *bool

	// Commands is the exec allowlist, the [exec.NAME] tables in the
	// file's order, each checked (exec.Command.Check).
	Commands []exec.Command

	// Stores are the [[store]] tables, in the file's order: the stores
	// the daemon serves when the command line names none.
	Stores []Store

	// Path is the file the settings were read from; Lines maps each key
	// set to its line in it: top-level keys by name, the allowlist's as
	// exec.NAME and exec.NAME.KEY (toml.Key's form).
	Path  string
	Lines map[string]int
}

// configKey is one key of the file: the flag it mirrors, how its value is
// checked and stored, and how it reads back as that flag's text.
type configKey struct {
	name string
	flag string
	set  func(c *File, v any, dir string) error // v as decoded; dir is the file's folder
	get  func(c *File) (string, bool)           // the flag's text, if set
	// unset says what an empty value stands for, where that is worked
	// out later (from the store) rather than being the flag's default.
	unset string
}

// configKeys is the schema, in the order --check-config prints it (and
// config.md's table of keys lists them).
var configKeys = []configKey{
	stringKey("host", "host", func(c *File) **string { return &c.Host }, nil),
	intKey("port", "port", func(c *File) **int64 { return &c.Port }, 0, 65535),
	stringKey("sync", "sync", func(c *File) **string { return &c.Sync }, checkSync),
	{name: "lock_file", flag: "lock-file", set: setLockFile, get: func(c *File) (string, bool) { return deref(c.LockFile) }, unset: "<store>/.scribe/lock"},
	intKey("batch", "batch", func(c *File) **int64 { return &c.Batch }, 1, math.MaxInt32),
	durationKey("idle_release", "idle-release", func(c *File) **time.Duration { return &c.IdleRelease }, false),
	durationKey("hand_off_grace", "hand-off-grace", func(c *File) **time.Duration { return &c.HandOffGrace }, false),
	durationKey("warn_after", "warn-after", func(c *File) **time.Duration { return &c.WarnAfter }, false),
	intKey("max_jobs", "max-jobs", func(c *File) **int64 { return &c.MaxJobs }, 1, math.MaxInt64),
	intKey("max_bytes", "max-bytes", func(c *File) **int64 { return &c.MaxBytes }, 1, math.MaxInt64),
	intKey("max_job_bytes", "max-job-bytes", func(c *File) **int64 { return &c.MaxJobBytes }, 1, queue.MaxJobBytesLimit),
	durationKey("retention", "retention", func(c *File) **time.Duration { return &c.Retention }, false),
	stringKey("log_level", "log-level", func(c *File) **string { return &c.LogLevel }, checkLogLevel),
	stringKey("log_format", "log-format", func(c *File) **string { return &c.LogFormat }, checkLogFormat),
	{name: "metrics_addr", flag: "metrics-addr", set: setMetricsAddr, get: func(c *File) (string, bool) { return deref(c.MetricsAddr) }},
	pathKey("metrics_token_file", "metrics-token-file", func(c *File) **string { return &c.MetricsToken }),
	{name: "queue_dir", flag: "queue-dir", set: setQueueDir, get: func(c *File) (string, bool) { return deref(c.QueueDir) },
		unset: "one store: <store>/.scribe/jetstream; several: $XDG_STATE_HOME/scribe/queue or ~/.local/state/scribe/queue"},
	durationKey("exit_idle", "exit-idle", func(c *File) **time.Duration { return &c.ExitIdle }, true),
	// A queue on a NATS cluster (docs/cluster.md). No user, password or
	// token: a daemon's credentials are a creds file, or come from the
	// environment ($SCRIBE_NATS_USER, $SCRIBE_NATS_PASSWORD) or flags.
	stringKey("nats_url", "nats-url", func(c *File) **string { return &c.NATSURL }, nil),
	pathKey("nats_config", "nats-config", func(c *File) **string { return &c.NATSConfig }),
	pathKey("creds", "creds", func(c *File) **string { return &c.Creds }),
	pathKey("tls_ca", "tls-ca", func(c *File) **string { return &c.TLSCA }),
	boolKey("tls_first", "tls-first", func(c *File) **bool { return &c.TLSFirst }),
	intKey("replicas", "replicas", func(c *File) **int64 { return &c.Replicas }, 1, 5),
	durationKey("claim_ttl", "claim-ttl", func(c *File) **time.Duration { return &c.ClaimTTL }, false),
	// Not a serve flag (serve ignores it): submit's --autostart.
	boolKey("autostart", "autostart", func(c *File) **bool { return &c.Autostart }),
}

// execTable is the top-level key of the exec allowlist's tables.
const execTable = "exec"

// storeTable is the top-level key of the [[store]] tables.
const storeTable = "store"

// Store is one [[store]] table: a store the daemon serves, and the
// one setting a store may have of its own.
type Store struct {
	// Path is the store folder (path), absolute: a relative one is taken
	// from the config file's folder.
	Path string
	// LockFile is its store lock file (lock_file), absolute, as the
	// top-level key; "" for the default, <store>/.scribe/lock.
	LockFile string
	// Line is the table's line.
	Line int
}

// Error is one problem in a config file. Line is 0 when the problem
// has no line (the file as a whole), Key empty when it has no key.
type Error struct {
	File    string
	Line    int
	Key     string
	Problem string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		b.WriteString(": " + e.Key)
	}
	return b.String() + ": " + e.Problem
}

// Errors is every problem found in a config file, by line.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Read reads and strictly decodes a config file: every key, or only
// the top-level keys named in only, leaving the others neither checked
// nor set. A caller (`scribe submit`, `scribe mcp`) reads only what it
// takes (Caller): a problem elsewhere in the file (a program missing
// from this process's PATH, say) is serve's to report, and must not fail
// a hook's writes.
//
// The file must be one only this process's user can change, a regular
// file of at most maxConfigBytes (openConfigFile); it is read without
// blocking, whatever is there. Its problems come back as Errors.
func Read(path string, only ...string) (*File, error) {
	f, err := openConfigFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	var keys map[string]bool
	if len(only) > 0 {
		keys = map[string]bool{}
		for _, k := range only {
			keys[k] = true
		}
	}
	return decodeConfig(path, data, keys)
}

// Caller reads the keys a caller takes from a store's config file
// (autostart, exit_idle, lock_file), by serve's rules (Read of only
// those): cli.Main's CallerConfig.
func Caller(path string, stderr io.Writer, keys ...string) (*cli.CallerConfig, error) {
	cfg, err := Read(path, keys...)
	if err != nil {
		return nil, ReportErrors(stderr, err)
	}
	return &cli.CallerConfig{Autostart: cfg.Autostart, ExitIdle: cfg.ExitIdle, LockFile: cfg.LockFile}, nil
}

// Decode strictly decodes a config file's content: an unknown key, a
// value of the wrong type or an invalid one is an error naming the file,
// the line and the key. Every problem is reported, not only the first.
// Content larger than maxConfigBytes, or nested deeper than
// maxConfigNesting, is refused before it is decoded.
func Decode(path string, data []byte) (*File, error) {
	return decodeConfig(path, data, nil)
}

// decodeConfig is Decode, of only the top-level keys in only if it
// is not nil: the others are neither checked nor set.
func decodeConfig(path string, data []byte, only map[string]bool) (*File, error) {
	if errs := checkBounds(path, data); len(errs) > 0 {
		return nil, errs
	}
	var raw map[string]any
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, Errors{{File: path, Line: pe.Position.Line, Key: pe.LastKey, Problem: pe.Message}}
		}
		return nil, Errors{{File: path, Problem: err.Error()}}
	}
	c := &File{Path: path, Lines: map[string]int{}}
	where := scanLines(string(data))
	lines := where.keys
	var errs Errors
	// Absolute: a command's program must be, and relative paths in the
	// file are the file's folder's, wherever serve runs.
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	known := map[string]configKey{}
	for _, k := range configKeys {
		known[k.name] = k
	}
	reported := map[string]bool{}
	for _, key := range md.Keys() {
		top := key[0]
		line := exec.LineOf(lines, top)
		k, ok := known[top]
		switch {
		case reported[top], only != nil && !only[top]:
			continue
		case top == execTable:
			reported[top] = true
			c.Lines[top] = line
			errs = append(errs, decodeExec(c, raw[top], lines, dir)...)
			continue
		case top == storeTable:
			reported[top] = true
			c.Lines[top] = line
			errs = append(errs, decodeStores(c, raw[top], where.arrays[storeTable], line, dir)...)
			continue
		case !ok:
			reported[top] = true
			problem := "unknown key"
			switch raw[top].(type) {
			case map[string]any, []map[string]any:
				problem = "unknown table"
			}
			errs = append(errs, &Error{File: path, Line: line, Key: top, Problem: problem})
			continue
		}
		reported[top] = true
		c.Lines[top] = line
		if err := k.set(c, raw[top], dir); err != nil {
			errs = append(errs, &Error{File: path, Line: line, Key: top, Problem: err.Error()})
		}
	}
	if len(c.Stores) > 0 && c.LockFile != nil {
		// Which store's lock would it be?
		errs = append(errs, &Error{File: path, Line: c.Lines["lock_file"], Key: "lock_file",
			Problem: "a file with [[store]] tables sets each store's lock file in its table, not at the top level"})
	}
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
		return nil, errs
	}
	return c, nil
}

// decodeStores reads the [[store]] tables into c.Stores. lines are the
// lines of each table's header and keys (tomlLines.arrays); a store written
// as an inline table has the line of the key store, line.
func decodeStores(c *File, v any, lines []map[string]int, line int, dir string) Errors {
	problem := func(line int, key, format string, args ...any) *Error {
		return &Error{File: c.Path, Line: line, Key: key, Problem: fmt.Sprintf(format, args...)}
	}
	var tables []map[string]any
	switch list := v.(type) {
	case []map[string]any:
		tables = list
	case []any:
		for _, t := range list {
			m, ok := t.(map[string]any)
			if !ok {
				return Errors{problem(line, storeTable, "%v", exec.WrongType(t, "a table with the store's path"))}
			}
			tables = append(tables, m)
		}
	default:
		return Errors{problem(line, storeTable, "%v: write each store as a [[store]] table with its path", exec.WrongType(v, "an array of tables"))}
	}
	var errs Errors
	seen := map[string]int{}
	for i, t := range tables {
		at := func(key string) int {
			if i < len(lines) {
				if l, ok := lines[i][key]; ok {
					return l
				}
				if l, ok := lines[i][""]; ok {
					return l
				}
			}
			return line
		}
		st := Store{Line: at("")}
		for _, k := range slices.Sorted(maps.Keys(t)) {
			key := storeTable + "." + k
			switch k {
			case "path":
				p, ok := t[k].(string)
				switch {
				case !ok:
					errs = append(errs, problem(at(k), key, "%v", exec.WrongType(t[k], "a string (the store folder)")))
				case p == "":
					errs = append(errs, problem(at(k), key, "empty path: want the store folder"))
				default:
					if !filepath.IsAbs(p) {
						p = filepath.Join(dir, p)
					}
					st.Path = filepath.Clean(p)
				}
			case "lock_file":
				var lc File
				if err := setLockFile(&lc, t[k], dir); err != nil {
					errs = append(errs, problem(at(k), key, "%v", err))
				} else {
					st.LockFile = *lc.LockFile
				}
			default:
				errs = append(errs, problem(at(k), key, "unknown key (a store sets path and lock_file; the other settings are the daemon's, at the top level)"))
			}
		}
		if _, ok := t["path"]; !ok {
			errs = append(errs, problem(at(""), storeTable+".path", "missing: want the store folder"))
			continue
		}
		if st.Path == "" {
			continue
		}
		key := st.Path
		if real, err := filepath.EvalSymlinks(st.Path); err == nil {
			key = real // another spelling of one folder, through a symlink
		}
		if first, dup := seen[key]; dup {
			errs = append(errs, problem(at("path"), storeTable+".path", "%s is listed twice (first at line %d)", st.Path, first))
			continue
		}
		seen[key] = at("path")
		c.Stores = append(c.Stores, st)
	}
	return errs
}

// Source says where an effective setting came from.
type Source struct {
	from string // "default", "file" or "flag"
	line int    // the file's line, for "file"
}

// Apply loads the config file serve runs with, if any, and sets the
// flags that the command line did not set from it. explicit is --config;
// without it the store's default file is read when present. It returns
// the file (nil if none) and where each flag's value came from.
func Apply(fset *flag.FlagSet, store, explicit string) (*File, map[string]Source, error) {
	onCommandLine := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	sources := map[string]Source{}
	for _, k := range configKeys {
		if fset.Lookup(k.flag) == nil {
			continue
		}
		sources[k.flag] = Source{from: "default"}
		if onCommandLine[k.flag] {
			sources[k.flag] = Source{from: "flag"}
		}
	}
	path := explicit
	if path == "" {
		if store == "" {
			return nil, sources, nil
		}
		path = Path(store)
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, sources, nil
		}
	}
	cfg, err := Read(path)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range configKeys {
		text, ok := k.get(cfg)
		if !ok || onCommandLine[k.flag] || fset.Lookup(k.flag) == nil {
			continue
		}
		if err := fset.Set(k.flag, text); err != nil {
			return nil, nil, Errors{{File: path, Line: cfg.Lines[k.name], Key: k.name, Problem: err.Error()}}
		}
		sources[k.flag] = Source{from: "file", line: cfg.Lines[k.name]}
	}
	return cfg, sources, nil
}

// Print prints the settings serve would run with, as a TOML file,
// each with where it came from.
func Print(w io.Writer, fset *flag.FlagSet, cfg *File, sources map[string]Source) {
	if cfg != nil {
		fmt.Fprintf(w, "# config file: %s\n", cfg.Path)
	} else {
		fmt.Fprintln(w, "# config file: none")
	}
	for _, k := range configKeys {
		f := fset.Lookup(k.flag)
		if f == nil {
			continue
		}
		value := f.Value.String()
		if _, isString := f.Value.(flag.Getter).Get().(string); isString {
			value = strconv.Quote(value)
		} else if _, isDuration := f.Value.(flag.Getter).Get().(time.Duration); isDuration {
			value = strconv.Quote(value)
		}
		src := sources[k.flag]
		from := src.from
		switch src.from {
		case "file":
			from = fmt.Sprintf("file %s:%d", cfg.Path, src.line)
		case "flag":
			from = "flag --" + k.flag
		}
		if k.unset != "" && f.Value.String() == "" {
			from += ": " + k.unset
		}
		fmt.Fprintf(w, "%-40s # %s\n", k.name+" = "+value, from)
	}
	autostart, from := "false", "default"
	if cfg != nil && cfg.Autostart != nil {
		autostart, from = strconv.FormatBool(*cfg.Autostart), fmt.Sprintf("file %s:%d", cfg.Path, cfg.Lines["autostart"])
	}
	fmt.Fprintf(w, "%-40s # %s; read by scribe submit, not by serve\n", "autostart = "+autostart, from)
	printCommands(w, cfg)
}

func stringKey(name, flagName string, field func(*File) **string, check func(string) error) configKey {
	return configKey{
		name: name, flag: flagName,
		set: func(c *File, v any, _ string) error {
			s, ok := v.(string)
			if !ok {
				return exec.WrongType(v, "a string")
			}
			if check != nil {
				if err := check(s); err != nil {
					return err
				}
			}
			*field(c) = &s
			return nil
		},
		get: func(c *File) (string, bool) { return deref(*field(c)) },
	}
}

func intKey(name, flagName string, field func(*File) **int64, lo, hi int64) configKey {
	return configKey{
		name: name, flag: flagName,
		set: func(c *File, v any, _ string) error {
			n, ok := v.(int64)
			if !ok {
				return exec.WrongType(v, "an integer")
			}
			if n < lo || n > hi {
				if hi == math.MaxInt64 || hi == math.MaxInt32 {
					return fmt.Errorf("%d: want a positive integer", n)
				}
				return fmt.Errorf("%d: want %d to %d", n, lo, hi)
			}
			*field(c) = &n
			return nil
		},
		get: func(c *File) (string, bool) {
			if p := *field(c); p != nil {
				return strconv.FormatInt(*p, 10), true
			}
			return "", false
		},
	}
}

// durationKey is a duration, written as a string in Go's syntax
// (time.ParseDuration: "500ms", "90s", "1h30m"), as on the command line.
func durationKey(name, flagName string, field func(*File) **time.Duration, zeroOK bool) configKey {
	return configKey{
		name: name, flag: flagName,
		set: func(c *File, v any, _ string) error {
			d, err := exec.DurationValue(v, zeroOK)
			if err != nil {
				return err
			}
			*field(c) = &d
			return nil
		},
		get: func(c *File) (string, bool) {
			if p := *field(c); p != nil {
				return p.String(), true
			}
			return "", false
		},
	}
}

// setLockFile takes lock_file relative to the file's folder, and wants its
// folder to exist (the lock file itself is created when missing).
func setLockFile(c *File, v any, dir string) error {
	s, ok := v.(string)
	if !ok {
		return exec.WrongType(v, "a string (a path)")
	}
	if s == "" {
		return errors.New(`empty path: leave the key out for the default, <store>/.scribe/lock`)
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(dir, s)
	}
	fi, err := os.Stat(filepath.Dir(s))
	switch {
	case err != nil && errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: its folder does not exist", s)
	case err != nil:
		return fmt.Errorf("%s: %v", s, err)
	case !fi.IsDir():
		return fmt.Errorf("%s: %s is not a folder", s, filepath.Dir(s))
	}
	if err := queue.CheckLockFile(s); err != nil {
		return err
	}
	c.LockFile = &s
	return nil
}

// setQueueDir takes queue_dir relative to the file's folder. The folder
// need not exist: the daemon creates it.
// pathKey is a key of a file's path, absolute or relative to the config
// file's folder; "" for none.
func pathKey(name, flagName string, field func(*File) **string) configKey {
	return configKey{
		name: name, flag: flagName,
		set: func(c *File, v any, dir string) error {
			s, ok := v.(string)
			if !ok {
				return exec.WrongType(v, "a string (a path)")
			}
			if s != "" && !filepath.IsAbs(s) {
				s = filepath.Join(dir, s)
			}
			*field(c) = &s
			return nil
		},
		get: func(c *File) (string, bool) { return deref(*field(c)) },
	}
}

func setQueueDir(c *File, v any, dir string) error {
	s, ok := v.(string)
	if !ok {
		return exec.WrongType(v, "a string (a path)")
	}
	if s == "" {
		return errors.New(`empty path: leave the key out for the default, $XDG_STATE_HOME/scribe/queue`)
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(dir, s)
	}
	c.QueueDir = &s
	return nil
}

func checkSync(s string) error {
	if s == "always" {
		return nil
	}
	if d, err := time.ParseDuration(s); err != nil || d <= 0 {
		return fmt.Errorf("%q: want \"always\" or a positive duration such as \"1s\"", s)
	}
	return nil
}

// checkLogFormat is serve's --log-format: text or json.
func checkLogFormat(s string) error {
	if s != "text" && s != "json" {
		return fmt.Errorf("%q: want text or json", s)
	}
	return nil
}

func checkLogLevel(s string) error {
	switch strings.ToLower(s) {
	case "debug", "info", "warn", "error":
		return nil
	}
	return fmt.Errorf("%q: want debug, info, warn or error", s)
}

func deref(p *string) (string, bool) {
	if p == nil {
		return "", false
	}
	return *p, true
}

// Path is a store's default config file (queue.Layout.Config).
func Path(store string) string {
	root, err := queue.ResolveStore(store)
	if err != nil {
		root = store // a missing store is reported by serve itself
	}
	return queue.Layout{Root: root}.Config()
}

// ReportErrors prints each problem of a config file on its own line,
// FILE:LINE: KEY: PROBLEM, and makes them a usage error (exit 2). Other
// errors (an insecure file: exit 1) pass through.
func ReportErrors(w io.Writer, err error) error {
	var errs Errors
	if !errors.As(err, &errs) {
		return err
	}
	for _, e := range errs {
		fmt.Fprintln(w, e)
	}
	problems := "problems"
	if len(errs) == 1 {
		problems = "problem"
	}
	// The file named is where to look, not the command's help.
	return cli.Exit(cli.ExitUsage, fmt.Errorf("config %s: %d %s", errs[0].File, len(errs), problems))
}
