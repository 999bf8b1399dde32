package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// Shell completion: scripts for bash, zsh and fish, generated from the
// table of commands and their flags.

// completeKey is the annotation of a flag whose values completion offers.
const completeKey = "scribe_complete"

// Special values of completeKey: the flag takes a folder, or a file.
const (
	completeDir  = ":dir"
	completeFile = ":file"
)

// complete tells completion what flag name's value may be: completeDir,
// completeFile, or the words it may be.
func (fs *FlagSet) complete(name string, values ...string) {
	_ = fs.SetAnnotation(name, completeKey, values)
}

// CompleteDir tells completion that flag name takes a folder.
func (fs *FlagSet) CompleteDir(name string) { fs.complete(name, completeDir) }

// CompleteFile tells completion that flag name takes a file.
func (fs *FlagSet) CompleteFile(name string) { fs.complete(name, completeFile) }

// CompleteWords tells completion the words flag name's value may be.
func (fs *FlagSet) CompleteWords(name string, words ...string) { fs.complete(name, words...) }

// compFlag is a flag as completion sees it.
type compFlag struct {
	name  string
	value bool     // it takes a value (an optional one is given with =)
	words []string // what its value may be, completeDir or completeFile
	about string
}

// compCommand is a command as completion sees it.
type compCommand struct {
	name, about string
	flags       []compFlag
	args        []string // what its first argument may be
}

// completion is the table as completion sees it.
func (m *Main) completion() []compCommand {
	var names []string
	for _, c := range m.Commands {
		names = append(names, c.Name)
	}
	var out []compCommand
	for i := range m.Commands {
		c := &m.Commands[i]
		cc := compCommand{name: c.Name, about: c.Summary(), args: c.FirstArgs}
		if c.Name == "help" {
			cc.args = names
		}
		if fs := m.Flags(c); fs != nil {
			fs.VisitAll(func(f *pflag.Flag) {
				if f.Hidden {
					return
				}
				placeholder, usage := pflag.UnquoteUsage(f)
				cf := compFlag{name: f.Name, value: placeholder != "" && f.NoOptDefVal == "", words: f.Annotations[completeKey], about: about(usage)}
				cc.flags = append(cc.flags, cf)
			})
			cc.flags = append(cc.flags, compFlag{name: "help", about: "show this help and exit"})
		}
		out = append(out, cc)
	}
	return out
}

// about is the start of a flag's usage, short enough to show beside it:
// up to its first clause's end.
func about(usage string) string {
	s := usage
	for _, sep := range []string{"; ", " (", ": "} {
		s, _, _ = strings.Cut(s, sep)
	}
	if r := []rune(s); len(r) > 60 {
		s = string(r[:59]) + "…"
	}
	return s
}

// CompletionCommand is `scribe completion SHELL`: the completion script
// of bash, zsh or fish, on stdout.
func CompletionCommand() Command {
	return Command{
		Name:      "completion",
		Forms:     []Form{{Args: "bash|zsh|fish", Summary: "print the shell completion script"}},
		FirstArgs: []string{"bash", "zsh", "fish"},
		Help: `Prints the completion script of a shell, for its commands, flags and the values of some
(--store a folder, --route its three words). To load it:
  bash: source <(scribe completion bash)       (or save it in ~/.local/share/bash-completion/completions/scribe)
  zsh:  source <(scribe completion zsh)        (after compinit; or save it as _scribe in a folder of $fpath)
  fish: scribe completion fish | source        (or save it in ~/.config/fish/completions/scribe.fish)`,
		Setup: func(m *Main, fs *FlagSet) func(context.Context, []string) error {
			return func(_ context.Context, args []string) error {
				if len(args) != 1 {
					return Usagef("want one shell: bash, zsh or fish")
				}
				switch args[0] {
				case "bash":
					writeBash(m.Stdout, m.completion())
				case "zsh":
					writeZsh(m.Stdout, m.completion())
				case "fish":
					writeFish(m.Stdout, m.completion())
				default:
					return Usagef("unknown shell %q: want bash, zsh or fish", args[0])
				}
				return nil
			}
		},
	}
}

