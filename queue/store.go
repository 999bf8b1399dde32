package queue

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
)

// ResolveStore returns the canonical path of a store folder: absolute, with
// symlinks resolved. It fails if the folder does not exist.
func ResolveStore(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("store %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("store %s: %w", dir, err)
	}
	return real, nil
}

// StoreID is the first 16 hex digits of SHA-256 of a store's canonical
// path (see ResolveStore).
func StoreID(realPath string) string {
	sum := sha256.Sum256([]byte(realPath))
	return hex.EncodeToString(sum[:])[:16]
}

// JobsSubject is the subject normal jobs for a store are published on.
func JobsSubject(storeID string) string { return "scribe." + storeID + ".jobs" }

// HighJobsSubject is the subject high-priority jobs for a store are
// published on: the writer consumes it apart from JobsSubject, so that
// a high job is seen however many normal jobs are queued ahead of it.
func HighJobsSubject(storeID string) string { return JobsSubject(storeID) + ".high" }

// SubjectFor is the subject a job of priority p is published on.
func SubjectFor(storeID string, p Priority) string {
	if p == PriorityHigh {
		return HighJobsSubject(storeID)
	}
	return JobsSubject(storeID)
}

// OutcomeSubject is the subject a job's outcome is published on.
func OutcomeSubject(storeID, jobID string) string {
	return "scribe." + storeID + ".outcomes." + jobID
}

// StatusSubject is the subject of the daemon's status service for a store:
// a request with an empty body returns a StatusReport, one whose body is a
// job ID returns a Lookup.
func StatusSubject(storeID string) string { return "scribe." + storeID + ".status" }

// CancelSubject is the subject of the daemon's cancel service for a
// store: a request whose body is a CancelRequest is answered with a
// CancelAnswer. Whoever may submit to the store may cancel its jobs.
func CancelSubject(storeID string) string { return "scribe." + storeID + ".cancel" }

// StreamName is the JetStream stream holding a store's queued jobs.
func StreamName(storeID string) string { return streamPrefix + storeID }

const streamPrefix = "SCRIBE_"

// StreamStoreID returns the store ID a stream name was made from by
// StreamName, and false if the name is not a scribe stream's.
func StreamStoreID(name string) (string, bool) {
	id, ok := strings.CutPrefix(name, streamPrefix)
	if !ok || len(id) != 16 {
		return "", false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", false
		}
	}
	return id, true
}

// ConsumerName and HighConsumerName are the durable pull consumers of a
// store's writer: of its normal jobs, and of its high ones.
const (
	ConsumerName     = "writer"
	HighConsumerName = "writer-high"
)
