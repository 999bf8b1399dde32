package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/pflag"
)

// FlagSet is a command's flags, on spf13/pflag: GNU style (--flag,
// --flag=value, --flag value, -h for help). Flags may follow arguments, up
// to "--", unless the command parses strictly (Strict).
type FlagSet struct {
	*pflag.FlagSet
	cmd    string // "scribe NAME", for messages
	strict bool
	// bounds are the Wait flags, by name: their value may be the next
	// word (Parse).
	bounds map[string]*Wait
}

// errHelp is what Parse returns when help was asked for (-h, --help).
var errHelp = errors.New("help requested")

// NewFlagSet returns the flag set of the command name. It prints nothing:
// Parse's errors carry their message, and help is the command's to print.
func NewFlagSet(name string) *FlagSet {
	pfs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	pfs.SetOutput(io.Discard)
	pfs.Usage = func() {}
	return &FlagSet{FlagSet: pfs, cmd: "scribe " + name}
}

// Strict ends the flags at the first argument, as well as at "--": for a
// command whose arguments may start with "-" (submit's DATA) or are
// passed on as they are (lock's CMD, submit's exec ARGS).
func (fs *FlagSet) Strict() {
	fs.strict = true
	fs.SetInterspersed(false)
}

// Wait is the value of a --wait flag: off, on without bound (a bare
// --wait), or on with a bound (--wait=DUR, or --wait DUR).
type Wait struct {
	On    bool
	Bound time.Duration
}

// waitValue is a Wait as a flag's value.
type waitValue struct{ w *Wait }

func (v waitValue) Type() string { return "wait" }

func (v waitValue) String() string {
	switch {
	case v.w == nil || !v.w.On:
		return "false"
	case v.w.Bound == 0:
		return "true"
	}
	return v.w.Bound.String()
}

func (v waitValue) Set(s string) error {
	if b, err := strconv.ParseBool(s); err == nil {
		v.w.On, v.w.Bound = b, 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return errors.New("want true, false or a positive duration")
	}
	v.w.On, v.w.Bound = true, d
	return nil
}

// WaitVar adds a flag name whose value is optional: bare, it is on without
// bound; with =DUR, or DUR as the next word, it is bounded by DUR. The
// next word is taken only in a strict flag set and when it reads as a
// duration (no OP and no sensible command does): "lock --wait -- 10s" runs
// a command named 10s.
func (fs *FlagSet) WaitVar(w *Wait, name, usage string) {
	f := fs.VarPF(waitValue{w}, name, "", usage)
	f.NoOptDefVal = "true"
	if fs.bounds == nil {
		fs.bounds = map[string]*Wait{}
	}
	fs.bounds[name] = w
}

// BoundVar is WaitVar for a wait that must be bounded: it is spelt
// --name DUR in help, and a bare --name leaves w on with no Bound, for
// the command to refuse with its reason.
func (fs *FlagSet) BoundVar(w *Wait, name, usage string) {
	fs.WaitVar(w, name, usage)
	_ = fs.SetAnnotation(name, boundKey, []string{"true"})
}

// Parse parses args. Help asked for is errHelp; a bad flag is a usage
// error of one line that says where to look (see usageError).
func (fs *FlagSet) Parse(args []string) error {
	for {
		err := fs.FlagSet.Parse(args)
		if errors.Is(err, pflag.ErrHelp) {
			return errHelp
		}
		if err != nil {
			return fs.usageError(err)
		}
		if !fs.strict {
			return nil
		}
		// Strictly, what is left is a suffix of args: see whether a bare
		// Wait flag came last before it, and takes a duration from it.
		rest := fs.FlagSet.Args()
		n := len(args) - len(rest)
		if n == 0 || len(rest) == 0 {
			return nil
		}
		name, ok := strings.CutPrefix(args[n-1], "--")
		w := fs.bounds[name]
		if !ok || w == nil {
			return nil // the flags ended at "--" or at an argument
		}
		d, err := time.ParseDuration(rest[0])
		if err != nil {
			return nil // not a duration: the first argument
		}
		if d <= 0 {
			return Usagef("--%s %s: want a positive duration; see %s --help", name, shown(rest[0]), fs.cmd)
		}
		w.On, w.Bound = true, d
		args = rest[1:]
	}
}

// Args are the arguments left after the flags.
func (fs *FlagSet) Args() []string { return fs.FlagSet.Args() }

