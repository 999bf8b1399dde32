package main

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
)

// jsonFailure is what a command asked for JSON prints on stdout when it
// fails before printing anything else: a bad flag, a missing store, no
// daemon, an I/O error. The exit code says the same as without --json.
type jsonFailure struct {
	Error string `json:"error"`
	Hint  string `json:"hint,omitempty"`
}

// guardJSON runs a command that takes --json so that, with --json among
// args, stdout holds valid JSON whatever happens: if run fails without
// having written to stdout, guardJSON prints a jsonFailure there. run gets
// a Main whose Stdout records writes and whose Stderr is also kept, for
// the flag package's messages (parse reports them on stderr only).
func (m *Main) guardJSON(args []string, run func(m *Main) error) error {
	if !jsonAsked(args) {
		return run(m)
	}
	out := &recordingWriter{w: m.Stdout}
	var stderr bytes.Buffer
	gm := *m
	gm.Stdout, gm.Stderr = out, io.MultiWriter(m.Stderr, &stderr)
	err := run(&gm)
	if err == nil || out.wrote {
		return err
	}
	f := jsonFailure{Error: err.Error(), Hint: errHint(err)}
	var ex *exitError
	if errors.As(err, &ex) && ex.err == nil {
		if ex.code == exitOK {
			return err // -h: help was asked for, on stdout
		}
		// A bad flag: the flag package said why on stderr.
		f.Error, _, _ = strings.Cut(strings.TrimSpace(stderr.String()), "\n")
		if f.Error == "" {
			f.Error = err.Error()
		}
	}
	_ = writeJSON(m.Stdout, f)
	return err
}

// jsonAsked reports whether args ask for JSON output: --json (or -json,
// --json=true...) before any "--".
func jsonAsked(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		if !hasVal {
			return true
		}
		b, err := strconv.ParseBool(val)
		return err != nil || b // a bad value is a usage error: answer in JSON
	}
	return false
}

// recordingWriter records whether anything was written through it.
type recordingWriter struct {
	w     io.Writer
	wrote bool
}

func (r *recordingWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		r.wrote = true
	}
	return r.w.Write(p)
}
