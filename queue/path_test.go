package queue_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/scribehq/scribe/queue"
)

func TestCheckPath(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		wantErr string // "" means accepted; otherwise a part of the message
	}{
		{"file", "a.txt", ""},
		{"nested", "docs/wiki/page.md", ""},
		{"dotfile", ".gitignore", ""},
		{"dots in name", "a..b/..c/c..", ""},
		{"spaces and unicode", "notes/été 2024/ü.md", ""},
		{"scribe-like names", ".scribe2/x", ""},
		{"scribe as a later segment", "a/.scribe/x", ""},
		{"scribe file prefix", ".scribe-notes", ""},
		{"tmp suffix inside a name", "a.scribe-tmp.txt", ""},
		{"max length", strings.Repeat("a/", (queue.MaxPathLen-1)/2) + "a", ""},
		{"max segment", strings.Repeat("s", queue.MaxNameLen), ""},

		{"empty", "", "empty path"},
		{"absolute", "/etc/passwd", "absolute"},
		{"root", "/", "absolute"},
		{"dotdot", "..", `".."`},
		{"dotdot prefix", "../x", `".."`},
		{"dotdot inside", "a/../../x", `".."`},
		{"dotdot last", "a/..", `".."`},
		{"dot", ".", `"."`},
		{"dot segment", "a/./b", `"."`},
		{"empty segment", "a//b", "empty segment"},
		{"trailing slash", "a/", "empty segment"},
		{"backslash", `a\b`, "backslash"},
		{"windows dotdot", `..\x`, "backslash"},
		{"NUL", "a\x00b", "control"},
		{"newline", "a\nb", "control"},
		{"tab", "a\tb", "control"},
		{"escape", "a\x1b[31m", "control"},
		{"DEL", "a\x7f", "control"},
		{"too long", strings.Repeat("a/", queue.MaxPathLen/2) + "a", "limit"},
		{"segment too long", strings.Repeat("s", 256), "limit 243"},
		{"nested segment too long", "a/" + strings.Repeat("s", 256) + "/b", "limit 243"},
		{"temp name would be too long", strings.Repeat("s", 244), "limit 243"},
		{"longest filesystem name", "a/" + strings.Repeat("s", 255), "limit 243"},
		{"invalid UTF-8", "a/\xff\xfe", "UTF-8"},
		{"meta dir", ".scribe", ".scribe/"},
		{"meta file", ".scribe/x", ".scribe/"},
		{"meta journal", ".scribe/journal.db", ".scribe/"},
		{"meta upper case", ".SCRIBE/x", ".scribe/"},
		{"meta mixed case", ".Scribe/lock", ".scribe/"},
		{"writer temp file", ".a.txt.scribe-tmp", "scribe-tmp"},
		{"writer temp file nested", "d/.a.txt.scribe-tmp", "scribe-tmp"},
		{"temp suffix alone", ".scribe-tmp", "scribe-tmp"},
		{"temp suffix upper case", "x.SCRIBE-TMP", "scribe-tmp"},
		{"temp suffix on a folder", "d.scribe-tmp/x", "scribe-tmp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := queue.CheckPath(tt.path)
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			if assert.Error(t, err) {
				assert.Contains(t, err.Error(), tt.wantErr)
			}
		})
	}
}

// A person's "./notes.txt" (and "././notes.txt") is "notes.txt"; anything
// else with a "." segment stays for CheckPath to refuse, with a hint.
func TestTrimDotSlash(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		valid    bool // CheckPath accepts the result
	}{
		{"./notes.txt", "notes.txt", true},
		{"./a/b", "a/b", true},
		{"notes.txt", "notes.txt", true},
		{".notes", ".notes", true},
		{"a/./b", "a/./b", false},
		{"././x", "x", true},
		{"./", "", false},
		{".", ".", false},
		{"./../x", "../x", false},
		{".//x", "/x", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got := queue.TrimDotSlash(tc.in)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, got, queue.TrimDotSlash(got), "trimming again changes nothing")
			err := queue.CheckPath(got)
			if tc.valid {
				assert.NoError(t, err)
				return
			}
			if assert.Error(t, err) && got != "" {
				assert.Contains(t, err.Error(), "use a path relative to the store")
			}
		})
	}
}
