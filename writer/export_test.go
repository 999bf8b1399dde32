package writer

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/internal/fault"
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

// ApplyThenDie applies job as a batch of one and lets go of the store as
// a writer SIGKILLed right after answering would: the batch's intent left
// standing, named by the settled mark. Unless marked, it dies a moment
// earlier, with the files on disk but the mark not yet written: the
// outcome stays provisional until a holder redoes the batch.
func ApplyThenDie(store string, job *queue.Job, marked bool) error {
	s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon})
	if err != nil {
		return err
	}
	before := snapshot(queue.Layout{Root: s.store}.Settled())
	if _, err := s.Apply([]Entry{{Job: job}}); err != nil {
		return err
	}
	files := []fileSnapshot{snapshot(journal.Path(s.store)), snapshot(queue.Layout{Root: s.store}.Settled())}
	if !marked {
		files[1] = before
	}
	return dieWith(s, files)
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

// FailSpools makes the next n output spools fail to be made with err, as
// a daemon out of descriptors would see; restore undoes it.
func FailSpools(n int, err error) (restore func()) {
	var mu sync.Mutex
	fault.SpoolFault = func() error {
		mu.Lock()
		defer mu.Unlock()
		if n > 0 {
			n--
			return fmt.Errorf("command output: memfd_create: %w", err)
		}
		return nil
	}
	return func() { fault.SpoolFault = nil }
}

// RecordUnfitted records o in the store's journal as a version that did
// not bound outcomes would have: as it is, however large, written into
// the journal's outcomes bucket and its by_time index under the store
// lock.
func RecordUnfitted(store string, o *queue.Outcome) error {
	s, err := Open(context.Background(), store, Options{Mode: queue.ModeDaemon})
	if err != nil {
		return err
	}
	real := s.Store()
	if err := s.Close(); err != nil {
		return err
	}
	h, err := lock.Acquire(context.Background(), store, lock.Options{})
	if err != nil {
		return err
	}
	defer h.Unlock()
	v, err := queue.EncodeOutcome(o)
	if err != nil {
		return err
	}
	db, err := bolt.Open(journal.Path(real), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("outcomes")).Put([]byte(o.ID), v); err != nil {
			return err
		}
		at := binary.BigEndian.AppendUint64(nil, uint64(o.At.UnixNano()))
		return tx.Bucket([]byte("by_time")).Put(append(at, o.ID...), nil)
	})
}
