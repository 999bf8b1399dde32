package main

import (
	"io"
	"os"
	"slices"

	"github.com/scribehq/scribe/cmd/internal/caller"
	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/cmd/internal/config"
	_ "github.com/scribehq/scribe/cmd/scribe/internal/oneproc" // one processor, from early in the start
)

// commands is the table of commands, in the order `scribe --help` lists
// them: dispatch, help, completion and this package's doc comment read
// it. It is scribed's, with the heavy commands (and completion, which
// knows their flags) forwarded to scribed: their names and forms here
// are theirs in cmd/internal/server, which this binary does not link.
func commands() []cli.Command {
	serve := cli.Forward(cli.Command{
		Name: "serve",
		Forms: []cli.Form{
			{Args: "--store DIR [flags]", Summary: "run the daemon for a store"},
			{Args: "--store DIR --nats-url URL [flags]", Summary: "… its queue on a NATS cluster"},
			{Args: "--nats-config FILE [--store DIR]", Summary: "run a NATS cluster node (serving DIR through it)"},
		},
		Heavy: true,
	})
	return slices.Concat([]cli.Command{serve}, caller.Commands(), []cli.Command{
		cli.Forward(cli.Command{
			Name:  "mcp",
			Forms: []cli.Form{{Args: "--store DIR [flags]", Summary: "serve the store's writes as MCP tools"}},
			Heavy: true,
		}),
		cli.Forward(cli.Command{
			Name:  "demo",
			Forms: []cli.Form{{Args: "[--workers N] [--jobs N] [--keep]", Summary: "show the queue at work"}},
			Heavy: true,
		}),
		cli.Forward(cli.Command{
			Name:  "bench",
			Forms: []cli.Form{{Args: "[--producers 1,8,32] [--svg FILE]", Summary: "measure scribe against flock, side by side"}},
			Heavy: true,
		}),
		cli.Forward(cli.CompletionCommand()),
		cli.HelpCommand(),
		cli.VersionCommand(),
	})
}

func main() {
	os.Exit(newMain(os.Stdin, os.Stdout, os.Stderr).Main(os.Args[1:]))
}

// newMain is the command line on the streams given.
func newMain(stdin io.Reader, stdout, stderr io.Writer) *cli.Main {
	return &cli.Main{
		Stdin: stdin, Stdout: stdout, Stderr: stderr, Version: Version,
		Commands: commands(), CallerConfig: config.Caller, Scribed: cli.FindScribed,
	}
}
