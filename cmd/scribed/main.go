package main

import (
	"io"
	"os"
	"slices"

	"github.com/scribehq/scribe/cmd/internal/caller"
	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/cmd/internal/config"
	"github.com/scribehq/scribe/cmd/internal/server"
)

// commands is the whole table of commands, in the order `scribe --help`
// lists them; cmd/scribe's is the same, its heavy entries forwarded here.
func commands() []cli.Command {
	return slices.Concat([]cli.Command{server.Serve()}, caller.Commands(), []cli.Command{
		server.MCP(),
		server.Demo(),
		server.Bench(),
		cli.CompletionCommand(),
		cli.HelpCommand(),
		cli.VersionCommand(),
	})
}

func main() { os.Exit(newMain(os.Stdin, os.Stdout, os.Stderr).Main(os.Args[1:])) }

// newMain is the command line on the streams given. It runs every
// command itself, and autostarts its own serve.
func newMain(stdin io.Reader, stdout, stderr io.Writer) *cli.Main {
	return &cli.Main{
		Stdin: stdin, Stdout: stdout, Stderr: stderr, Version: Version,
		Commands: commands(), CallerConfig: config.Caller,
	}
}