// shQuote quotes s in single quotes, for sh, bash, zsh and fish alike
// (fish: a backslash in single quotes escapes only ' and \).
func shQuote(s string, fish bool) string {
	if fish {
		s = strings.ReplaceAll(s, `\`, `\\`)
		return "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// valueWords are the words a flag's value may be, without the special
// ones, and which special one it is.
func valueWords(f compFlag) (words []string, kind string) {
	for _, w := range f.words {
		if w == completeDir || w == completeFile {
			kind = w
			continue
		}
		words = append(words, w)
	}
	return words, kind
}

func writeBash(w io.Writer, cmds []compCommand) {
	var names []string
	for _, c := range cmds {
		names = append(names, c.name)
	}
	fmt.Fprintf(w, `# bash completion for scribe: source <(scribe completion bash)
_scribe() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    COMPREPLY=()
    if (( COMP_CWORD == 1 )); then
        COMPREPLY=($(compgen -W %s -- "$cur"))
        return
    fi
    local cmd=${COMP_WORDS[1]} flags= valued= args= i nargs=0
    case $cmd in
`, shQuote(strings.Join(names, " "), false))
	for _, c := range cmds {
		var flags, valued []string
		for _, f := range c.flags {
			flags = append(flags, "--"+f.name)
			if f.value {
				valued = append(valued, "--"+f.name)
			}
		}
		fmt.Fprintf(w, "        %s) flags=%s valued=%s args=%s ;;\n", c.name,
			shQuote(strings.Join(flags, " "), false), shQuote(strings.Join(valued, " "), false), shQuote(strings.Join(c.args, " "), false))
	}
	fmt.Fprint(w, `    esac
    # A flag's value, after the flag or after --flag=.
    local flag=$prev value=$cur
    if [[ $cur == --*=* ]]; then
        flag=${cur%%=*} value=${cur#*=}
    elif [[ $cur == = && $prev == --* ]]; then
        value=
    elif [[ $prev == = ]] && (( COMP_CWORD > 2 )); then
        flag=${COMP_WORDS[COMP_CWORD-2]}
    fi
    case "$cmd $flag" in
`)
	for _, c := range cmds {
		for _, f := range c.flags {
			words, kind := valueWords(f)
			switch {
			case kind == completeDir:
				fmt.Fprintf(w, "        %s) COMPREPLY=($(compgen -d -- \"$value\")); return ;;\n", shQuote(c.name+" --"+f.name, false))
			case kind == completeFile:
				fmt.Fprintf(w, "        %s) COMPREPLY=($(compgen -f -- \"$value\")); return ;;\n", shQuote(c.name+" --"+f.name, false))
			case len(words) > 0:
				fmt.Fprintf(w, "        %s) COMPREPLY=($(compgen -W %s -- \"$value\")); return ;;\n", shQuote(c.name+" --"+f.name, false), shQuote(strings.Join(words, " "), false))
			}
		}
	}
	fmt.Fprint(w, `    esac
    if [[ $cur == --*=* || " $valued " == *" $prev "* ]]; then
        return # a value completion cannot guess
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
        return
    fi
    # The first argument, if the command names its words.
    for (( i = 2; i < COMP_CWORD; i++ )); do
        case ${COMP_WORDS[i]} in
            --) nargs=1 ;;
            -*) [[ " $valued " == *" ${COMP_WORDS[i]} "* ]] && (( i++ )) ;;
            *) (( nargs++ )) ;;
        esac
    done
    if (( nargs == 0 )) && [[ -n $args ]]; then
        COMPREPLY=($(compgen -W "$args" -- "$cur"))
    fi
}
complete -o default -F _scribe scribe
`)
}

func writeZsh(w io.Writer, cmds []compCommand) {
	fmt.Fprint(w, `#compdef scribe
