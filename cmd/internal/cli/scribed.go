package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
)

// A lean binary (cmd/scribe, what hooks run) links the light commands
// only and hands the others to scribed, the daemon's binary, which links
// them all: it replaces itself with scribed, so the process keeps its PID
// (supervisors, the discovery file and tests know the daemon by it), its
// arguments, environment and standard streams.

// scribedName is the daemon's binary.
const scribedName = "scribed"

// module is scribe's module, whose cmd/scribed a source build builds.
const module = "github.com/scribehq/scribe"

// ErrNoScribed means scribed cannot be found: a lean binary cannot run a
// heavy command or start a daemon without it (exit 69).
var ErrNoScribed = errors.New("scribed, the daemon's binary, is not installed")

// installHint is how to get both binaries.
const installHint = "install both binaries: go install " + module + "/cmd/...@latest"

// execve replaces the process; a variable so that a test can stand in.
var execve = syscall.Exec

// Forward is c's entry in a lean binary's table: the same name, forms and
// help text, for help, completion and the doc list, but run by scribed in
// place of this process (m.Scribed finds it).
func Forward(c Command) Command {
	return Command{
		Name: c.Name, Forms: c.Forms, Help: c.Help, FirstArgs: c.FirstArgs, JSON: c.JSON, Heavy: c.Heavy, Forwarded: true,
		Run: func(_ context.Context, m *Main, args []string) error { return m.handOff(c.Name, args) },
	}
}

// handOff replaces this process with scribed running command name with
// args. It returns only if that fails.
func (m *Main) handOff(name string, args []string) error {
	if m.Scribed == nil {
		return fmt.Errorf("%s: this binary forwards it, but knows no scribed to forward it to", name)
	}
	path, err := m.Scribed(m.Stderr)
	if err != nil {
		return err
	}
	err = execve(path, append([]string{path, name}, args...), os.Environ())
	return Exit(ExitNoDaemon, fmt.Errorf("run %s: %w", path, err))
}

// FindScribed is the path of scribed: beside this binary (its symlinks
// resolved), else on $PATH. A binary built from scribe's source with no
// scribed at hand (go run ./cmd/scribe) builds one into the user's cache
// from the same source, saying so on stderr once, and rebuilds it when
// the source changed. Without one it fails with ErrNoScribed, exit 69,
// and how to install it.
func FindScribed(stderr io.Writer) (string, error) {
	if p, ok := installedScribed(); ok {
		return p, nil
	}
	if p, ok, err := buildScribed(stderr); ok {
		return p, err
	}
	exe, _ := os.Executable()
	return "", Exit(ExitNoDaemon, WithHint(fmt.Errorf("%w: it is neither beside %s nor on $PATH", ErrNoScribed, exe), installHint))
}

// installedScribed is scribed beside this binary (its symlinks resolved),
// else on $PATH: what FindScribed finds without building.
func installedScribed() (string, bool) {
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		if p := filepath.Join(filepath.Dir(exe), scribedName); isExecutable(p) {
			return p, true
		}
	}
	if p, err := exec.LookPath(scribedName); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs, true
		}
	}
	return "", false
}

// isExecutable says whether path is a regular file someone may execute.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// buildScribed builds scribed with go, when this binary was built from
// scribe's source (a devel build of its main module) and go is on $PATH;
// ok is false when it cannot try. The binary is kept under the user's
// cache, named by this build's settings, and go build relinks it only
// when the source changed.
func buildScribed(stderr io.Writer) (path string, ok bool, err error) {
	bi, found := debug.ReadBuildInfo()
	if !found || bi.Main.Path != module || bi.Main.Version != "(devel)" {
		return "", false, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", false, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", false, nil
	}
	sum := sha256.Sum256([]byte(bi.String()))
	path = filepath.Join(cache, "scribe", scribedName+"-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(stderr, "scribe: building scribed into %s (none beside this binary or on $PATH) …\n", path)
	}
	args := []string{"build", "-o", path}
	for _, s := range bi.Settings {
		if s.Key == "-tags" && s.Value != "" {
			args = append(args, "-tags", s.Value)
		}
	}
	cmd := exec.Command(goBin, append(args, module+"/cmd/"+scribedName)...)
	cmd.Dir = sourceDir()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", true, Exit(ExitNoDaemon, WithHint(fmt.Errorf("%w: go build of it failed: %v: %s", ErrNoScribed, err, strings.TrimSpace(out.String())), installHint))
	}
	return path, true, nil
}

// sourceDir is the module folder this binary was built from, known by
// this file's path (absent with -trimpath), else the current folder.
func sourceDir() string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Join(filepath.Dir(file), "..", "..", "..")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
	}
	return ""
}
