package main

import (
	"runtime/debug"
	"strings"
)

// devVersion is Version in a build that says nothing better: not set
// with -ldflags "-X main.Version=…", and not built from a module version
// (go install github.com/scribehq/scribe/cmd/scribe@v1.2.3).
const devVersion = "0.1.0-dev"

func init() { Version = buildVersion(Version, debug.ReadBuildInfo) }

// buildVersion is the version to report: the linker's if it set one,
// else the main module's version from the build info, else linked.
func buildVersion(linked string, info func() (*debug.BuildInfo, bool)) string {
	if linked != devVersion {
		return linked
	}
	bi, ok := info()
	if !ok || bi.Main.Version == "" || bi.Main.Version == "(devel)" {
		return linked
	}
	return strings.TrimPrefix(bi.Main.Version, "v")
}