# zsh completion for scribe: source <(scribe completion zsh), after compinit
_scribe() {
    local cur=${words[CURRENT]} prev=${words[CURRENT-1]} cmd=${words[2]}
    local -a names descs flags fdescs valued args
    if (( CURRENT == 2 )); then
`)
	var names, descs []string
	for _, c := range cmds {
		names = append(names, shQuote(c.name, false))
		descs = append(descs, shQuote(fmt.Sprintf("%-10s -- %s", c.name, c.about), false))
	}
	fmt.Fprintf(w, "        names=(%s)\n        descs=(%s)\n", strings.Join(names, " "), strings.Join(descs, " "))
	fmt.Fprint(w, `        compadd -l -d descs -- $names
        return
    fi
    case $cmd in
`)
	for _, c := range cmds {
		var flags, fdescs, valued, args []string
		for _, f := range c.flags {
			flags = append(flags, shQuote("--"+f.name, false))
			fdescs = append(fdescs, shQuote(fmt.Sprintf("--%-14s -- %s", f.name, f.about), false))
			if f.value {
				valued = append(valued, shQuote("--"+f.name, false))
			}
		}
		for _, a := range c.args {
			args = append(args, shQuote(a, false))
		}
		fmt.Fprintf(w, "        %s) flags=(%s) fdescs=(%s) valued=(%s) args=(%s) ;;\n", c.name,
			strings.Join(flags, " "), strings.Join(fdescs, " "), strings.Join(valued, " "), strings.Join(args, " "))
	}
	fmt.Fprint(w, `    esac
    local flag=$prev
    if [[ $cur == --*=* ]]; then
        flag=${cur%%=*}
        compset -P '*='
    fi
    case "$cmd $flag" in
`)
	for _, c := range cmds {
		for _, f := range c.flags {
			words, kind := valueWords(f)
			switch {
			case kind == completeDir:
				fmt.Fprintf(w, "        %s) _directories; return ;;\n", shQuote(c.name+" --"+f.name, false))
			case kind == completeFile:
				fmt.Fprintf(w, "        %s) _files; return ;;\n", shQuote(c.name+" --"+f.name, false))
			case len(words) > 0:
				var q []string
				for _, word := range words {
					q = append(q, shQuote(word, false))
				}
				fmt.Fprintf(w, "        %s) compadd -- %s; return ;;\n", shQuote(c.name+" --"+f.name, false), strings.Join(q, " "))
			}
		}
	}
	fmt.Fprint(w, `    esac
    if [[ $cur == --*=* ]] || (( ${valued[(Ie)$prev]} )); then
        return 1 # a value completion cannot guess
    fi
    if [[ $cur == -* ]]; then
        compadd -l -d fdescs -- $flags
        return
    fi
    local i nargs=0
    for (( i = 3; i < CURRENT; i++ )); do
        case ${words[i]} in
            --) nargs=1 ;;
            -*) (( ${valued[(Ie)${words[i]}]} )) && (( i++ )) ;;
            *) (( nargs++ )) ;;
        esac
    done
    if (( nargs == 0 && ${#args} )); then
        compadd -- $args
        return
    fi
    _files
}
if (( $+functions[compdef] )); then
    compdef _scribe scribe
fi
`)
}

func writeFish(w io.Writer, cmds []compCommand) {
	var names []string
	for _, c := range cmds {
		names = append(names, c.name)
	}
	sort.Strings(names)
	fmt.Fprint(w, "# fish completion for scribe: scribe completion fish | source\ncomplete -c scribe -e\n")
	all := strings.Join(names, " ")
	for _, c := range cmds {
		fmt.Fprintf(w, "complete -c scribe -f -n %s -a %s -d %s\n", shQuote("not __fish_seen_subcommand_from "+all, true), shQuote(c.name, true), shQuote(c.about, true))
	}
	for _, c := range cmds {
		cond := shQuote("__fish_seen_subcommand_from "+c.name, true)
		if len(c.args) > 0 {
			fmt.Fprintf(w, "complete -c scribe -f -n %s -a %s\n", cond, shQuote(strings.Join(c.args, " "), true))
		}
		for _, f := range c.flags {
			words, kind := valueWords(f)
			line := fmt.Sprintf("complete -c scribe -n %s -l %s", cond, f.name)
			switch {
			case kind == completeDir:
				line += " -x -a '(__fish_complete_directories)'"
			case kind == completeFile:
				line += " -r -F"
			case len(words) > 0:
				line += " -x -a " + shQuote(strings.Join(words, " "), true)
			case f.value:
				line += " -x"
			}
			fmt.Fprintln(w, line+" -d "+shQuote(f.about, true))
		}
	}
}
