package journal

import (
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
)

// Run is an exec run in progress: written before its command starts,
// replaced by the outcomes when it ends. Found by a later holder (of
// another epoch), it means the writer died, or lost the store, while the
// command ran.
type Run struct {
	Epoch     uint64    `json:"epoch"`
	Command   string    `json:"command"`
	RerunSafe bool      `json:"rerun_safe"`
	Started   time.Time `json:"started"`
	// Outcomes are the run's jobs' outcomes as prepared: the job that
	// runs first, then those that joined it.
	Outcomes []*queue.Outcome `json:"outcomes"`
	LastSeq  uint64           `json:"last_seq"`
}

// StartRun records the run about to start.
func (j *Journal) StartRun(r *Run) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return j.db.Update(func(tx *bolt.Tx) error {
		if err := j.checkFence(tx); err != nil {
			return err
		}
		return tx.Bucket(bucketIntent).Put(keyRunning, b)
	})
}

// Running returns the run in progress, or nil.
func (j *Journal) Running() (*Run, error) {
	var r *Run
	err := j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIntent)
		if b == nil {
			return nil
		}
		if v := b.Get(keyRunning); v != nil {
			r = new(Run)
			return json.Unmarshal(v, r)
		}
		return nil
	})
	return r, err
}

// EndRun drops the run record and, in the same transaction, records the
// run's outcomes (none when the run does not count: deferred, or to be
// run again).
func (j *Journal) EndRun(outs []*queue.Outcome, lastSeq uint64) error {
	return j.decided(outs, nil, lastSeq, j.db.Update(func(tx *bolt.Tx) error {
		if len(outs) > 0 {
			if err := j.checkFence(tx); err != nil {
				return err
			}
			if err := recordOutcomes(tx, outs, lastSeq); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketIntent).Delete(keyRunning)
	}))
}
