package journal

import (
	"encoding/binary"
	"encoding/json"

	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
)

// tally is how many of the outcomes bucket's outcomes are applied and how
// many rejected, kept in meta (keyTally) and changed in the transaction
// that changes the bucket, so that a status report need not read every
// outcome.
type tally struct{ applied, rejected uint64 }

// readTally returns the journal's tally: the one kept, or, in a journal
// of an earlier version that keeps none, one counted from its outcomes
// (the first writing transaction keeps it from then on).
func readTally(tx *bolt.Tx) (tally, error) {
	if m := tx.Bucket(bucketMeta); m != nil {
		if v := m.Get(keyTally); len(v) == 16 {
			return tally{binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])}, nil
		}
	}
	var t tally
	b := tx.Bucket(bucketOutcomes)
	if b == nil {
		return t, nil
	}
	err := b.ForEach(func(_, v []byte) error {
		t.add(outcomeStatus(v), 1)
		return nil
	})
	return t, err
}

// outcomeStatus is the status of an encoded outcome, read without
// decoding the rest of it; "" if it cannot be read (such an outcome is
// counted as neither).
func outcomeStatus(v []byte) queue.Status {
	var o struct {
		Status queue.Status `json:"status"`
	}
	if json.Unmarshal(v, &o) != nil {
		return ""
	}
	return o.Status
}

// add counts n more (or, negative, fewer) outcomes of status s.
func (t *tally) add(s queue.Status, n int) {
	switch s {
	case queue.StatusApplied:
		t.applied = uint64(int64(t.applied) + int64(n))
	case queue.StatusRejected:
		t.rejected = uint64(int64(t.rejected) + int64(n))
	}
}

// write keeps t in the journal.
func (t tally) write(tx *bolt.Tx) error {
	v := binary.BigEndian.AppendUint64(putUint(t.applied), t.rejected)
	return tx.Bucket(bucketMeta).Put(keyTally, v)
}
