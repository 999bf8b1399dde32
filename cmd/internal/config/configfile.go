package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
)

// Bounds of a config file, checked before the TOML decoder sees it. A
// file of the daemon's settings and allowlist is a few KiB (the example
// of every key in docs/config.md is 2), and nests four levels at most
// (exec.NAME.env.VAR). The decoder recurses once per level of nested
// arrays and inline tables, so three million of them grew a 1 GB stack
// and crashed the process; and its work grows with the square of a key's
// depth (a key of 20,000 dotted parts took 4 GB). Within these bounds the
// worst file decodes in a fraction of a second and some tens of MB.
const (
	// maxConfigBytes is the most a config file may hold: 64 KiB.
	maxConfigBytes = 64 << 10
	// maxConfigNesting is how deep arrays and inline tables may nest,
	// and how many dotted parts a key (or a table's name) may have.
	maxConfigNesting = 16
)

// tomlLines are where a TOML document sets its keys and opens its tables,
// by line (from 1), for messages that name them.
type tomlLines struct {
	// keys maps each key and table, by its dotted path
	// (toml.Key.String), to the line where it is first set or opened. A
	// header [a.b] opens a and a.b; a line `x.y = …` under it sets a.b.x
	// and a.b.x.y. The keys of inline tables are not listed (lineOf gives
	// their table's line).
	keys map[string]int
	// arrays maps each array of tables ([[name]]), by its dotted path, to
	// its tables in order: for each, the line of its header (key "") and
	// of each key set in it, by its first part.
	arrays map[string][]map[string]int
}

// scanLines finds where doc sets its keys and opens its tables, reading
// it line by line: values that span lines (arrays, multi-line strings)
// are skipped over, so that their content is never taken for a key.
func scanLines(doc string) tomlLines {
	tl := tomlLines{keys: map[string]int{}, arrays: map[string][]map[string]int{}}
	record := func(line int, path toml.Key) {
		for n := 1; n <= len(path); n++ {
			if k := path[:n].String(); tl.keys[k] == 0 {
				tl.keys[k] = line
			}
		}
	}
	var (
		table toml.Key       // the table the lines are in
		cur   map[string]int // the table of an array of tables they are in, if any
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
			cur = nil
			array := strings.HasPrefix(rest, "[[")
			end := "]"
			if array {
				end = "]]"
			}
			path, after, ok := parseKey(strings.TrimPrefix(strings.TrimPrefix(rest, "["), "["))
			if !ok || !strings.HasPrefix(strings.TrimLeft(after, " \t"), end) {
				continue
			}
			table = path
			record(i+1, table)
			if array {
				cur = map[string]int{"": i + 1}
				tl.arrays[path.String()] = append(tl.arrays[path.String()], cur)
			}
			continue
		}
		path, after, ok := parseKey(rest)
		after = strings.TrimLeft(after, " \t")
		if !ok || !strings.HasPrefix(after, "=") {
			continue
		}
		record(i+1, append(slices.Clip(table), path...))
		if _, set := cur[path[0]]; cur != nil && !set {
			cur[path[0]] = i + 1
		}
		s.scan(after[1:])
	}
	return tl
}

