package main

import (
	"path/filepath"
	"strings"

	"github.com/scribehq/scribe/writer/daemon"
)

// unixPrefix marks a metrics address that is a Unix socket's path.
const unixPrefix = "unix:"

// setMetricsAddr is the config file's metrics_addr: checked, and a
// relative unix:PATH taken from the file's folder, as paths in it are.
func setMetricsAddr(c *Config, v any, dir string) error {
	s, ok := v.(string)
	if !ok {
		return wrongType(v, "a string")
	}
	if err := daemon.CheckMetricsAddr(s); err != nil {
		return err
	}
	if path, ok := strings.CutPrefix(s, unixPrefix); ok && !filepath.IsAbs(path) {
		s = unixPrefix + filepath.Join(dir, path)
	}
	c.MetricsAddr = &s
	return nil
}
