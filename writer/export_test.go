package writer

import (
	"context"
	"os"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// WithLock runs fn holding the store lock (fail-fast) and releases it on
// every path out of fn: return, error or panic.
func WithLock(store string, o lock.Options, fn func(*lock.Hold) error) error {
	l, err := lock.Acquire(context.Background(), store, o)
	if err != nil {
		return err
	}
	defer l.Unlock()
	return fn(l)
}

// fileSnapshot is a file's content at an instant, or its absence.
type fileSnapshot struct {
	path string
	data []byte // nil: it did not exist
}

func snapshot(path string) fileSnapshot {
	b, err := os.ReadFile(path)
	if err != nil {
		return fileSnapshot{path: path}
	}
	return fileSnapshot{path: path, data: b}
}

// restore puts the file back as it was: in place, keeping its inode, as
// the file a killed process left.
func (f fileSnapshot) restore() error {
	if f.data == nil {
		if err := os.Remove(f.path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	return os.WriteFile(f.path, f.data, 0o600)
}

// dieWith closes s and puts files back as they were before: what a
// SIGKILL at that instant leaves, since closing drops what the process
// knew (a settled intent) and a killed process drops nothing on disk.
func dieWith(s *Session, files []fileSnapshot) error {
	if err := s.Close(); err != nil {
		return err
	}
	for _, f := range files {
		if err := f.restore(); err != nil {
			return err
		}
	}
	return nil
}

// CommitUnder records a one-job batch of outcome id in the store's journal
// under fence, as a writer's session does, and returns its error.
func CommitUnder(store string, fence journal.Fence, id string) error {
	s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon, Fence: fence})
	if err != nil {
		return err
	}
	defer s.Close()
	job := &queue.Job{V: queue.Version, ID: id, Store: s.StoreID(), Ops: []queue.Op{{Kind: queue.OpAppend, Path: "log", Data: []byte(id + "\n")}}}
	_, err = s.Apply([]Entry{{Job: job}})
	return err
}

// writeIntent records a batch as Apply does before it writes any file,
// with in.Outcomes as its outcomes, and settles nothing: what a holder
// that dies right after its journal write leaves.
func writeIntent(j *journal.Journal, in *journal.Intent) error {
	_, err := j.Record(in, in.Outcomes, nil, in.LastSeq)
	return err
}
