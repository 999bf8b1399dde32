package tests

import (
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The packages import one another one way only: cmd → client, writer,
// embednats → queue, sub-packages counting as their folder's, with one
// cross edge declared here: writer/daemon, the daemon as a library, runs
// the embedded queue (embednats); the rest of writer does not. Test code
// may reach further (a client test starts a daemon), but nothing, test or
// not, imports cmd or tests, except that test code may import the shared
// test helpers of tests/testkit. And what hooks link stays lean: client does
// not depend on the daemon, the embedded server or nats.go's micro (the
// daemon's status service), directly or not.
func TestDependenciesPointOneWay(t *testing.T) {
	t.Parallel()
	const mod = "github.com/scribehq/scribe/"
	allowed := map[string][]string{
		"queue":     nil,
		"tests":     nil, // doc.go only: its tests are test code
		"writer":    {"queue"},
		"embednats": {"queue"},
		"client":    {"queue", "writer"},
		"cmd":       {"client", "embednats", "queue", "writer"},
	}
	// Cross edges, from a package to a room it may import besides its
	// room's.
	cross := map[string][]string{
		mod + "writer/daemon": {"embednats"},
	}
	room := func(pkg string) string {
		pkg, _, _ = strings.Cut(pkg, " ") // "pkg [pkg.test]": pkg as its tests compile it
		if !strings.HasPrefix(pkg, mod) {
			return ""
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(pkg, mod), "/")
		// A package's external tests and test main are in its room.
		return strings.TrimSuffix(strings.TrimSuffix(first, ".test"), "_test")
	}
	graph := func(args ...string) map[string][]string {
		out, err := exec.Command("go", append([]string{"list"}, append(args, "-f", `{{.ImportPath}}|{{join .Imports " "}}`, mod+"...")...)...).Output()
		require.NoError(t, err)
		g := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, imports, _ := strings.Cut(line, "|")
			g[pkg] = strings.Fields(imports)
		}
		return g
	}

	rooms := map[string]bool{}
	crossed := map[string]bool{}
	for pkg, imports := range graph() {
		from := room(pkg)
		rooms[from] = true
		for _, imp := range imports {
			to := room(imp)
			switch {
			case to == "" || to == from:
			case slices.Contains(cross[pkg], to):
				crossed[pkg+" → "+to] = true
			default:
				assert.Contains(t, allowed[from], to, "%s imports %s", pkg, imp)
			}
		}
	}
	names := make([]string, 0, len(rooms))
	for r := range rooms {
		names = append(names, r)
	}
	sort.Strings(names)
	assert.Equal(t, []string{"client", "cmd", "embednats", "queue", "tests", "writer"}, names, "the graph is real")
	assert.True(t, crossed[mod+"writer/daemon → embednats"], "the declared cross edge is real: %v", crossed)

	// The graph with tests holds the packages as their tests compile them
	// ("pkg [pkg.test]"), their external tests and test mains; the plain
	// graph above already keeps testkit out of every package's own code.
	kitUsers := 0
	for pkg, imports := range graph("-test") {
		isTest := strings.Contains(pkg, ".test") || strings.HasSuffix(pkg, "_test")
		for _, imp := range imports {
			if imp == mod+"tests/testkit" && isTest {
				kitUsers++
				continue
			}
			if to := room(imp); (to == "cmd" || to == "tests") && room(pkg) != to {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
	assert.Positive(t, kitUsers, "the testkit exception is real")

	out, err := exec.Command("go", "list", "-deps", mod+"client").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, mod+"writer", "the dependency list is real")
	for _, d := range deps {
		for _, banned := range []string{mod + "writer/daemon", mod + "embednats", "github.com/nats-io/nats-server", "github.com/nats-io/nats.go/micro", "github.com/prometheus/client_golang"} {
			assert.False(t, d == banned || strings.HasPrefix(d, banned+"/"), "client depends on %s", d)
		}
	}

	// The lean binary, what hooks run, links the light commands only; the
	// daemon's binary links the rest.
	out, err = exec.Command("go", "list", "-deps", mod+"cmd/scribe").Output()
	require.NoError(t, err)
	deps = strings.Fields(string(out))
	require.Contains(t, deps, mod+"cmd/internal/caller", "the dependency list is real")
	for _, d := range deps {
		for _, banned := range []string{mod + "embednats", mod + "cmd/internal/server", "github.com/nats-io/nats-server",
			"github.com/prometheus", "github.com/modelcontextprotocol", "github.com/google/jsonschema-go"} {
			assert.False(t, d == banned || strings.HasPrefix(d, banned+"/"), "cmd/scribe depends on %s", d)
		}
		assert.NotEqual(t, mod+"writer/daemon", d, "cmd/scribe depends on the daemon (its metricsaddr alone is light)")
	}
}
