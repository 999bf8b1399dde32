package cli

import (
	"context"
	"fmt"
)

// HelpCommand is `scribe help [COMMAND]`: the list of commands, or a
// command's help, on stdout.
func HelpCommand() Command {
	return Command{
		Name:  "help",
		Forms: []Form{{Args: "[COMMAND]", Summary: "the commands, or a command's help"}},
		Run: func(ctx context.Context, m *Main, args []string) error {
			switch {
			case len(args) == 0, len(args) == 1 && (args[0] == "-h" || args[0] == "--help"):
				m.writeUsage(m.Stdout)
				return nil
			case len(args) > 1:
				return Usagef("want at most one COMMAND; see scribe --help")
			}
			c := m.Lookup(args[0])
			if c == nil {
				return m.unknown(args[0])
			}
			return m.run(ctx, c, []string{"--help"}) // "help CMD" is "CMD --help"
		},
	}
}

// VersionCommand is `scribe version`: the version the daemon reports in
// its discovery file and status.
func VersionCommand() Command {
	return Command{
		Name:  "version",
		Forms: []Form{{Summary: "the version (also --version)"}},
		Setup: func(m *Main, fs *FlagSet) func(context.Context, []string) error {
			return func(_ context.Context, args []string) error {
				if len(args) > 0 {
					return Usagef("version takes no arguments, got %q", args)
				}
				fmt.Fprintln(m.Stdout, m.Version)
				return nil
			}
		},
	}
}
