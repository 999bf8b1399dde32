package config

import (
	"path/filepath"
	"strings"

	"github.com/scribehq/scribe/writer/daemon/metricsaddr"
	"github.com/scribehq/scribe/writer/exec"
)

// setMetricsAddr is the config file's metrics_addr: checked, and a
// relative unix:PATH taken from the file's folder, as paths in it are.
func setMetricsAddr(c *File, v any, dir string) error {
	s, ok := v.(string)
	if !ok {
		return exec.WrongType(v, "a string")
	}
	if err := metricsaddr.Check(s); err != nil {
		return err
	}
	if path, ok := strings.CutPrefix(s, metricsaddr.UnixPrefix); ok && !filepath.IsAbs(path) {
		s = metricsaddr.UnixPrefix + filepath.Join(dir, path)
	}
	c.MetricsAddr = &s
	return nil
}
