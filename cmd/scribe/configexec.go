package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/lock"
)

// maxExecOutput bounds max_output: an exec outcome carries both streams
// and travels as one NATS message (1 MiB at most, queue.MaxJobBytes), with
// room left for JSON escapes and the rest of the outcome.
const maxExecOutput = 256 << 10

// execKey is one key of an [exec.NAME] table: how its value is checked
// and stored in the command, and how it reads back as TOML.
type execKey struct {
	name string
	set  func(cmd *writer.Command, v any, dir string) error // dir: the config file's folder, absolute
	get  func(cmd *writer.Command) (string, bool)           // the TOML value, if there is one to print
}

// execKeys is the schema of an [exec.NAME] table, in the order
// --check-config prints it.
var execKeys = []execKey{
	{name: "program", set: setProgram, get: func(cmd *writer.Command) (string, bool) { return tomlString(cmd.Program), true }},
	{name: "args", set: func(cmd *writer.Command, v any, _ string) error {
		var err error
		cmd.Args, err = stringList(v)
		return err
	}, get: func(cmd *writer.Command) (string, bool) { return tomlStrings(cmd.Args), true }},
	{name: "allow_args", set: setAllowArgs, get: func(cmd *writer.Command) (string, bool) { return tomlStrings(cmd.AllowArgs), true }},
	{name: "dir", set: setCommandDir, get: func(cmd *writer.Command) (string, bool) { return tomlString(cmd.Dir), cmd.Dir != "" }},
	{name: "timeout", set: func(cmd *writer.Command, v any, _ string) error {
		var err error
		cmd.Timeout, err = durationValue(v, false)
		return err
	}, get: func(cmd *writer.Command) (string, bool) { return tomlString(cmd.Timeout.String()), true }},
	{name: "grace", set: func(cmd *writer.Command, v any, _ string) error {
		var err error
		cmd.Grace, err = durationValue(v, false)
		return err
	}, get: func(cmd *writer.Command) (string, bool) { return tomlString(cmd.Grace.String()), true }},
	{name: "max_output", set: func(cmd *writer.Command, v any, _ string) error {
		n, ok := v.(int64)
		switch {
		case !ok:
			return wrongType(v, "an integer (bytes)")
		case n < 1 || n > maxExecOutput:
			return fmt.Errorf("%d: want 1 to %d bytes (both streams of a run travel in one outcome message)", n, maxExecOutput)
		}
		cmd.MaxOutput = int(n)
		return nil
	}, get: func(cmd *writer.Command) (string, bool) { return strconv.Itoa(cmd.MaxOutput), true }},
	{name: "rerun_safe", set: func(cmd *writer.Command, v any, _ string) error {
		b, ok := v.(bool)
		if !ok {
			return wrongType(v, "a boolean")
		}
		cmd.RerunSafe = b
		return nil
	}, get: func(cmd *writer.Command) (string, bool) { return strconv.FormatBool(cmd.RerunSafe), true }},
	{name: "busy_exit_codes", set: setBusyExitCodes, get: func(cmd *writer.Command) (string, bool) {
		s := make([]string, len(cmd.BusyExitCodes))
		for i, n := range cmd.BusyExitCodes {
			s[i] = strconv.Itoa(n)
		}
		return "[" + strings.Join(s, ", ") + "]", true
	}},
	{name: "lock_file", set: setCommandLockFile, get: func(cmd *writer.Command) (string, bool) {
		return tomlString(cmd.LockFile), cmd.LockFile != ""
	}},
	{name: "env", set: setEnv, get: func(cmd *writer.Command) (string, bool) {
		kv := make([]string, len(cmd.Env))
		for i, e := range cmd.Env {
			k, v, _ := strings.Cut(e, "=")
			kv[i] = k + " = " + tomlString(v)
		}
		return "{ " + strings.Join(kv, ", ") + " }", len(cmd.Env) > 0
	}},
}

// subKeyError is a problem with one entry of a key's table (env's
// variables), reported under that entry's own key and line.
type subKeyError struct {
	key string
	err error
}

func (e *subKeyError) Error() string { return e.err.Error() }

