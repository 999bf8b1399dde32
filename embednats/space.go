package embednats

import (
	"fmt"
	"syscall"
)

// JetStreamShare is the share of the free disk space that nats-server lets
// JetStream reserve when, as here, no store limit is configured: it takes
// 75% of what is free on the queue's filesystem when JetStream starts,
// plus 75% of what the queue already holds.
const JetStreamShare = 0.75

// Space is the disk space of a store's queue, as JetStream accounts for
// it. A file stream reserves its byte limit (the queue's MaxBytes) up
// front: creating one fails if Reserved plus that limit exceeds Limit.
type Space struct {
	// Dir is the queue's folder, <store>/.scribe/jetstream.
	Dir string
	// Free is the space free now on Dir's filesystem for the daemon's
	// user; -1 if unknown.
	Free int64
	// Limit is what JetStream lets all streams reserve together, fixed
	// when JetStream started (JetStreamShare); 0 while it is stopped.
	Limit int64
	// Reserved is what the streams reserve now: the sum of their byte
	// limits.
	Reserved int64
}

// Space returns the queue's disk space now.
func (s *Server) Space() Space {
	sp := Space{Dir: s.queueDir(), Free: -1}
	if free, err := freeSpace(sp.Dir); err == nil {
		sp.Free = free
	}
	if cfg := s.ns.JetStreamConfig(); cfg != nil {
		sp.Limit = cfg.MaxStore
	}
	if _, reserved, err := s.ns.JetStreamReservedResources(); err == nil {
		sp.Reserved = reserved
	}
	return sp
}

// queueDir is the folder the server's JetStream keeps the queue in.
func (s *Server) queueDir() string {
	return s.dataDir
}

// freeSpace is the space free on dir's filesystem for an unprivileged
// user.
func freeSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(uint64(st.Bavail) * uint64(st.Bsize)), nil
}

// FormatBytes renders a size for people: "512 B", "1.5 MiB", "1.0 PiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit || m <= -unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
