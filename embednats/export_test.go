package embednats

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// lateConns hands the client its end of the first few in-process
// connections late, as a goroutine not run for a while would have it.
type lateConns struct {
	ns    *server.Server
	late  time.Duration
	first int32
	made  *atomic.Int32
}

func (l lateConns) InProcessConn() (net.Conn, error) {
	c, err := l.ns.InProcessConn()
	if l.made.Add(1) <= l.first {
		time.Sleep(l.late) // the fault: the server's 50 ms wait for the ClientHello passes meanwhile
	}
	return c, err
}

// DeliverInProcessLate makes the first n in-process connections of the
// test reach their client late by d, and returns how many were made.
// Tests that call it must not run in parallel.
func DeliverInProcessLate(t testing.TB, n int, d time.Duration) *atomic.Int32 {
	made := new(atomic.Int32)
	saved := inProcessConns
	inProcessConns = func(ns *server.Server) nats.InProcessConnProvider {
		return lateConns{ns: ns, late: d, first: int32(n), made: made}
	}
	t.Cleanup(func() { inProcessConns = saved })
	return made
}