// openConfigFile opens a config file that only this process's user can
// change, as the rest of .scribe, wherever it is (queue.OpenPrivate): a
// regular file, not a symlink, owned by this process's user, writable by
// no one else. The file decides what the daemon runs; whoever can change
// it could take the daemon over. The open neither follows a symlink nor
// blocks on a FIFO or a device. In a store's .scribe the folder is
// checked first, as every entrance checks it.
func openConfigFile(path string) (*os.File, error) {
	if filepath.Base(filepath.Dir(path)) == queue.MetaDir {
		if err := queue.CheckPrivatePath(filepath.Dir(path), true); err != nil {
			return nil, err
		}
	}
	f, err := queue.OpenPrivate(path, os.O_RDONLY, 0)
	var ie *queue.InsecureError
	switch {
	case errors.As(err, &ie):
		ie.What = "config file"
		return nil, ie
	case errors.Is(err, fs.ErrNotExist):
		return nil, cli.Usagef("config %s: no such file", path)
	case err != nil:
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return f, nil
}

// checkBounds refuses content beyond a config file's bounds, naming the
// line where it goes past them: more than maxConfigBytes, or arrays and
// inline tables nested deeper than maxConfigNesting. It looks at no more
// than maxConfigBytes+1 bytes.
func checkBounds(path string, data []byte) Errors {
	var errs Errors
	if len(data) > maxConfigBytes {
		data = data[:maxConfigBytes]
		errs = append(errs, &Error{File: path, Line: 1 + bytes.Count(data, []byte{'\n'}),
			Problem: fmt.Sprintf("the file goes on past %d bytes here; a config file holds at most 64 KiB", maxConfigBytes)})
	}
	if line := nestedTooDeep(data, maxConfigNesting); line > 0 {
		errs = append(errs, &Error{File: path, Line: line,
			Problem: fmt.Sprintf("nested more than %d levels deep (arrays, inline tables, dotted keys); a config file needs 4", maxConfigNesting)})
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	return errs
}

// nestedTooDeep returns the line at which a TOML document first nests
// deeper than limit, or 0 if it never does: arrays and inline tables
// inside each other, or a key or table name of more than limit dotted
// parts. It follows TOML's strings and comments as the decoder's lexer
// does, so that a bracket or a dot in a string counts for nothing and
// none outside one escapes the count: a basic string ends at an unescaped
// quote, a literal one at a quote; a multi-line one ("""…""", '…' thrice)
// at a run of three to five quotes, the last three of which close it; a
// comment at the end of its line. Dots are counted along a run of what a
// dotted key is made of (bare parts, quoted parts, blanks), so the one
// dot of a float or a time counts once. Table headers count as a level
// or two of brackets: far below the limit.
func nestedTooDeep(doc []byte, limit int) int {
	line, depth, dots := 1, 0, 0
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		switch c {
		case '\n':
			line++
		case '#':
			for i+1 < len(doc) && doc[i+1] != '\n' {
				i++
			}
		case '[', '{':
			if depth++; depth > limit {
				return line
			}
		case ']', '}':
			depth = max(depth-1, 0)
		case '"', '\'':
			end, lines := skipString(doc, i)
			i, line = end, line+lines
			continue // a quoted part of a key: the run goes on
		case '.':
			if dots++; dots >= limit { // limit dots make limit+1 parts
				return line
			}
			continue
		}
		if !isKeyByte(c) {
			dots = 0
		}
	}
	return 0
}

// isKeyByte reports whether c may be part of a dotted key other than its
// dots and quoted parts: a bare key's letters, digits, '-' and '_', and
// the blanks allowed around the dots.
func isKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == ' ' || c == '\t'
}

// skipString skips the TOML string that opens at doc[i] (a quote): it
// returns the index of its last byte (or of the document's, if it does
// not end) and how many newlines it spans.
func skipString(doc []byte, i int) (end, lines int) {
	q := doc[i]
	escapes := q == '"'
	if bytes.HasPrefix(doc[i:], []byte{q, q, q}) { // multi-line
		for j := i + 3; j < len(doc); j++ {
			switch c := doc[j]; {
			case c == '\n':
				lines++
			case escapes && c == '\\':
				if j+1 < len(doc) && doc[j+1] == '\n' {
					lines++
				}
				j++
			case c == q:
				n := 1
				for j+n < len(doc) && doc[j+n] == q && n < 5 {
					n++
				}
				if n >= 3 {
					return j + n - 1, lines
				}
				j += n - 1
			}
		}
		return len(doc) - 1, lines
	}
	for j := i + 1; j < len(doc); j++ {
		switch c := doc[j]; {
		case c == '\n':
			return j - 1, 0 // unterminated: the decoder stops here
		case escapes && c == '\\':
			if j+1 < len(doc) && doc[j+1] == '\n' {
				return j, 0
			}
			j++
		case c == q:
			return j, 0
		}
	}
	return len(doc) - 1, 0
}