// decodeExec reads the [exec.NAME] tables, the exec allowlist, into
// c.Commands, in the file's order. Every problem is reported under its
// key (exec.NAME.KEY) and line; each command that has none passes
// writer.Command.Check.
func decodeExec(c *Config, v any, lines map[string]int, dir string) ConfigErrors {
	problem := func(line int, key toml.Key, format string, args ...any) *ConfigError {
		return &ConfigError{File: c.Path, Line: line, Key: key.String(), Problem: fmt.Sprintf(format, args...)}
	}
	table, ok := v.(map[string]any)
	if !ok {
		return ConfigErrors{problem(lineOf(lines, "exec"), toml.Key{"exec"}, "%v: want a table of commands, [exec.NAME]", wrongType(v, "a table"))}
	}
	var errs ConfigErrors
	for _, name := range byLine(table, lines, "exec") {
		key := toml.Key{"exec", name}
		line := lineOf(lines, key...)
		c.Lines[key.String()] = line
		raw, ok := table[name].(map[string]any)
		switch {
		case !ok:
			errs = append(errs, problem(line, key, "%v", wrongType(table[name], "a table, [exec."+name+"]")))
			continue
		case !queue.ValidCommandName(name):
			errs = append(errs, problem(line, key, "command name %q: want 1-64 characters of [A-Za-z0-9_.-], starting with a letter or digit", name))
			continue
		}
		cmd, cerrs := decodeCommand(c, name, raw, lines, dir)
		if len(cerrs) > 0 {
			errs = append(errs, cerrs...)
			continue
		}
		// The writer's own check, last: what passed the keys' checks
		// passes it, but the daemon must never run with a command it
		// would refuse.
		if err := cmd.Check(); err != nil {
			errs = append(errs, problem(line, key, "%v", err))
			continue
		}
		c.Commands = append(c.Commands, cmd)
	}
	return errs
}

// decodeCommand reads one [exec.NAME] table.
func decodeCommand(c *Config, name string, raw map[string]any, lines map[string]int, dir string) (writer.Command, ConfigErrors) {
	cmd := writer.Command{Name: name, Grace: writer.DefaultCommandGrace, MaxOutput: writer.DefaultMaxOutput}
	known := map[string]execKey{}
	for _, k := range execKeys {
		known[k.name] = k
	}
	var errs ConfigErrors
	for _, kname := range byLine(raw, lines, "exec", name) {
		key := toml.Key{"exec", name, kname}
		line := lineOf(lines, key...)
		k, ok := known[kname]
		if !ok {
			errs = append(errs, &ConfigError{File: c.Path, Line: line, Key: key.String(), Problem: "unknown key"})
			continue
		}
		c.Lines[key.String()] = line
		if err := k.set(&cmd, raw[kname], dir); err != nil {
			var se *subKeyError
			if errors.As(err, &se) {
				key = append(key, se.key)
				line = lineOf(lines, key...)
			}
			errs = append(errs, &ConfigError{File: c.Path, Line: line, Key: key.String(), Problem: err.Error()})
		}
	}
	for _, required := range []struct{ key, why string }{
		{"program", `want the program to run: an absolute path, a name looked up in PATH, or a path relative to this file's folder`},
		{"timeout", `want how long a run may take, such as "10m": every command needs a bound`},
	} {
		if _, ok := raw[required.key]; !ok {
			key := toml.Key{"exec", name, required.key}
			errs = append(errs, &ConfigError{File: c.Path, Line: lineOf(lines, "exec", name), Key: key.String(), Problem: "missing: " + required.why})
		}
	}
	return cmd, errs
}

// setProgram takes an absolute path; a bare name, looked up in PATH now
// (the daemon runs what was found, whatever PATH it runs with); or a
// relative path with a slash, from the config file's folder.
func setProgram(cmd *writer.Command, v any, dir string) error {
	s, ok := v.(string)
	if !ok {
		return wrongType(v, "a string (a path, or a name to look up in PATH)")
	}
	p := s
	switch {
	case s == "":
		return errors.New("empty: want an absolute path, a name to look up in PATH, or a path relative to this file's folder")
	case !strings.Contains(s, "/"):
		found, err := exec.LookPath(s)
		if err == nil {
			found, err = filepath.Abs(found)
		}
		if err != nil {
			return fmt.Errorf("%q: not found in PATH (%s): give its absolute path", s, os.Getenv("PATH"))
		}
		p = found
	case !filepath.IsAbs(s):
		p = filepath.Join(dir, s)
	}
	p = filepath.Clean(p)
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: no such file", p)
	case err != nil:
		return fmt.Errorf("%s: %v", p, err)
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s: not an executable file", p)
	}
	cmd.Program = p
	return nil
}

