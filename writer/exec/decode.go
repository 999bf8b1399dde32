package exec

import (
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/scribehq/scribe/queue"
)

// KeyError is a problem with one key of a config file's [exec.NAME]
// tables, at its line (0 when it has none).
type KeyError struct {
	// Key is the key: exec.NAME.KEY, exec.NAME, or exec.
	Key toml.Key
	// Line is the key's line in the file, from 1.
	Line int
	// Problem says what is wrong and what is wanted.
	Problem string
}

func (e *KeyError) Error() string { return e.Key.String() + ": " + e.Problem }

// KeyErrors is every problem Decode found, in the file's order.
type KeyErrors []*KeyError

func (es KeyErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Keys are the keys an [exec.NAME] table may set, in the order Settings
// gives them.
func Keys() []string {
	names := make([]string, len(schema))
	for i, k := range schema {
		names[i] = k.name
	}
	return names
}

// Setting is one key of an [exec.NAME] table and its value, as TOML
// writes it.
type Setting struct{ Key, Value string }

// Settings are the command's keys as its [exec.NAME] table writes them,
// those it has, in the order of Keys: what `scribe serve --check-config`
// prints, and Decode reads back as the same command.
func (c *Command) Settings() []Setting {
	var out []Setting
	for _, k := range schema {
		if v, ok := k.get(c); ok {
			out = append(out, Setting{Key: k.name, Value: v})
		}
	}
	return out
}

// key is one key of an [exec.NAME] table: how its value is checked and
// stored in the command, and how it reads back as TOML.
type key struct {
	name string
	set  func(cmd *Command, v any, dir string) error // dir: the config file's folder, absolute
	get  func(cmd *Command) (string, bool)           // the TOML value, if there is one to print
}

// schema is the schema of an [exec.NAME] table, in the order Settings
// gives it.
var schema = []key{
	{name: "program", set: setProgram, get: func(cmd *Command) (string, bool) { return tomlString(cmd.Program), true }},
	{name: "args", set: func(cmd *Command, v any, _ string) error {
		var err error
		cmd.Args, err = stringList(v)
		return err
	}, get: func(cmd *Command) (string, bool) { return tomlStrings(cmd.Args), true }},
	{name: "allow_args", set: setAllowArgs, get: func(cmd *Command) (string, bool) { return tomlStrings(cmd.AllowArgs), true }},
	{name: "dir", set: setCommandDir, get: func(cmd *Command) (string, bool) { return tomlString(cmd.Dir), cmd.Dir != "" }},
	{name: "timeout", set: func(cmd *Command, v any, _ string) error {
		var err error
		cmd.Timeout, err = DurationValue(v, false)
		return err
	}, get: func(cmd *Command) (string, bool) { return tomlString(cmd.Timeout.String()), true }},
	{name: "grace", set: func(cmd *Command, v any, _ string) error {
		var err error
		cmd.Grace, err = DurationValue(v, false)
		return err
	}, get: func(cmd *Command) (string, bool) { return tomlString(cmd.Grace.String()), true }},
	{name: "max_output", set: func(cmd *Command, v any, _ string) error {
		n, ok := v.(int64)
		switch {
		case !ok:
			return WrongType(v, "an integer (bytes)")
		case n < 1 || n > MaxOutputLimit:
			return fmt.Errorf("%d: want 1 to %d bytes (both streams of a run travel in one outcome message)", n, MaxOutputLimit)
		}
		cmd.MaxOutput = int(n)
		return nil
	}, get: func(cmd *Command) (string, bool) { return strconv.Itoa(cmd.MaxOutput), true }},
	{name: "rerun_safe", set: func(cmd *Command, v any, _ string) error {
		b, ok := v.(bool)
		if !ok {
			return WrongType(v, "a boolean")
		}
		cmd.RerunSafe = b
		return nil
	}, get: func(cmd *Command) (string, bool) { return strconv.FormatBool(cmd.RerunSafe), true }},
	{name: "busy_exit_codes", set: setBusyExitCodes, get: func(cmd *Command) (string, bool) {
		s := make([]string, len(cmd.BusyExitCodes))
		for i, n := range cmd.BusyExitCodes {
			s[i] = strconv.Itoa(n)
		}
		return "[" + strings.Join(s, ", ") + "]", true
	}},
	{name: "lock_file", set: setCommandLockFile, get: func(cmd *Command) (string, bool) {
		return tomlString(cmd.LockFile), cmd.LockFile != ""
	}},
	{name: "env", set: setEnv, get: func(cmd *Command) (string, bool) {
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

// Decode reads the exec allowlist from the [exec.NAME] tables of a config
// file, in the file's order: v is the value of the file's top-level key
// exec as toml.Decode gives it, dir the file's folder (absolute), which
// relative paths in it are taken from, and lines the line of each key
// and table the file sets or opens, by toml.Key.String (a key without a
// line of its own, in an inline table, has its table's). It is strict:
// an unknown key, a value of the wrong type or an invalid one is a
// problem, and every problem is reported, under its key (exec.NAME.KEY)
// and line, in KeyErrors. A program named without a slash is looked up
// in PATH now. Each command returned passes Check.
func Decode(v any, dir string, lines map[string]int) ([]Command, error) {
	problem := func(line int, key toml.Key, format string, args ...any) *KeyError {
		return &KeyError{Key: key, Line: line, Problem: fmt.Sprintf(format, args...)}
	}
	table, ok := v.(map[string]any)
	if !ok {
		return nil, KeyErrors{problem(LineOf(lines, "exec"), toml.Key{"exec"}, "%v: want a table of commands, [exec.NAME]", WrongType(v, "a table"))}
	}
	var cmds []Command
	var errs KeyErrors
	for _, name := range byLine(table, lines, "exec") {
		key := toml.Key{"exec", name}
		line := LineOf(lines, key...)
		raw, ok := table[name].(map[string]any)
		switch {
		case !ok:
			errs = append(errs, problem(line, key, "%v", WrongType(table[name], "a table, [exec."+name+"]")))
			continue
		case !queue.ValidCommandName(name):
			errs = append(errs, problem(line, key, "command name %q: want 1-64 characters of [A-Za-z0-9_.-], starting with a letter or digit", name))
			continue
		}
		cmd, cerrs := decodeCommand(name, raw, lines, dir)
		if len(cerrs) > 0 {
			errs = append(errs, cerrs...)
			continue
		}
		// The command's own check, last: what passed the keys' checks
		// passes it, but the daemon must never run with a command it
		// would refuse.
		if err := cmd.Check(); err != nil {
			errs = append(errs, problem(line, key, "%v", err))
			continue
		}
		cmds = append(cmds, cmd)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cmds, nil
}

// decodeCommand reads one [exec.NAME] table.
func decodeCommand(name string, raw map[string]any, lines map[string]int, dir string) (Command, KeyErrors) {
	cmd := Command{Name: name, Grace: DefaultGrace, MaxOutput: DefaultMaxOutput}
	known := map[string]key{}
	for _, k := range schema {
		known[k.name] = k
	}
	var errs KeyErrors
	for _, kname := range byLine(raw, lines, "exec", name) {
		key := toml.Key{"exec", name, kname}
		line := LineOf(lines, key...)
		k, ok := known[kname]
		if !ok {
			errs = append(errs, &KeyError{Key: key, Line: line, Problem: "unknown key"})
			continue
		}
		if err := k.set(&cmd, raw[kname], dir); err != nil {
			var se *subKeyError
			if errors.As(err, &se) {
				key = append(key, se.key)
				line = LineOf(lines, key...)
			}
			errs = append(errs, &KeyError{Key: key, Line: line, Problem: err.Error()})
		}
	}
	for _, required := range []struct{ key, why string }{
		{"program", `want the program to run: an absolute path, a name looked up in PATH, or a path relative to this file's folder`},
		{"timeout", `want how long a run may take, such as "10m": every command needs a bound`},
	} {
		if _, ok := raw[required.key]; !ok {
			key := toml.Key{"exec", name, required.key}
			errs = append(errs, &KeyError{Key: key, Line: LineOf(lines, "exec", name), Problem: "missing: " + required.why})
		}
	}
	return cmd, errs
}

// setProgram takes an absolute path; a bare name, looked up in PATH now
// (the daemon runs what was found, whatever PATH it runs with); or a
// relative path with a slash, from the config file's folder.
func setProgram(cmd *Command, v any, dir string) error {
	s, ok := v.(string)
	if !ok {
		return WrongType(v, "a string (a path, or a name to look up in PATH)")
	}
	p := s
	switch {
	case s == "":
		return errors.New("empty: want an absolute path, a name to look up in PATH, or a path relative to this file's folder")
	case !strings.Contains(s, "/"):
		found, err := osexec.LookPath(s)
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
func setAllowArgs(cmd *Command, v any, _ string) error {
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
func setCommandDir(cmd *Command, v any, _ string) error {
	s, ok := v.(string)
	if !ok {
		return WrongType(v, "a string (a folder relative to the store)")
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

func setBusyExitCodes(cmd *Command, v any, _ string) error {
	list, ok := v.([]any)
	if !ok {
		return WrongType(v, "an array of integers")
	}
	var codes []int // [] is none, as leaving the key out
	for i, e := range list {
		n, ok := e.(int64)
		switch {
		case !ok:
			return fmt.Errorf("element %d: %v", i, WrongType(e, "an integer"))
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
// once the store is known (CheckLock).
func setCommandLockFile(cmd *Command, v any, dir string) error {
	s, ok := v.(string)
	if !ok {
		return WrongType(v, "a string (a path)")
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

// setEnv takes a table of variables, added to the command's environment
// as KEY=VALUE, sorted by name.
func setEnv(cmd *Command, v any, _ string) error {
	table, ok := v.(map[string]any)
	if !ok {
		return WrongType(v, `a table of strings, such as { LC_ALL = "C" }`)
	}
	names := make([]string, 0, len(table))
	for name := range table {
		names = append(names, name)
	}
	slices.Sort(names)
	env := make([]string, 0, len(names))
	for _, name := range names {
		s, ok := table[name].(string)
		if err := checkEnvName(name); err != nil {
			return &subKeyError{key: name, err: err}
		}
		switch {
		case !ok:
			return &subKeyError{key: name, err: WrongType(table[name], "a string")}
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
		return nil, WrongType(v, "an array of strings")
	}
	var out []string
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("element %d: %v", i, WrongType(e, "a string"))
		}
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("element %d contains a NUL byte", i)
		}
		out = append(out, s)
	}
	return out, nil
}

// DurationValue is a duration written as a string in Go's syntax
// (time.ParseDuration: "500ms", "90s", "1h30m"), as on the command line.
func DurationValue(v any, zeroOK bool) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, WrongType(v, `a duration string such as "90s"`)
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
	line := func(name string) int { return LineOf(lines, append(slices.Clip(parent), name)...) }
	slices.SortFunc(names, func(a, b string) int {
		if la, lb := line(a), line(b); la != lb {
			return la - lb
		}
		return strings.Compare(a, b)
	})
	return names
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

// LineOf is the line of a key, or of the nearest table or key that holds
// it (the keys of an inline table have their table's line); 0 if none.
// LineOf, WrongType and DurationValue are the config file's rules for
// naming where a key is and reading its values: the [exec.NAME] tables
// are decoded here, the rest of the file by the daemon's command line,
// and both say a problem the same way.
func LineOf(lines map[string]int, key ...string) int {
	for n := len(key); n > 0; n-- {
		if line, ok := lines[toml.Key(key[:n]).String()]; ok {
			return line
		}
	}
	return 0
}

// WrongType names the TOML type found and the one wanted.
func WrongType(v any, want string) error {
	var got string
	switch v.(type) {
	case string:
		got = "a string"
	case int64:
		got = "an integer"
	case float64:
		got = "a float"
	case bool:
		got = "a boolean"
	case map[string]any:
		got = "a table"
	case []any, []map[string]any:
		got = "an array"
	default:
		got = "a date or time"
	}
	return fmt.Errorf("wrong type: %s, want %s", got, want)
}
