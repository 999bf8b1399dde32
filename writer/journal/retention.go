package journal

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"time"

	"github.com/scribehq/scribe/queue"
	bolt "go.etcd.io/bbolt"
)

// DefaultRetention is how long the journal keeps outcomes by default.
const DefaultRetention = 7 * 24 * time.Hour

// PruneEvery is how often, at most, MaybePrune prunes a journal, across
// all the processes that write it.
const PruneEvery = time.Hour

// MaybePrune prunes (Prune) the outcomes older than retention whose
// stream sequence is at most maxSeq, if the journal was not pruned in
// the last PruneEvery by any process, so that the journal stays bounded
// under continuous load. retention 0 means the one it was last pruned
// with, or DefaultRetention: a direct writer prunes with the daemon's.
// It returns how many outcomes it removed and with what retention; a
// prune not due removes none.
func (j *Journal) MaybePrune(maxSeq uint64, retention time.Duration) (int, time.Duration, error) {
	last, recorded, err := j.PruneState()
	if err != nil || time.Since(last) < PruneEvery {
		return 0, retention, err
	}
	if retention == 0 {
		retention = cmp.Or(recorded, DefaultRetention)
	}
	n, err := j.Prune(time.Now().Add(-retention), maxSeq, retention)
	return n, retention, err
}

// pruneLimit bounds the outcomes one Prune removes, so that a prune is
// one short transaction; the next one carries on.
const pruneLimit = 10_000

// Prune removes outcomes recorded before cutoff whose stream sequence is
// at most maxSeq (at most pruneLimit of them), and dead letters likewise.
// maxSeq keeps what the queue could still redeliver: a job whose outcome
// is gone would be applied again. Direct writes have sequence 0. Prune
// records when it ran, the retention it used, and, if it removed any, the
// cutoff, so that a look-up of a pruned ID can say so.
func (j *Journal) Prune(cutoff time.Time, maxSeq uint64, retention time.Duration) (int, error) {
	n := 0
	err := j.db.Update(func(tx *bolt.Tx) error {
		idx, outs, pending := tx.Bucket(bucketByTime), tx.Bucket(bucketOutcomes), tx.Bucket(bucketPending)
		t, err := readTally(tx)
		if err != nil {
			return err
		}
		limit := putUint(uint64(cutoff.UnixNano()))
		var drop [][]byte
		c := idx.Cursor()
		for k, _ := c.First(); k != nil && bytes.Compare(k[:8], limit) < 0 && len(drop) < pruneLimit; k, _ = c.Next() {
			var o struct {
				Seq    uint64       `json:"seq"`
				Status queue.Status `json:"status"`
			}
			v := outs.Get(k[8:])
			if v != nil && json.Unmarshal(v, &o) == nil && o.Seq > maxSeq {
				continue // the queue may still hand it back
			}
			if pending.Get(k[8:]) != nil {
				continue // the standing intent's: a redo or Abandon reads it
			}
			if v != nil {
				t.add(o.Status, -1)
			}
			drop = append(drop, bytes.Clone(k))
		}
		if err := t.write(tx); err != nil {
			return err
		}
		for _, k := range drop {
			if err := outs.Delete(k[8:]); err != nil {
				return err
			}
			if err := idx.Delete(k); err != nil {
				return err
			}
		}
		n = len(drop)
		var deadDrop [][]byte
		dead := tx.Bucket(bucketDead)
		dc := dead.Cursor()
		for k, v := dc.First(); k != nil && binary.BigEndian.Uint64(k) <= maxSeq; k, v = dc.Next() {
			var d queue.DeadLetter
			if json.Unmarshal(v, &d) == nil && d.At.After(cutoff) {
				break
			}
			deadDrop = append(deadDrop, bytes.Clone(k))
		}
		for _, k := range deadDrop {
			if err := dead.Delete(k); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		if err := m.Put(keyLastPrune, putUint(uint64(time.Now().UnixNano()))); err != nil {
			return err
		}
		if err := m.Put(keyRetention, putUint(uint64(retention))); err != nil {
			return err
		}
		if n > 0 && uint64(cutoff.UnixNano()) > getUint(m, keyPruned) {
			return m.Put(keyPruned, putUint(uint64(cutoff.UnixNano())))
		}
		return nil
	})
	return n, err
}

// PruneState returns when the journal was last pruned and with what
// retention (zero values if never).
func (j *Journal) PruneState() (last time.Time, retention time.Duration, err error) {
	err = j.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if v := getUint(m, keyLastPrune); v != 0 {
			last = time.Unix(0, int64(v))
		}
		retention = time.Duration(getUint(m, keyRetention))
		return nil
	})
	return last, retention, err
}

// PrunedBefore is the latest prune cutoff: outcomes recorded before it may
// have been removed. Zero if the journal was never pruned.
func (j *Journal) PrunedBefore() (time.Time, error) {
	var t time.Time
	err := j.db.View(func(tx *bolt.Tx) error {
		if m := tx.Bucket(bucketMeta); m != nil {
			if v := getUint(m, keyPruned); v != 0 {
				t = time.Unix(0, int64(v)).UTC()
			}
		}
		return nil
	})
	return t, err
}