// setAllowArgs takes regular expressions (Go's syntax), each matched
// against a whole argument.
func setAllowArgs(cmd *writer.Command, v any, _ string) error {
	patterns, err := stringList(v)
	if err != nil {
		return err
	}
	for _, p := range patterns {
		if _, err := regexp.Compile(p); err != nil {
			return fmt.Errorf("%q: %v", p, err)
		}
		if _, err := regexp.Compile(`^(?:` + p + `)$`); err != nil {
			return fmt.Errorf("%q: %v", p, err)
		}
	}
	cmd.AllowArgs = patterns
	return nil
}

// setCommandDir takes a folder relative to the store, inside it and not
// in .scribe, by the rules of op paths.
func setCommandDir(cmd *writer.Command, v any, _ string) error {
	s, ok := v.(string)
	if !ok {
		return wrongType(v, "a string (a folder relative to the store)")
	}
	if s == "" {
		return errors.New("empty: leave the key out for the store's root")
	}
	if err := queue.CheckPath(s); err != nil {
		return fmt.Errorf("%v: want a folder relative to the store, inside it and not in %s", err, queue.MetaDir)
	}
	cmd.Dir = s
	return nil
}

func setBusyExitCodes(cmd *writer.Command, v any, _ string) error {
	list, ok := v.([]any)
	if !ok {
		return wrongType(v, "an array of integers")
	}
	var codes []int // [] is none, as leaving the key out
	for i, e := range list {
		n, ok := e.(int64)
		switch {
		case !ok:
			return fmt.Errorf("element %d: %v", i, wrongType(e, "an integer"))
		case n < 1 || n > 255:
			return fmt.Errorf("%d: want exit codes 1 to 255", n)
		}
		codes = append(codes, int(n))
	}
	cmd.BusyExitCodes = codes
	return nil
}

// setCommandLockFile takes the command's own lock file, absolute or from
// the config file's folder. That it is not the store lock is checked
// once the store is known (Config.CheckCommandLocks).
func setCommandLockFile(cmd *writer.Command, v any, dir string) error {
	s, ok := v.(string)
	if !ok {
		return wrongType(v, "a string (a path)")
	}
	if s == "" {
		return errors.New("empty: leave the key out if the command takes no lock of its own")
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(dir, s)
	}
	cmd.LockFile = filepath.Clean(s)
	return nil
}

// envNameRE is a portable environment variable name (POSIX).
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// setEnv takes a table of variables, added to the command's environment
// as KEY=VALUE, sorted by name.
func setEnv(cmd *writer.Command, v any, _ string) error {
	table, ok := v.(map[string]any)
	if !ok {
		return wrongType(v, `a table of strings, such as { LC_ALL = "C" }`)
	}
	names := make([]string, 0, len(table))
	for name := range table {
		names = append(names, name)
	}
	slices.Sort(names)
	env := make([]string, 0, len(names))
	for _, name := range names {
		s, ok := table[name].(string)
		switch {
		case !envNameRE.MatchString(name):
			return &subKeyError{key: name, err: fmt.Errorf("%q is not an environment variable name: want [A-Za-z_][A-Za-z0-9_]*", name)}
		case strings.HasPrefix(strings.ToUpper(name), "SCRIBE_"):
			// The daemon sets SCRIBE_STORE, SCRIBE_JOB_ID, SCRIBE_EPOCH and
			// the store lock's variables itself; a command must get those.
			return &subKeyError{key: name, err: fmt.Errorf("%s: SCRIBE_ variables are the daemon's to set", name)}
		case !ok:
			return &subKeyError{key: name, err: wrongType(table[name], "a string")}
		case strings.IndexByte(s, 0) >= 0:
			return &subKeyError{key: name, err: errors.New("contains a NUL byte")}
		}
		env = append(env, name+"="+s)
	}
	cmd.Env = env
	return nil
}

// stringList is a TOML array of strings.
func stringList(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, wrongType(v, "an array of strings")
	}
	var out []string
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("element %d: %v", i, wrongType(e, "a string"))
		}
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("element %d contains a NUL byte", i)
		}
		out = append(out, s)
	}
	return out, nil
}

// durationValue is a duration written as a string in Go's syntax
// (time.ParseDuration: "500ms", "90s", "1h30m"), as on the command line.
func durationValue(v any, zeroOK bool) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, wrongType(v, `a duration string such as "90s"`)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: want a number with a unit (ns, us, ms, s, m, h) such as \"90s\" or \"1h30m\"", s)
	}
	if d < 0 || d == 0 && !zeroOK {
		return 0, fmt.Errorf("%q: want a positive duration", s)
	}
	return d, nil
}

