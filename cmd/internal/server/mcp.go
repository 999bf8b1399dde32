package server

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/client/mcp"
	"github.com/scribehq/scribe/cmd/internal/cli"
)

// MCP is `scribe mcp`: the store's writes as Model Context Protocol tools
// over stdio (docs/mcp.md). It turns its flags into an mcp.Config.
func MCP() cli.Command {
	return cli.Command{
		Name:  "mcp",
		Forms: []cli.Form{{Args: "--store DIR [flags]", Summary: "serve the store's writes as MCP tools"}},
		Help: "Serve the store's writes as Model Context Protocol tools over stdio, for an agent host\n" +
			"(docs/mcp.md). stdout carries the protocol only; logs go to stderr. The server exits\n" +
			"when stdin closes, once it has answered the requests read before.",
		Heavy: true,
		Setup: func(m *cli.Main, fs *cli.FlagSet) func(context.Context, []string) error {
			store := fs.Store()
			route := fs.Route()
			lockFile := fs.LockFile()
			wait := fs.Duration("wait", mcp.DefaultWait, "how long a tool call waits for its outcome, `DUR` (finding or starting the daemon, "+
				"and a direct write's wait for the store lock, included); after that the outcome is unknown and the result names the job ID to look up")
			auto := fs.Autostart()
			logLevel := fs.String("log-level", "info", "log `LEVEL` on stderr: debug, info, warn or error")
			fs.CompleteWords("log-level", "debug", "info", "warn", "error")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return cli.Usagef("mcp takes no arguments, got %q", args)
				}
				if err := cli.RequireStore(*store); err != nil {
					return err
				}
				if *wait <= 0 {
					return cli.Usagef("--wait %s: want a positive duration", *wait)
				}
				if err := auto.Check(); err != nil {
					return err
				}
				r, err := client.ParseRoute(*route)
				if err != nil {
					return cli.Usagef("%v", err)
				}
				if err := auto.CheckRoute(r); err != nil {
					return err
				}
				log, err := m.Logger(*logLevel)
				if err != nil {
					return err
				}
				given, configured, err := lockFile.Settle(m, *store)
				if err != nil {
					return err
				}
				cfg := mcp.Config{Store: *store, Route: r, LockFile: given, ConfigLockFile: configured, Wait: *wait, Version: m.Version, Logger: log}
				if r != client.RouteDirect { // the direct route starts no daemon
					// Settled once, by submit's rules: flag, environment, store config.
					if cfg.Autostart, err = auto.Settle(m, *store); err != nil {
						return err
					}
				}
				if log.Enabled(ctx, slog.LevelDebug) { // the SDK logs each session at info: noise below debug
					cfg.SDKLogger = log
				}
				srv, err := mcp.New(cfg)
				if err != nil {
					return err
				}
				// The host may close stdout while a call runs: the answer
				// then fails (EPIPE) instead of killing the server.
				pipe := make(chan os.Signal, 1)
				signal.Notify(pipe, syscall.SIGPIPE)
				defer signal.Stop(pipe)
				log.Info("serving MCP on stdio", "store", cfg.Store, "route", r, "autostart", cfg.Autostart != nil, "wait", *wait)
				// The streams are Main's, so that nothing but the protocol
				// reaches stdout.
				if err := srv.Serve(ctx, m.Stdin, m.Stdout); err != nil {
					if ctx.Err() != nil { // SIGINT or SIGTERM: a clean stop too
						log.Info("stopping", "cause", context.Cause(ctx))
						return nil
					}
					return err
				}
				log.Info("stdin closed, exiting")
				return nil
			}
		},
	}
}