// usageError turns pflag's error into one line that says what is wrong
// in the command line's words and where to look: "unknown flag --wiat
// (did you mean --wait?); see scribe submit --help".
func (fs *FlagSet) usageError(err error) error {
	msg := err.Error()
	var (
		unknown  *pflag.NotExistError
		needs    *pflag.ValueRequiredError
		invalid  *pflag.InvalidValueError
		badShape *pflag.InvalidSyntaxError
	)
	switch {
	case errors.As(err, &unknown):
		name := unknown.GetSpecifiedName()
		if short := unknown.GetSpecifiedShortnames(); short != "" {
			long, _, _ := strings.Cut(short, "=")
			msg = "unknown flag " + shown("-"+long)
			if fs.Lookup(long) != nil {
				msg += ": a long flag takes two dashes, --" + long
			}
			break
		}
		msg = "unknown flag " + shown("--"+name)
		if near := fs.nearest(name); near != "" {
			msg += " (did you mean --" + near + "?)"
		}
	case errors.As(err, &needs):
		msg = fmt.Sprintf("flag %s needs a value", shown("--"+needs.GetSpecifiedName()))
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		msg = fmt.Sprintf("--%s %q: %s", f.Name, invalid.GetValue(), wantFor(f, errors.Unwrap(invalid)))
	case errors.As(err, &badShape):
		msg = "bad flag " + shown(badShape.GetSpecifiedFlag())
	}
	return Usagef("%s; see %s --help", msg, fs.cmd)
}

// shown is a word of the command line as a message shows it: quoted if
// it holds a blank or a character that cannot be seen, so that the
// message stays one line that says what was typed.
func shown(word string) string {
	if word == "" || strings.IndexFunc(word, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.IsSpace(r) }) >= 0 {
		return strconv.Quote(word)
	}
	return word
}

// wantFor says what a flag's value should be, for a value it refused.
func wantFor(f *pflag.Flag, cause error) string {
	switch f.Value.Type() {
	case "duration":
		return "want a duration such as 10s or 1m30s"
	case "int", "int64", "uint", "uint64":
		return "want a whole number"
	case "bool":
		return "want true or false"
	}
	if cause == nil {
		return "not a valid value"
	}
	return cause.Error()
}

// nearest is the flag whose name is closest to name, within two edits,
// or "".
func (fs *FlagSet) nearest(name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *pflag.Flag) {
		if d := distance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

// distance is the edit distance of a and b (insertions, deletions,
// substitutions and swaps of two neighbours).
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// helpWidth is where flag descriptions are wrapped.
const helpWidth = 100

// WriteUsages writes the flags' help: each flag with its placeholder,
// then its description, indented and wrapped; -h last.
func (fs *FlagSet) WriteUsages(w io.Writer) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		fmt.Fprintf(w, "  %s\n", spelling(f))
		_, usage := pflag.UnquoteUsage(f)
		// The default's value; where the usage says where the default
		// comes from (an environment variable), the value it has now.
		if def := f.DefValue; !isZero(def) {
			if f.Value.Type() == "string" {
				def = strconv.Quote(def)
			}
			if strings.Contains(usage, "(default ") {
				usage += fmt.Sprintf(" (now %s)", def)
			} else {
				usage += fmt.Sprintf(" (default %s)", def)
			}
		}
		writeWrapped(w, usage, "      ", helpWidth)
	})
	fmt.Fprintf(w, "  -h, --help\n      show this help and exit\n")
}

// placeholderKey is the annotation of a flag's placeholder, when it is
// not the word of its usage in back quotes.
const placeholderKey = "scribe_placeholder"

// boundKey marks a Wait flag whose value help shows as required (BoundVar).
const boundKey = "scribe_bound"

// SetPlaceholder makes ph flag name's placeholder in help.
func (fs *FlagSet) SetPlaceholder(name, ph string) {
	_ = fs.SetAnnotation(name, placeholderKey, []string{ph})
}

// spelling is how help writes a flag: --name, --name PLACEHOLDER, or
// --name[=PLACEHOLDER] for a value that may be left out. The placeholder
// is the one set (SetPlaceholder), else the word of the usage in back
// quotes, else the value's type.
func spelling(f *pflag.Flag) string {
	name, _ := pflag.UnquoteUsage(f)
	if ph := f.Annotations[placeholderKey]; len(ph) == 1 {
		name = ph[0]
	}
	switch {
	case name == "":
		return "--" + f.Name
	case f.NoOptDefVal != "" && f.Annotations[boundKey] == nil:
		return "--" + f.Name + "[=" + name + "]"
	}
	return "--" + f.Name + " " + name
}

// isZero reports whether def is a flag's zero value, not worth showing.
func isZero(def string) bool {
	switch def {
	case "", "0", "0s", "false", "[]":
		return true
	}
	return false
}

// writeWrapped writes text's words in lines of at most width columns,
// each started by indent.
func writeWrapped(w io.Writer, text, indent string, width int) {
	line := indent
	for _, word := range strings.Fields(text) {
		if line != indent && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > width {
			fmt.Fprintln(w, line)
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += word
	}
	if line != indent {
		fmt.Fprintln(w, line)
	}
}
