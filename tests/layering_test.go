package tests

import (
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The packages import one another one way only (DESIGN.md, Packages):
// cmd → client, writer, embednats → queue, sub-packages counting as their
// folder's. Test code may reach further (a client test starts a server),
// but nothing, test or not, imports cmd or tests.
func TestDependenciesPointOneWay(t *testing.T) {
	const mod = "github.com/scribehq/scribe/"
	allowed := map[string][]string{
		"queue":     nil,
		"tests":     nil, // doc.go only: its tests are test code
		"writer":    {"queue"},
		"embednats": {"queue"},
		"client":    {"queue", "writer"},
		"cmd":       {"client", "embednats", "queue", "writer"},
	}
	room := func(pkg string) string {
		if !strings.HasPrefix(pkg, mod) {
			return ""
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(pkg, mod), "/")
		// A package's external tests and test main are in its room.
		return strings.TrimSuffix(strings.TrimSuffix(first, ".test"), "_test")
	}
	graph := func(args ...string) map[string][]string {
		out, err := exec.Command("go", append([]string{"list"}, append(args, "-f", `{{.ImportPath}} {{join .Imports " "}}`, mod+"...")...)...).Output()
		require.NoError(t, err)
		g := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fields := strings.Fields(line)
			g[fields[0]] = fields[1:]
		}
		return g
	}

	rooms := map[string]bool{}
	for pkg, imports := range graph() {
		from := room(pkg)
		rooms[from] = true
		for _, imp := range imports {
			if to := room(imp); to != "" && to != from {
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

	for pkg, imports := range graph("-test") {
		for _, imp := range imports {
			if to := room(imp); (to == "cmd" || to == "tests") && room(pkg) != to {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
}
