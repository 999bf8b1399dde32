package writer

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
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
	s, err := OpenSession(store, SessionOptions{Mode: queue.ModeDaemon})
	if err != nil {
		return err
	}
	if _, err := s.Apply([]Entry{{Job: job}}); err != nil {
		return err
	}
	j := s.st.journal
	j.settled.Store(nil) // forgotten with the process
	if !marked {
		if err := os.Remove(markPath(j.db.Path())); err != nil {
			return err
		}
	}
	return s.Close()
}

// PauseRenewal stops a claim's renewals without releasing it, as a
// paused or partitioned holder's stop.
func (c *Claim) PauseRenewal() {
	close(c.stop)
	<-c.done
}

// RenewNow makes one renewal attempt now, as a resumed holder's next one;
// it returns whether the claim is lost.
func (c *Claim) RenewNow() bool { return c.renewOnce(time.Second) }

// CommitUnder records a one-job batch of outcome id in the store's journal
// under fence, as a writer's session does, and returns its error.
func CommitUnder(store string, fence Fence, id string) error {
	s, err := OpenSession(store, SessionOptions{Mode: queue.ModeDaemon, Fence: fence})
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
	orig := makeSpoolFile
	makeSpoolFile = func(dir string) (*os.File, error) {
		mu.Lock()
		defer mu.Unlock()
		if n > 0 {
			n--
			return nil, fmt.Errorf("command output: memfd_create: %w", err)
		}
		return orig(dir)
	}
	return func() { makeSpoolFile = orig }
}

// RecordUnfitted records o in the store's journal as a version that did
// not bound outcomes would have: as it is, however large.
func RecordUnfitted(store string, o *queue.Outcome) error {
	s, err := OpenSession(store, SessionOptions{Mode: queue.ModeDaemon})
	if err != nil {
		return err
	}
	defer s.Close()
	v, err := queue.EncodeOutcome(o)
	if err != nil {
		return err
	}
	return s.st.journal.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketOutcomes).Put([]byte(o.ID), v); err != nil {
			return err
		}
		return tx.Bucket(bucketByTime).Put(timeKey(o.At, o.ID), nil)
	})
}

// ResourceFault is resourceFault.
var ResourceFault = resourceFault
