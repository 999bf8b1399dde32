package config

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/exec"
	"github.com/scribehq/scribe/writer/lock"
)

// decodeExec reads the [exec.NAME] tables, the exec allowlist, into
// c.Commands (exec.Decode, which owns every rule about them), and
// records the lines of their keys in c.Lines. Its problems are
// Errors of c's file, under their keys and lines.
func decodeExec(c *File, v any, lines map[string]int, dir string) Errors {
	cmds, err := exec.Decode(v, dir, lines)
	var kerrs exec.KeyErrors
	switch {
	case errors.As(err, &kerrs):
		errs := make(Errors, len(kerrs))
		for i, e := range kerrs {
			errs[i] = &Error{File: c.Path, Line: e.Line, Key: e.Key.String(), Problem: e.Problem}
		}
		return errs
	case err != nil:
		return Errors{{File: c.Path, Line: exec.LineOf(lines, "exec"), Key: "exec", Problem: err.Error()}}
	}
	c.Commands = cmds
	table, _ := v.(map[string]any)
	known := exec.Keys()
	for _, cmd := range cmds {
		key := toml.Key{"exec", cmd.Name}
		c.Lines[key.String()] = exec.LineOf(lines, key...)
		raw, _ := table[cmd.Name].(map[string]any)
		for name := range raw {
			if slices.Contains(known, name) {
				k := toml.Key{"exec", cmd.Name, name}
				c.Lines[k.String()] = exec.LineOf(lines, k...)
			}
		}
	}
	return nil
}

// CheckCommandDirs refuses a command whose dir leads outside the store
// whose real path is root, or into its .scribe folder, through a symlink
// (queue.StoreDir; the lexical rules are Decode's): each of its runs would
// be rejected. A dir not made yet is no problem here: a run finds it or
// not. The problems are Errors, under exec.NAME.dir.
func (c *File) CheckCommandDirs(root string) error {
	if c == nil {
		return nil
	}
	var errs Errors
	for _, cmd := range c.Commands {
		if _, err := queue.StoreDir(root, cmd.Dir); errors.Is(err, queue.ErrDirEscapes) {
			key := toml.Key{"exec", cmd.Name, "dir"}.String()
			errs = append(errs, &Error{File: c.Path, Line: c.Lines[key], Key: key, Problem: err.Error()})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// CheckCommandLocks refuses a command whose own lock file is the store
// lock, storeLock, or lies in the store's .scribe folder, meta (skipped
// when ""), as exec.Command.CheckLock decides. The problems are
// Errors, under exec.NAME.lock_file.
func (c *File) CheckCommandLocks(storeLock, meta string) error {
	if c == nil {
		return nil
	}
	var errs Errors
	for _, cmd := range c.Commands {
		if err := cmd.CheckLock(storeLock, meta); err != nil {
			key := toml.Key{"exec", cmd.Name, "lock_file"}.String()
			errs = append(errs, &Error{File: c.Path, Line: c.Lines[key], Key: key, Problem: err.Error()})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// StoreLockPaths is the store lock that serve would take, and the store's
// .scribe folder, for CheckCommandLocks: lockFile (--lock-file or the
// file's lock_file) if set, else the store's default. Unknown parts (no
// store, or one that does not resolve: serve reports it) are "".
func StoreLockPaths(store, lockFile string) (storeLock, meta string) {
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
func printCommands(w io.Writer, cfg *File) {
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
		for _, s := range cmd.Settings() {
			fmt.Fprintf(w, "%-40s # %s\n", s.Key+" = "+s.Value, from(toml.Key{"exec", cmd.Name, s.Key}))
		}
	}
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
func boolKey(name, flagName string, field func(*File) **bool) configKey {
	return configKey{
		name: name, flag: flagName,
		set: func(c *File, v any, _ string) error {
			b, ok := v.(bool)
			if !ok {
				return exec.WrongType(v, "a boolean (true or false)")
			}
			*field(c) = &b
			return nil
		},
		get: func(c *File) (string, bool) {
			if p := *field(c); p != nil {
				return strconv.FormatBool(*p), true
			}
			return "", false
		},
	}
}
