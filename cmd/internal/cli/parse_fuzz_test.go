package cli

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Whatever the command line, Parse neither panics nor reads past what it
// was given: it ends with help, with a usage error of one line that says
// where to look, or with the arguments left (in a strict flag set, what
// follows the flags, as given).
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"--wait 10s put f x", "--wait -- 10s", "--wait=0s put", "--wait 0s put", "-json", "--id=x --json a",
		"--wiat", "---x", "--=", "-h", "a --json -- --id", "--id", "--wait=1s --wait", "-",
	} {
		f.Add(seed, true)
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, line string, strict bool) {
		args := strings.Split(line, " ")
		fs := NewFlagSet("t")
		if strict {
			fs.Strict()
		}
		var w Wait
		fs.WaitVar(&w, "wait", "at most `DUR`")
		fs.String("id", "", "an `ID`")
		fs.JSON("it")
		err := fs.Parse(args)
		switch {
		case errors.Is(err, errHelp):
			return
		case err != nil:
			if ExitCode(err) != ExitUsage || strings.Contains(err.Error(), "\n") || !strings.HasSuffix(err.Error(), "; see scribe t --help") {
				t.Fatalf("Parse(%q): %v (exit %d)", args, err, ExitCode(err))
			}
			return
		}
		if w.Bound < 0 || w.Bound > 0 && !w.On {
			t.Fatalf("Parse(%q): wait %+v", args, w)
		}
		rest := fs.Args()
		if len(rest) > len(args) {
			t.Fatalf("Parse(%q) left more than it was given: %q", args, rest)
		}
		if strict && !slices.Equal(rest, args[len(args)-len(rest):]) {
			t.Fatalf("Parse(%q), strict, left %q: not what follows the flags", args, rest)
		}
	})
}
