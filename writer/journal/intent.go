package journal

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"

	"github.com/scribehq/scribe/queue"
	bolt "go.etcd.io/bbolt"
)

// Kinds of Change.
const (
	ChangeWrite  = "write"  // replace the whole file with Data
	ChangeAppend = "append" // add Data at the end of the file (it had Base bytes when decided)
	ChangeRemove = "remove" // the file is gone
	ChangeMkdir  = "mkdir"  // the folder exists (the batch made it and emptied it again)
	// ChangeStaged replaces the whole file with its temp file, which
	// holds Size bytes of CRC-32C Sum, written and synced before the
	// intent was recorded: the intent of a big write names the data
	// instead of holding a copy of it.
	ChangeStaged = "staged"
)

// Change is a batch's net effect on one file, stated so that carrying
// it out again after a partial attempt has the same result as once.
type Change struct {
	Path string      `json:"path"`
	Kind string      `json:"kind"`
	Data []byte      `json:"data,omitempty"`
	Base int64       `json:"base,omitempty"`   // append: the file's size when the batch was decided
	Mode fs.FileMode `json:"mode,omitempty"`   // the replaced file's mode; 0 for a new file
	New  bool        `json:"new,omitempty"`    // the file did not exist before the batch
	Size int64       `json:"size,omitempty"`   // staged: the temp file's size
	Sum  uint32      `json:"crc32c,omitempty"` // staged: the temp file's CRC-32C (Castagnoli)
	// Was is the file the batch found, for a write or a removal of one
	// that existed: a redo carries the change out only while the path
	// still shows that file, or scribe's own bytes cut short, never over
	// what another program put there since. Nil in intents of earlier
	// versions, whose redo carries the change out as it is.
	Was *Stamp `json:"was,omitempty"`
	// key is the change's record in the journal (changeKey) once Record
	// has written it, 0 before: a later Record that carries the change
	// again, as the standing intent's, keeps that record and writes none.
	key uint64
}

// Stamp tells one state of a file from another: its inode, size and
// modification time.
type Stamp struct {
	Ino   uint64 `json:"ino"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime_ns"`
}

// Intent is a batch decided but not yet on disk: committed to the journal
// before the first file changes (Record), carried out (Settle) or
// dropped by the commit that records the outcomes. If it is found on
// opening the journal (Pending), the batch is redone.
type Intent struct {
	Epoch    uint64           `json:"epoch"`
	Changes  []Change         `json:"changes"`
	Outcomes []*queue.Outcome `json:"outcomes"`
	LastSeq  uint64           `json:"last_seq"`
	// Carried are the IDs of outcomes recorded with an earlier intent
	// whose changes this one carries again, their files not yet synced:
	// they stay provisional with it (Record keeps them in the pending
	// outcomes, which is where a later holder finds them).
	Carried []string `json:"-"`
}

// Paths are the files and folders the intent changes, each once, sorted:
// a carried intent has a change of its own for each append to a file.
func (in *Intent) Paths() []string {
	paths := make([]string, 0, len(in.Changes))
	for _, c := range in.Changes {
		paths = append(paths, c.Path)
	}
	slices.Sort(paths)
	return slices.Compact(paths)
}

// carriedOut reports whether the standing intent, if any, is known to be
// on disk: settled by this process, or named by the settled mark. An
// intent of an earlier version, which has no token, is not.
func (j *Journal) carriedOut(tx *bolt.Tx) bool {
	b := tx.Bucket(bucketIntent)
	if b == nil || b.Get(keyIntent) == nil {
		return true
	}
	t := j.settled.Load()
	return t != nil && bytes.Equal(b.Get(keyIntentToken), t[:])
}

