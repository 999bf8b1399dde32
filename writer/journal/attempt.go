package journal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
)

// The attempt mark (queue.Layout.Attempt) counts how often each job a
// starting daemon's writer tries one at a time has been tried without
// being decided: a job found tried too often has killed the writer that
// often, and is rejected (writer/daemon). It has attemptSlots slots, each
// a job's sequence, its attempts and their CRC-32C (a torn slot reads as
// none), written with one pwrite and never synced: the kernel's page
// cache keeps it across a death, and a power loss that takes it back only
// grants another try. Several slots, because other jobs are tried while a
// job that killed the writer waits its turn (high jobs go first, the
// jobs of a coalesced run come back one by one), and each keeps its own
// count.
const attemptSlots = 16

// attemptLen is the length of one slot.
const attemptLen = 8 + 8 + 4

// attemptMark is the mark as this journal read and wrote it.
type attemptMark struct {
	f     *os.File // open for writing once a slot was written
	read  bool     // slots holds the file's
	slots [attemptSlots]attemptSlot
}

// attemptSlot is a slot: the job at seq was tried n times (0: free).
type attemptSlot struct{ seq, n uint64 }

// Attempts returns how often the job at seq has been tried without being
// decided (SetAttempts).
func (j *Journal) Attempts(seq uint64) (uint64, error) {
	var n uint64
	err := j.db.View(func(tx *bolt.Tx) error {
		// An earlier version kept the attempt in the journal.
		v := tx.Bucket(bucketMeta).Get(keyAttempt)
		if len(v) == 16 && binary.BigEndian.Uint64(v) == seq {
			n = binary.BigEndian.Uint64(v[8:])
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	j.readAttempts()
	for _, s := range j.attempts.slots {
		if s.n > 0 && s.seq == seq {
			n = max(n, s.n)
		}
	}
	return n, nil
}

// SetAttempts records that the job at seq is being tried for the n-th
// time: in its slot, else the one with the fewest attempts (a free one
// has none).
func (j *Journal) SetAttempts(seq, n uint64) error {
	m := &j.attempts
	j.readAttempts()
	i := slices.IndexFunc(m.slots[:], func(s attemptSlot) bool { return s.n > 0 && s.seq == seq })
	if i < 0 {
		i = 0
		for k, s := range m.slots {
			if s.n < m.slots[i].n {
				i = k
			}
		}
	}
	return j.writeSlot(i, seq, n)
}

// decided frees the slots of the jobs a transaction (err, if not nil,
// failed it) decided: its outcomes, dead letters and last sequence. A
// later stream may give another job their sequences. If this process dies
// first, a slot names a job the journal has, which cannot kill the writer
// again.
func (j *Journal) decided(outs []*queue.Outcome, dead []queue.DeadLetter, lastSeq uint64, err error) error {
	if err != nil {
		return err
	}
	j.readAttempts()
	for k, s := range j.attempts.slots {
		if s.n == 0 {
			continue
		}
		hit := s.seq == lastSeq
		for _, o := range outs {
			hit = hit || o.Seq == s.seq
		}
		for _, d := range dead {
			hit = hit || d.Seq == s.seq
		}
		if hit {
			_ = j.writeSlot(k, 0, 0) // left set, it only grants the job fewer tries
		}
	}
	return nil
}

// writeSlot writes slot i of this journal's mark.
func (j *Journal) writeSlot(i int, seq, n uint64) error {
	return j.attempts.write(j.attemptPath(), i, seq, n)
}

// readAttempts reads this journal's mark once: after that its holder is
// the only one to write it.
func (j *Journal) readAttempts() { j.attempts.load(j.attemptPath()) }

// GiveBack takes back one of the attempts recorded for the job at seq:
// its writer let it go alive (it stopped), which is no death.
func (j *Journal) GiveBack(seq uint64) error {
	j.readAttempts()
	return j.attempts.giveBack(j.attemptPath(), seq)
}

// GiveBackAttempt is Journal.GiveBack on the mark of store, for a writer
// that no longer holds the store (another process may now): it changes
// that job's slot only, which no other holder writes but to free it once
// the job is decided.
func GiveBackAttempt(store string, seq uint64) error {
	var m attemptMark
	path := queue.Layout{Root: store}.Attempt()
	m.load(path)
	defer func() {
		if m.f != nil {
			_ = m.f.Close()
		}
	}()
	return m.giveBack(path, seq)
}

func (m *attemptMark) giveBack(path string, seq uint64) error {
	i := slices.IndexFunc(m.slots[:], func(s attemptSlot) bool { return s.n > 0 && s.seq == seq })
	if i < 0 {
		return nil
	}
	return m.write(path, i, seq, m.slots[i].n-1)
}

// write writes slot i of the mark at path: seq and n, or free for n 0.
func (m *attemptMark) write(path string, i int, seq, n uint64) error {
	if m.f == nil {
		f, err := queue.OpenPrivate(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("open attempt mark: %w", err)
		}
		m.f = f
	}
	b := make([]byte, attemptLen)
	if n > 0 {
		b = attemptBytes(seq, n)
	}
	if _, err := m.f.WriteAt(b, int64(i*attemptLen)); err != nil {
		return fmt.Errorf("write attempt mark: %w", err)
	}
	m.slots[i] = attemptSlot{seq, n}
	return nil
}

// load reads the slots of the mark at path, once.
func (m *attemptMark) load(path string) {
	if m.read {
		return
	}
	m.read = true
	f, err := queue.OpenPrivate(path, os.O_RDONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	b := make([]byte, attemptSlots*attemptLen)
	n, _ := f.ReadAt(b, 0)
	for i := range attemptSlots {
		if (i+1)*attemptLen > n {
			break
		}
		s := b[i*attemptLen : (i+1)*attemptLen]
		seq, tries := binary.BigEndian.Uint64(s), binary.BigEndian.Uint64(s[8:])
		if bytes.Equal(attemptBytes(seq, tries), s) {
			m.slots[i] = attemptSlot{seq, tries}
		}
	}
}

func (j *Journal) attemptPath() string {
	return queue.Layout{Root: filepath.Dir(filepath.Dir(j.db.Path()))}.Attempt()
}

// attemptBytes is a slot's content: seq, n and their CRC-32C.
func attemptBytes(seq, n uint64) []byte {
	b := binary.BigEndian.AppendUint64(putUint(seq), n)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}
