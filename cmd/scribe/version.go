package main

import "github.com/scribehq/scribe/cmd/internal/cli"

// Version is the scribe version, reported by the daemon: set with
// -ldflags "-X main.Version=…", which sets scribed's too when both are
// built at once, else the module version go install built.
var Version = cli.DevVersion

func init() { Version = cli.BuildVersion(Version) }