// Record commits a decided batch in one transaction: its outcomes,
// dead letters and last sequence and, if it changes files, its intent
// (in). It drops the intent of the batch before, which must be carried
// out; if its files are not synced yet (SettleWritten), in must carry its
// changes again, and its outcomes (Intent.Carried), or Record refuses:
// then the records of those changes stay, and only the batch's own are
// written beside them. It returns the intent's token, for Settle (or
// SettleWritten) once its files are on disk. Until then the outcomes are
// provisional: look-ups do not show them.
func (j *Journal) Record(in *Intent, outs []*queue.Outcome, dead []queue.DeadLetter, lastSeq uint64) (token Token, err error) {
	var header []byte
	carrying := false
	kept := 0       // of the standing intent's records, carried again
	var fresh []int // the indexes of in.Changes to record, and the records
	var encoded [][]byte
	if in != nil {
		if token, err = newIntentToken(); err != nil {
			return token, err
		}
		if header, err = json.Marshal(&intentHeader{Epoch: in.Epoch, Changes: splitChanges, LastSeq: in.LastSeq}); err != nil {
			return token, err
		}
		carrying = len(in.Carried) > 0 && j.unsynced && j.records > 0
		for i, c := range in.Changes {
			if carrying && j.standing(c.key) {
				kept++
				continue
			}
			v, err := encodeChange(c)
			if err != nil {
				return token, err
			}
			fresh, encoded = append(fresh, i), append(encoded, v)
		}
	}
	err = j.db.Update(func(tx *bolt.Tx) error {
		if err := j.checkFence(tx); err != nil {
			return err
		}
		if !j.carriedOut(tx) {
			return errors.New("the batch before was not carried out: redo it first")
		}
		if j.unsynced && (in == nil || len(in.Carried) == 0) {
			// Dropping that intent would leave its files' changes nowhere.
			return errors.New("the files of the batch before are not synced: carry its changes, or sync them first")
		}
		b := tx.Bucket(bucketIntent)
		switch {
		case !carrying:
			if err := dropIntent(tx); err != nil {
				return err
			}
		case kept < j.records:
			if err := dropReplaced(b, in.Changes); err != nil {
				return err
			}
		}
		if err := putDead(tx, dead); err != nil {
			return err
		}
		if err := recordOutcomes(tx, outs, lastSeq); err != nil {
			return err
		}
		if in == nil {
			return nil
		}
		m, p := tx.Bucket(bucketMeta), tx.Bucket(bucketPending)
		p.FillPercent = appendFill
		gen := getUint(m, keyIntentGen) + 1
		if err := m.Put(keyIntentGen, putUint(gen)); err != nil {
			return err
		}
		if err := b.Put(keyIntentGen, putUint(gen)); err != nil {
			return err
		}
		if err := b.Put(keyIntentToken, token[:]); err != nil {
			return err
		}
		if t := j.settled.Load(); carrying && t != nil {
			// The one before's, which the mark names (carriedOut).
			if err := b.Put(keyCarries, t[:]); err != nil {
				return err
			}
		} else if err := b.Delete(keyCarries); err != nil {
			return err
		}
		if err := b.Put(keyIntent, header); err != nil {
			return err
		}
		// Keys grow with each record: new ones go at the end of the
		// bucket's pages, which can then split full.
		b.FillPercent = appendFill
		for i, v := range encoded {
			if err := b.Put(changeKey(j.lastKey+1+uint64(i)), v); err != nil {
				return err
			}
		}
		for _, o := range outs {
			if o.ID != "" {
				if err := p.Put([]byte(o.ID), putUint(gen)); err != nil {
					return err
				}
			}
		}
		if carrying {
			return nil // the carried outcomes are pending already
		}
		for _, id := range in.Carried {
			if err := p.Put([]byte(id), putUint(gen)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return token, j.decided(outs, dead, lastSeq, err)
	}
	j.unsynced = false
	if !carrying {
		j.firstKey = j.lastKey + 1
	}
	for _, i := range fresh {
		j.lastKey++
		in.Changes[i].key = j.lastKey
	}
	j.records = kept + len(fresh)
	return token, j.decided(outs, dead, lastSeq, nil)
}

// standing reports whether key is of a record of the intent the last
// Record of this process wrote.
func (j *Journal) standing(key uint64) bool {
	return j.records > 0 && key >= j.firstKey && key <= j.lastKey
}

// dropReplaced removes the standing intent's change records that changes,
// the next intent's, no longer has: changes a later one of their file
// replaced.
func dropReplaced(b *bolt.Bucket, changes []Change) error {
	keep := make(map[string]bool, len(changes))
	for _, c := range changes {
		if c.key != 0 {
			keep[string(changeKey(c.key))] = true
		}
	}
	var gone [][]byte
	cur := b.Cursor()
	for k, _ := cur.Seek(prefixChange); k != nil && bytes.HasPrefix(k, prefixChange); k, _ = cur.Next() {
		if !keep[string(k)] {
			gone = append(gone, bytes.Clone(k))
		}
	}
	for _, k := range gone {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Settle records that the files of the intent of token t are on disk: its
// outcomes stand, for this process at once and, through the settled mark,
// for every process that opens the journal from then on, even if this
// one is killed the next instant. Without a mark to write it drops the
// intent instead, in a synced transaction. If neither works, the intent
// stays provisional (the error says why), and the next holder redoes it.
func (j *Journal) Settle(t Token) error {
	j.unsynced = false // its files are synced, whether this works or not
	if j.mark != nil {
		err := writeMark(j.mark, t, "")
		if err == nil {
			j.settled.Store(&t)
			return nil
		}
		_ = j.mark.Close() // write no mark after a failed one: it may be torn
		j.mark = nil
	}
	err := j.db.Update(func(tx *bolt.Tx) error {
		if !bytes.Equal(tx.Bucket(bucketIntent).Get(keyIntentToken), t[:]) {
			return errors.New("the intent to settle is not the standing one")
		}
		return dropIntent(tx)
	})
	if err != nil {
		return fmt.Errorf("settle batch: %w", err)
	}
	j.settled.Store(&t)
	return nil
}

// SettleWritten records that the files of the intent of token t are
// written but not yet synced: its outcomes stand for this process at
// once and, through a written settled mark, for look-ups of every
// process that opens the journal before the machine restarts (the page
// cache has the files). Settle follows once they are synced; until then
// a later Record must carry the intent's changes again, and Close keeps
// it, and a holder after this one redoes it (which is harmless), and so
// makes the files durable. If the mark cannot be written (or the boot is
// unknown), look-ups of other processes take the intent as interrupted
// until Settle.
func (j *Journal) SettleWritten(t Token) {
	if j.mark != nil && j.boot != "" {
		if err := writeMark(j.mark, t, j.boot); err != nil {
			_ = j.mark.Close() // write no mark after a failed one: it may be torn
			j.mark = nil
		}
	}
	j.settled.Store(&t)
	j.unsynced = true
}

// Unsettle takes SettleWritten back when the intent's files could not be
// synced: the intent is interrupted again, for this process (Pending)
// and, as far as the mark can still say so, for every other, so that it
// is redone.
func (j *Journal) Unsettle() {
	j.settled.Store(nil)
	j.unsynced = false
	if j.mark != nil {
		// A synced mark of no intent's token: it settles nothing.
		if err := writeMark(j.mark, Token{}, ""); err != nil {
			_ = j.mark.Close()
			j.mark = nil
		}
	}
}

// intentHeader is an intent as stored under keyIntent. Its changes are
// records of their own, one per change (changeKey), in the order they
// were recorded, so that a batch can add its own to the standing
// intent's without writing those again; Changes then holds splitChanges,
// which a reader of an earlier version refuses to decode instead of
// taking it for an intent that changes nothing. An intent of an earlier
// version has its changes here, their data under dataKey.
type intentHeader struct {
	Epoch    uint64           `json:"epoch"`
	Changes  json.RawMessage  `json:"changes"`
	Outcomes []*queue.Outcome `json:"outcomes,omitempty"` // of an earlier version
	LastSeq  uint64           `json:"last_seq"`
}

var splitChanges = json.RawMessage(`{"records":"+change/"}`)

// changeKey is the record of the change of key k: +change/ and k, big
// endian, so that the records read back in the order they were written.
func changeKey(k uint64) []byte {
	return binary.BigEndian.AppendUint64(bytes.Clone(prefixChange), k)
}

// encodeChange makes a change's record: its JSON without the data, then,
// if it has data, a newline and the data raw.
func encodeChange(c Change) ([]byte, error) {
	data := c.Data
	c.Data = nil
	v, err := json.Marshal(&c)
	if err != nil || data == nil {
		return v, err
	}
	return append(append(v, '\n'), data...), nil
}

// decodeChange reads a record of encodeChange (v is bbolt's: only valid
// in its transaction).
func decodeChange(v []byte) (Change, error) {
	var c Change
	head, data, hasData := bytes.Cut(v, []byte{'\n'})
	if err := json.Unmarshal(head, &c); err != nil {
		return c, err
	}
	if hasData {
		c.Data = bytes.Clone(data) // not nil, if empty
	}
	return c, nil
}

func dataKey(i int) []byte { return strconv.AppendInt(bytes.Clone(prefixData), int64(i), 10) }

// dropIntent removes the standing intent: its header, changes,
// generation, stuck note and pending outcomes.
func dropIntent(tx *bolt.Tx) error {
	b := tx.Bucket(bucketIntent)
	if b.Get(keyIntent) == nil && b.Get(keyStuck) == nil {
		return nil
	}
	for _, k := range [][]byte{keyIntent, keyIntentGen, keyIntentToken, keyCarries, keyStuck} {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	var records [][]byte
	for _, prefix := range [][]byte{prefixChange, prefixData} {
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			records = append(records, bytes.Clone(k))
		}
	}
	for _, k := range records {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	if tx.Bucket(bucketPending).Stats().KeyN == 0 {
		return nil
	}
	if err := tx.DeleteBucket(bucketPending); err != nil {
		return err
	}
	_, err := tx.CreateBucket(bucketPending)
	return err
}

// Pending returns the intent of a batch that may not be on disk
// (interrupted, or failed half way), or nil.
func (j *Journal) Pending() (*Intent, error) {
	var in *Intent
	err := j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIntent)
		if b == nil {
			return nil // a read-only open of a journal never written
		}
		v := b.Get(keyIntent)
		if v == nil || j.carriedOut(tx) {
			return nil
		}
		var h intentHeader
		if err := json.Unmarshal(v, &h); err != nil {
			return err
		}
		in = &Intent{Epoch: h.Epoch, Outcomes: h.Outcomes, LastSeq: h.LastSeq}
		if !bytes.HasPrefix(h.Changes, []byte("{")) { // an earlier version's
			if err := json.Unmarshal(h.Changes, &in.Changes); err != nil {
				return err
			}
			for i := range in.Changes {
				if d := b.Get(dataKey(i)); d != nil {
					in.Changes[i].Data = bytes.Clone(d)
				}
			}
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek(prefixChange); k != nil && bytes.HasPrefix(k, prefixChange); k, v = c.Next() {
			ch, err := decodeChange(v)
			if err != nil {
				return fmt.Errorf("intent record %x: %w", k[len(prefixChange):], err)
			}
			in.Changes = append(in.Changes, ch)
		}
		return nil
	})
	return in, err
}

// PendingOutcomes returns the provisional outcomes of the standing intent
// in: those recorded with it and, from a journal of an earlier version,
// those it carries itself.
func (j *Journal) PendingOutcomes(in *Intent) ([]*queue.Outcome, error) {
	outs := in.Outcomes
	err := j.db.View(func(tx *bolt.Tx) error {
		recorded := tx.Bucket(bucketOutcomes)
		return tx.Bucket(bucketPending).ForEach(func(k, _ []byte) error {
			o, err := queue.DecodeOutcome(recorded.Get(k))
			if err != nil {
				return fmt.Errorf("outcome %q: %w", k, err)
			}
			outs = append(outs, o)
			return nil
		})
	})
	return outs, err
}

// SetStuck records why the pending intent could not be carried out, for
// Interrupted, until it is.
func (j *Journal) SetStuck(why string) error {
	return j.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIntent).Put(keyStuck, []byte(why))
	})
}

// Interrupted describes the batch a holder was interrupted in, if any:
// how many jobs and files it has and, if carrying it out failed since,
// why (SetStuck). It is nil when no batch is pending.
func (j *Journal) Interrupted() (*queue.Interrupted, error) {
	in, err := j.Pending()
	if err != nil || in == nil {
		return nil, err
	}
	out := &queue.Interrupted{Jobs: len(in.Outcomes), Files: len(in.Paths())}
	err = j.db.View(func(tx *bolt.Tx) error {
		out.Jobs += tx.Bucket(bucketPending).Stats().KeyN
		out.Stuck = string(tx.Bucket(bucketIntent).Get(keyStuck))
		return nil
	})
	return out, err
}

// Abandon replaces the outcomes of the standing intent with outs (its
// jobs, rejected: writer.Abandon) and drops it.
func (j *Journal) Abandon(outs []*queue.Outcome) error {
	return j.db.Update(func(tx *bolt.Tx) error {
		if err := dropIntent(tx); err != nil {
			return err
		}
		b := tx.Bucket(bucketOutcomes)
		t, err := readTally(tx)
		if err != nil {
			return err
		}
		for _, o := range outs {
			if o.ID == "" {
				continue
			}
			if prev, err := queue.DecodeOutcome(b.Get([]byte(o.ID))); err == nil {
				if err := tx.Bucket(bucketByTime).Delete(timeKey(prev.At, o.ID)); err != nil {
					return err
				}
				t.add(prev.Status, -1)
			}
			v, err := encodeRecorded(o)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(o.ID), v); err != nil {
				return err
			}
			if err := tx.Bucket(bucketByTime).Put(timeKey(o.At, o.ID), nil); err != nil {
				return err
			}
			t.add(o.Status, 1)
		}
		return t.write(tx)
	})
}
