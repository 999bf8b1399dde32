package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/cmd/internal/cli"

	"github.com/scribehq/scribe/queue"
)

// nestedTooDeep counts what the TOML decoder nests, and nothing that is
// only text in a string or a comment.
func TestNestedTooDeep(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	dotted := func(parts int) string { return strings.TrimSuffix(strings.Repeat("a.", parts), ".") }
	tests := []struct {
		name string
		doc  string
		line int // 0: within the bounds
	}{
		{"flat", "batch = 10\nsync = \"1s\"\n", 0},
		{"arrays at the limit", "a = " + deep(maxConfigNesting) + "\n", 0},
		{"arrays past the limit", "# one\n\na = " + deep(maxConfigNesting+1) + "\n", 3},
		{"inline tables past the limit", "a = " + strings.Repeat("{b=", maxConfigNesting+1) + "1" + strings.Repeat("}", maxConfigNesting+1) + "\n", 1},
		{"brackets in a basic string", `a = "` + strings.Repeat("[", 100) + `"` + "\n", 0},
		{"escaped quote in a basic string", `a = "\"` + strings.Repeat("[", 100) + `"` + "\n", 0},
		{"brackets in a literal string", `a = '` + strings.Repeat("[", 100) + `'` + "\n", 0},
		{"brackets in a comment", "a = 1 # " + strings.Repeat("[", 100) + "\n", 0},
		{"brackets in a multi-line string", "a = \"\"\"\n" + strings.Repeat("[", 100) + "\n\"\"\"\nb = 1\n", 0},
		{"multi-line string closed by a run of five quotes", "a = [\"\"\"x\"\"\"\"\", " + deep(maxConfigNesting+1) + "]\n", 1},
		{"multi-line literal closed by a run of four quotes", "a = ['''x'''', " + deep(maxConfigNesting+1) + "]\n", 1},
		{"escaped quotes before the closing run", "a = \"\"\"\\\"\"\"\"\" \n" + "b = " + deep(maxConfigNesting+1) + "\n", 2},
		{"line counted through a multi-line string", "a = '''\n\n\n'''\nb = " + deep(maxConfigNesting+1) + "\n", 5},
		{"line-ending backslash", "a = \"\"\"x\\\n\"\"\"\nb = " + deep(maxConfigNesting+1) + "\n", 3},
		{"dotted key at the limit", dotted(maxConfigNesting) + " = 1\n", 0},
		{"dotted key past the limit", dotted(maxConfigNesting+1) + " = 1\n", 1},
		{"dotted key with blanks and quoted parts", strings.Repeat(`"x" . `, maxConfigNesting) + "b = 1\n", 1},
		{"table name past the limit", "[" + dotted(maxConfigNesting+1) + "]\n", 1},
		{"floats and times are not keys", "a = [" + strings.Repeat("1.5, ", 100) + "2.5]\nt = 1979-05-27T07:32:00.999-07:00\n", 0},
		{"dots in strings", `a = "` + strings.Repeat(".", 100) + `"` + "\n", 0},
		{"unterminated string ends at its line", "a = \"" + strings.Repeat("[", 100) + "\nb = " + deep(maxConfigNesting+1) + "\n", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.line, nestedTooDeep([]byte(tt.doc), maxConfigNesting))
		})
	}
}

// A file past a bound is refused before the decoder sees it, naming the
// line, whatever else is wrong with it.
func TestDecodeConfigBounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	for _, tt := range []struct {
		name    string
		doc     string
		problem []string // FILE:LINE: PROBLEM lines, in order
	}{
		{"three million nested arrays", "a = " + strings.Repeat("[", 3_000_000), []string{
			path + ":1: the file goes on past 65536 bytes here; a config file holds at most 64 KiB",
			path + ":1: nested more than 16 levels deep (arrays, inline tables, dotted keys); a config file needs 4",
		}},
		{"too large", strings.Repeat("# padding\n", maxConfigBytes/10+1), []string{
			path + ":6554: the file goes on past 65536 bytes here; a config file holds at most 64 KiB",
		}},
		{"at the size bound", strings.Repeat("#", maxConfigBytes-1) + "\n", nil},
		{"too deep on line 2", "batch = 1\nbogus = " + strings.Repeat("[", 17) + strings.Repeat("]", 17) + "\n", []string{
			path + ":2: nested more than 16 levels deep (arrays, inline tables, dotted keys); a config file needs 4",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(path, []byte(tt.doc))
			if tt.problem == nil {
				require.NoError(t, err)
				return
			}
			var errs Errors
			require.ErrorAs(t, err, &errs)
			assert.Equal(t, strings.Join(tt.problem, "\n"), errs.Error())
			assert.Equal(t, cli.ExitUsage, cli.ExitCode(ReportErrors(new(strings.Builder), err)))
		})
	}
}

// Read reads a regular file only: a FIFO, a folder, a device or a
// symlink to one is refused at once, without blocking and without reading
// it, with the one error of .scribe's rules.
func TestReadConfigNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	folder := filepath.Join(dir, "folder.toml")
	require.NoError(t, os.Mkdir(folder, 0o700))
	zero := filepath.Join(dir, "zero.toml")
	require.NoError(t, os.Symlink("/dev/zero", zero))
	cases := map[string]struct{ path, problem string }{
		"FIFO":                {fifo, "is not a regular file but a FIFO"},
		"folder":              {folder, "is not a regular file but a folder"},
		"symlink to a device": {zero, "is a symlink"},
	}
	if os.Geteuid() == 0 { // mknod needs root
		dev := filepath.Join(dir, "dev.toml")
		require.NoError(t, syscall.Mknod(dev, syscall.S_IFCHR|0o600, int(1<<8|5))) // /dev/zero's 1:5
		cases["device"] = struct{ path, problem string }{dev, "is not a regular file but a character device"}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := Read(c.path); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second): // the FIFO's open used to block for ever
				t.Fatal("Read blocked")
			}
			require.Error(t, err)
			var ie *queue.InsecureError
			require.True(t, errors.As(err, &ie), "%T: %v", err, err)
			assert.Equal(t, c.path, ie.Path)
			assert.Contains(t, err.Error(), "refusing config file "+c.path)
			assert.Contains(t, err.Error(), c.problem)
			assert.Equal(t, cli.ExitRejected, cli.ExitCode(err))
		})
	}
}

// A caller reads only its keys of a file: the rest is serve's to check.
func TestReadConfigOnlyCallerKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	require.NoError(t, os.WriteFile(path, []byte("autostart = true\nexit_idle = \"2m\"\nbatch = -1\n[exec.x]\nprogram = \"/nonexistent\"\n"), 0o600))
	c, err := Read(path, "autostart", "exit_idle")
	require.NoError(t, err)
	assert.True(t, *c.Autostart)
	assert.Equal(t, 2*time.Minute, *c.ExitIdle)
	assert.Nil(t, c.Batch)

	_, err = Read(path)
	var errs Errors
	require.ErrorAs(t, err, &errs)
	assert.Len(t, errs, 3, "%v", errs) // batch, and the command's timeout and program
}
