// Package metricsaddr is the syntax of the daemon's metrics address, apart
// from the daemon so that what only reads a config file (a hook checking a
// store's settings) need not link the daemon, its queue server and
// Prometheus.
package metricsaddr

import (
	"fmt"
	"net"
	"strings"
)

// UnixPrefix marks a metrics address that is a Unix socket's path.
const UnixPrefix = "unix:"

// Check checks a metrics address: "" (no metrics), HOST:PORT, :PORT or
// unix:PATH. It reads it only: the daemon binds it when it starts.
func Check(s string) error {
	if s == "" {
		return nil
	}
	if path, ok := strings.CutPrefix(s, UnixPrefix); ok {
		if path == "" {
			return fmt.Errorf("%q: want unix:PATH, a socket's path", s)
		}
		return nil
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q: want \"HOST:PORT\", \":PORT\" or \"unix:PATH\", or \"\" for none", s)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	return nil
}
