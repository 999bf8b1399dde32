package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/scribehq/scribe/cmd/internal/caller"
	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/cmd/internal/config"
	"github.com/scribehq/scribe/cmd/internal/server"
)

// Version is the scribe version, reported by the daemon.
var Version = devVersion

// commands is the table of commands, in the order `scribe --help` lists
// them: dispatch, help, completion and this package's doc comment read
// it.
func commands() []cli.Command {
	return []cli.Command{
		server.Serve(),
		caller.Submit(),
		caller.Status(),
		caller.Wait(),
		caller.Jobs(),
		caller.Lock(),
		caller.Recover(),
		caller.Stop(),
		server.MCP(),
		server.Demo(),
		server.Bench(),
		cli.CompletionCommand(),
		cli.HelpCommand(),
		cli.VersionCommand(),
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal takes the default action: exit at once
	}()
	m := newMain(os.Stdin, os.Stdout, os.Stderr)
	err := m.Run(ctx, os.Args[1:])
	stop()
	os.Exit(m.Exit(err))
}

// newMain is the command line on the streams given.
func newMain(stdin io.Reader, stdout, stderr io.Writer) *cli.Main {
	return &cli.Main{
		Stdin: stdin, Stdout: stdout, Stderr: stderr, Version: Version,
		Commands: commands(), CallerConfig: config.Caller,
	}
}
