package cli

import (
	"runtime/debug"
	"strings"
)

// DevVersion is the version of a build that says nothing better: not set
// with -ldflags "-X main.Version=…", and not built from a module version
// (go install github.com/scribehq/scribe/cmd/...@v1.2.3).
const DevVersion = "0.1.0-dev"

// BuildVersion is the version a binary reports, given the one linked in
// (its main.Version): that one if the linker set it, else the main
// module's version from the build info. scribe and scribed both report
// it, so that one -X main.Version sets both.
func BuildVersion(linked string) string { return buildVersion(linked, debug.ReadBuildInfo) }

func buildVersion(linked string, info func() (*debug.BuildInfo, bool)) string {
	if linked != DevVersion {
		return linked
	}
	bi, ok := info()
	if !ok || bi.Main.Version == "" || bi.Main.Version == "(devel)" {
		return linked
	}
	return strings.TrimPrefix(bi.Main.Version, "v")
}