// byLine returns a table's keys in the order they appear in the file
// (then by name, for keys of one inline table).
func byLine(table map[string]any, lines map[string]int, parent ...string) []string {
	names := make([]string, 0, len(table))
	for name := range table {
		names = append(names, name)
	}
	line := func(name string) int { return lineOf(lines, append(slices.Clip(parent), name)...) }
	slices.SortFunc(names, func(a, b string) int {
		if la, lb := line(a), line(b); la != lb {
			return la - lb
		}
		return strings.Compare(a, b)
	})
	return names
}

// CheckCommandLocks refuses a command whose own lock file is the store
// lock, storeLock (by path, and by device and inode when both exist), or
// lies in the store's .scribe folder, meta (skipped when ""): the daemon
// holds those files itself, so the command would find them held by its
// own daemon and its jobs would wait for ever. The problems are
// ConfigErrors, under exec.NAME.lock_file.
func (c *Config) CheckCommandLocks(storeLock, meta string) error {
	if c == nil {
		return nil
	}
	var errs ConfigErrors
	for _, cmd := range c.Commands {
		if cmd.LockFile == "" {
			continue
		}
		key := toml.Key{"exec", cmd.Name, "lock_file"}.String()
		problem := ""
		switch {
		case storeLock != "" && sameFile(cmd.LockFile, storeLock):
			same := ""
			if cmd.LockFile != storeLock {
				same = " " + storeLock
			}
			problem = fmt.Sprintf("%s is the store lock file%s: the command would find it held by its own daemon; give the command's own lock file, or leave the key out", cmd.LockFile, same)
		case meta != "" && inside(cmd.LockFile, meta):
			problem = fmt.Sprintf("%s is in the store's %s folder, whose locks the daemon holds itself; give the command's own lock file", cmd.LockFile, queue.MetaDir)
		default:
			continue
		}
		errs = append(errs, &ConfigError{File: c.Path, Line: c.Lines[key], Key: key, Problem: problem})
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// sameFile reports whether two paths name one file: the same path once
// their folders' symlinks are resolved, or, when both exist, the same
// device and inode (a symlink or a hard link to it).
func sameFile(a, b string) bool {
	if realFile(a) == realFile(b) {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// inside reports whether path p lies in folder dir, symlinks of both
// resolved.
func inside(p, dir string) bool {
	d := dir
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		d = r
	}
	rel, err := filepath.Rel(d, realFile(p))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// realFile is p, absolute, with its folder's symlinks resolved (p itself
// may not exist yet).
func realFile(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		return filepath.Join(dir, filepath.Base(p))
	}
	return filepath.Clean(p)
}

// storeLockPaths is the store lock that serve would take, and the store's
// .scribe folder, for CheckCommandLocks: lockFile (--lock-file or the
// file's lock_file) if set, else the store's default. Unknown parts (no
// store, or one that does not resolve: serve reports it) are "".
func storeLockPaths(store, lockFile string) (storeLock, meta string) {
	if store != "" {
		if real, err := queue.ResolveStore(store); err == nil {
			meta = queue.Layout{Root: real}.Meta()
			storeLock = lock.DefaultPath(real)
		}
	}
	if lockFile != "" {
		storeLock = lockFile
		if abs, err := filepath.Abs(lockFile); err == nil {
			storeLock = abs
		}
	}
	return storeLock, meta
}

// printCommands prints the exec allowlist as TOML tables, each key with
// where it came from.
func printCommands(w io.Writer, cfg *Config) {
	if cfg == nil {
		return
	}
	from := func(key toml.Key) string {
		if line, ok := cfg.Lines[key.String()]; ok {
			return fmt.Sprintf("file %s:%d", cfg.Path, line)
		}
		return "default"
	}
	for _, cmd := range cfg.Commands {
		header := toml.Key{"exec", cmd.Name}
		fmt.Fprintf(w, "\n%-40s # %s\n", "["+header.String()+"]", from(header))
		for _, k := range execKeys {
			if value, ok := k.get(&cmd); ok {
				fmt.Fprintf(w, "%-40s # %s\n", k.name+" = "+value, from(toml.Key{"exec", cmd.Name, k.name}))
			}
		}
	}
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tomlStrings is a TOML array of basic strings.
func tomlStrings(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = tomlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// lineOf is the line of a key, or of the nearest table or key that holds
// it (the keys of an inline table have their table's line); 0 if none.
func lineOf(lines map[string]int, key ...string) int {
	for n := len(key); n > 0; n-- {
		if line, ok := lines[toml.Key(key[:n]).String()]; ok {
			return line
		}
	}
	return 0
}

// keyLines maps each key and table of a TOML document, by its dotted path
// (toml.Key.String), to the line (from 1) where it is first set or opened.
// A header [a.b] opens a and a.b; a line `x.y = …` under it sets a.b.x and
// a.b.x.y. Values that span lines (arrays, multi-line strings) are skipped
// over, so that their content is never taken for a key. The keys of
// inline tables are not listed (lineOf gives their table's line).
func keyLines(doc string) map[string]int {
	lines := map[string]int{}
	record := func(line int, path toml.Key) {
		for n := 1; n <= len(path); n++ {
			if k := path[:n].String(); lines[k] == 0 {
				lines[k] = line
			}
		}
	}
	var (
		table toml.Key
		s     valueScanner
	)
	for i, text := range strings.Split(doc, "\n") {
		if s.open() {
			s.scan(text)
			continue
		}
		rest := strings.TrimLeft(text, " \t")
		switch {
		case rest == "" || rest[0] == '#':
			continue
		case rest[0] == '[':
			rest = strings.TrimPrefix(strings.TrimPrefix(rest, "["), "[")
			if path, after, ok := parseKey(rest); ok && strings.HasPrefix(strings.TrimLeft(after, " \t"), "]") {
				table = path
				record(i+1, table)
			}
			continue
		}
		path, after, ok := parseKey(rest)
		after = strings.TrimLeft(after, " \t")
		if !ok || !strings.HasPrefix(after, "=") {
			continue
		}
		record(i+1, append(slices.Clip(table), path...))
		s.scan(after[1:])
	}
	return lines
}

// parseKey reads a dotted TOML key at the start of s: bare, "basic" or
// 'literal' parts joined by dots. It returns the parts and what follows.
func parseKey(s string) (toml.Key, string, bool) {
	var key toml.Key
	for {
		s = strings.TrimLeft(s, " \t")
		var part string
		switch {
		case strings.HasPrefix(s, `"`):
			end := 1
			for end < len(s) && s[end] != '"' {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(s) {
				return nil, "", false
			}
			var err error
			if part, err = strconv.Unquote(s[:end+1]); err != nil {
				part = s[1:end]
			}
			s = s[end+1:]
		case strings.HasPrefix(s, `'`):
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return nil, "", false
			}
			part, s = s[1:end+1], s[end+2:]
		default:
			end := strings.IndexFunc(s, func(r rune) bool {
				return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-')
			})
			if end < 0 {
				end = len(s)
			}
			if end == 0 {
				return nil, "", false
			}
			part, s = s[:end], s[end:]
		}
		key = append(key, part)
		s = strings.TrimLeft(s, " \t")
		if !strings.HasPrefix(s, ".") {
			return key, s, true
		}
		s = s[1:]
	}
}

// valueScanner follows a TOML value over lines: the brackets of arrays
// and inline tables still open, or the multi-line string it is in.
type valueScanner struct {
	depth int
	delim string // `"""` or `'''` inside a multi-line string
}

func (v *valueScanner) open() bool { return v.depth > 0 || v.delim != "" }

// scan reads one line of a value, from where the last one left off.
func (v *valueScanner) scan(s string) {
	for i := 0; i < len(s); i++ {
		if v.delim != "" {
			end := strings.Index(s[i:], v.delim)
			if end < 0 {
				return
			}
			i += end + len(v.delim) - 1
			v.delim = ""
			continue
		}
		switch c := s[i]; c {
		case '#':
			return
		case '[', '{':
			v.depth++
		case ']', '}':
			v.depth = max(v.depth-1, 0)
		case '"', '\'':
			if strings.HasPrefix(s[i:], strings.Repeat(string(c), 3)) {
				v.delim = strings.Repeat(string(c), 3)
				i += 2
				continue
			}
			for i++; i < len(s) && s[i] != c; i++ {
				if c == '"' && s[i] == '\\' {
					i++
				}
			}
		}
	}
}

// boolKey is a boolean top-level key.
func boolKey(name, flagName string, field func(*Config) **bool) configKey {
	return configKey{
		name: name, flag: flagName,
		set: func(c *Config, v any, _ string) error {
			b, ok := v.(bool)
			if !ok {
				return wrongType(v, "a boolean (true or false)")
			}
			*field(c) = &b
			return nil
		},
		get: func(c *Config) (string, bool) {
			if p := *field(c); p != nil {
				return strconv.FormatBool(*p), true
			}
			return "", false
		},
	}
}
