//go:build !unix

package client

import "errors"

type startedDaemon struct{ pid int }

func startDaemon(Autostart, string) (*startedDaemon, error) {
	return nil, errors.New("starting a daemon on demand is not supported on this system")
}

func (s *startedDaemon) exited() bool { return true }

func (s *startedDaemon) failed() (int, int64, bool) { return 0, 0, false }

func (s *startedDaemon) release() {}
