package embednats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/scribehq/scribe/queue"
)

// ErrQueueFault means the server's JetStream cannot store or deliver jobs
// until it is restarted (see CheckQueue). The error is a *QueueFaultError.
var ErrQueueFault = errors.New("the queue cannot store jobs")

// QueueFaultError is a fault of the server's JetStream that CheckQueue
// could not repair yet.
type QueueFaultError struct {
	// Fault is what nats-server reports: a stream's write error, or
	// JetStream disabled.
	Fault string
	// Waiting is why CheckQueue did not restart JetStream yet (not enough
	// free space, the folder not writable), or why the restart failed.
	Waiting error
}

func (e *QueueFaultError) Error() string {
	msg := "the queue cannot store jobs: " + e.Fault
	if e.Waiting != nil {
		msg += "; the daemon restarts the queue by itself once this is fixed: " + e.Waiting.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrQueueFault) true.
func (e *QueueFaultError) Is(target error) bool { return target == ErrQueueFault }

// SpaceNeeded is the free space CheckQueue wants on the queue's filesystem
// before it restarts JetStream after a fault: room for a few of the
// largest jobs, so that the restarted queue does not fail again at once.
const SpaceNeeded = 4 * (queue.MaxJobBytes + 64<<10)

// faultSettle is how long a fault must last before CheckQueue acts on it.
const faultSettle = 100 * time.Millisecond

// CheckQueue finds and repairs a fault that keeps the server's JetStream
// from storing jobs. nats-server keeps a stream's first write error
// (ENOSPC, EIO) for the stream's lifetime: once the disk has filled up,
// every later publish to it fails, unanswered, even after space is freed;
// and on some errors (EACCES) it disables JetStream altogether. Neither is
// visible to a client. CheckQueue asks the server's health check, and on a
// fault, once the queue's folder has SpaceNeeded free and takes a synced
// write, restarts JetStream with the same configuration: every stream and
// consumer is loaded afresh from disk, without the error.
//
// It returns the fault still present (a *QueueFaultError, nil if none),
// and whether it restarted JetStream: the consumers' deliveries in flight
// are then lost, and a writer must consume afresh. Jobs whose publish was
// acknowledged were written before the acknowledgement and come back from
// disk; an ack whose removal the fault prevented is undone, so its job is
// delivered again (the journal recognises it).
func (s *Server) CheckQueue(ctx context.Context) (restarted bool, err error) {
	fault := s.queueFault()
	if fault == "" {
		return false, nil
	}
	// A stream deleted while the health check lists the streams looks
	// unrecoverable for an instant: act only on a fault that stays.
	select {
	case <-ctx.Done():
	case <-time.After(faultSettle):
	}
	if fault = s.queueFault(); fault == "" {
		return false, nil
	}
	if err := s.probe(); err != nil {
		return false, &QueueFaultError{Fault: fault, Waiting: err}
	}
	if err := ctx.Err(); err != nil {
		return false, &QueueFaultError{Fault: fault, Waiting: err}
	}
	if err := s.restartJetStream(); err != nil {
		return true, &QueueFaultError{Fault: fault, Waiting: fmt.Errorf("restart JetStream: %w", err)}
	}
	if again := s.queueFault(); again != "" {
		return true, &QueueFaultError{Fault: again, Waiting: errors.New("it failed again after a restart")}
	}
	return true, nil
}

// queueFault is what the server's health check finds wrong with
// JetStream or a stream, "" if nothing.
func (s *Server) queueFault() string {
	h := s.ns.Healthz(&server.HealthzOptions{Details: true})
	var faults []string
	for _, e := range h.Errors {
		switch e.Type {
		case server.HealthzErrorJetStream, server.HealthzErrorStream, server.HealthzErrorAccount:
			faults = append(faults, e.Error)
		}
	}
	return strings.Join(faults, "; ")
}

// probe checks that the queue's folder can take new data again: enough
// free space, and a small synced write.
func (s *Server) probe() error {
	dir := s.queueDir()
	if free, err := freeSpace(dir); err == nil && free < SpaceNeeded {
		return fmt.Errorf("%s free on %s, need %s: %w", FormatBytes(free), dir, FormatBytes(SpaceNeeded), syscall.ENOSPC)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("probe %s: %w", dir, err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(make([]byte, 64<<10))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("probe %s: %w", dir, err)
	}
	return nil
}

// restartJetStream stops JetStream, keeping its data, and starts it again
// as Start configured it: the sync policy comes from the server's options,
// and without a limit nats-server sizes the store from the free space
// again, as at start.
func (s *Server) restartJetStream() error {
	s.queueOps.Lock()
	defer s.queueOps.Unlock()
	if s.ns.JetStreamEnabled() {
		if err := s.ns.ShutdownJetStream(); err != nil {
			return fmt.Errorf("shut down: %w", err)
		}
	}
	// The same configuration as at start: a fresh one would fall back to
	// JetStream's two-minute fsync and recompute the storage limit from
	// what is free now, which may be less than the streams reserve.
	// StoreDir is given as at start: the running config's has JetStream's
	// own "jetstream" folder appended, which enabling appends again.
	cfg := *s.jsConfig
	cfg.StoreDir = s.queueDir()
	return s.ns.EnableJetStream(&cfg)
}
