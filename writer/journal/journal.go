package journal

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
)

var (
	bucketOutcomes = []byte("outcomes") // job ID → Outcome JSON
	bucketMeta     = []byte("meta")     // keyEpoch, keyLastSeq
	bucketIntent   = []byte("intent")   // keyIntent → intent JSON and its data, while a batch's files may be unwritten
	bucketPending  = []byte("pending")  // job ID → the generation of the intent that recorded it: the outcomes the standing intent's files make true
	bucketDead     = []byte("dead")     // stream seq → DeadLetter JSON
	bucketByTime   = []byte("by_time")  // recorded-at (8 bytes) + job ID → nil: the pruning order
	keyEpoch       = []byte("epoch")
	keyLastSeq     = []byte("last_seq")
	keyPruned      = []byte("pruned_before") // unix nanos: outcomes recorded before it may be gone
	keyLastPrune   = []byte("last_prune")    // unix nanos of the last prune
	keyRetention   = []byte("retention")     // the retention the last prune used (the daemon's)
	keyAttempt     = []byte("attempt")       // seq (8) + attempts (8) of the job being tried one at a time
	keyIntent      = []byte("batch")
	keyIntentGen   = []byte("gen")      // in bucketIntent: the standing intent's generation (meta keeps the last one)
	keyIntentToken = []byte("token")    // in bucketIntent: the standing intent's Token, which the settled mark names once it is carried out
	keyCarries     = []byte("carries")  // in bucketIntent: the Token of the intent whose changes the standing one carries, their files written
	keyTally       = []byte("tally")    // applied (8) + rejected (8): how many outcomes of each the outcomes bucket holds
	prefixData     = []byte("data/")    // in bucketIntent: data/<i> → the raw data of the i-th change of an intent of an earlier version
	prefixChange   = []byte("+change/") // in bucketIntent: +change/<key> → one of the standing intent's changes (changeKey); before the other keys, so that the newest share their page
	keyStuck       = []byte("stuck")    // why the last redo of the intent failed, while it stands
	keyRunning     = []byte("running")  // in bucketIntent: the exec run in progress (runRecord), while its command runs
	keyFence       = []byte("fence")    // the largest claim token (Fence) a batch was committed under
)

// journalTimeout bounds the wait for bbolt's own file lock. The journal is
// opened only under the store lock, so it is only ever contended by a
// status reader for an instant.
const journalTimeout = 2 * time.Second

// Path is a store's journal: <store>/.scribe/journal.db
// (queue.Layout.Journal).
func Path(store string) string {
	return queue.Layout{Root: store}.Journal()
}

// Journal is a store's bbolt journal: the outcome of every job by ID, the
// epoch counter, the last applied stream sequence and the intent of the
// last batch, until it is known to be on disk (see docs/recovery.md).
//
// A batch costs one synced transaction: its outcomes are recorded with its
// intent, before any file changes. Until its files are written and synced
// (settle), those outcomes are provisional: look-ups do not see them, and
// a holder that finds the intent standing, after a crash, redoes it. Once
// they are, settle says so in the settled mark (settled.go), which every
// Journal reads when it opens: from then on every process shows the
// outcomes. The next batch's transaction drops a settled intent, and so
// does Close.
type Journal struct {
	db *bolt.DB
	// settled is the token of the intent known to be carried out: by this
	// process (settle), or as the settled mark said when the journal was
	// opened (no other process writes the journal while it is open). nil:
	// none. Any other intent is provisional.
	settled atomic.Pointer[Token]
	// unsynced says that the files of the settled intent were written but
	// not yet synced (SettleWritten): Settle is still to come. Only the
	// holder, under the store lock, reads or writes it.
	unsynced bool
	// records counts the change records of the intent the last Record of
	// this process wrote (0: none), keyed from firstKey to lastKey, so
	// that a later Record that carries those changes adds its own beside
	// them (see Change.key). Only the holder uses them.
	records           int
	firstKey, lastKey uint64
	// boot identifies the running boot in written marks ("" if unknown).
	boot string
	// mark is the settled mark, open for writing; nil for a read-only
	// journal, or when the mark could not be opened (settle then drops
	// the intent in a transaction instead).
	mark *os.File
	// fence is the claim this process's writer commits under, if its
	// store's queue is shared by several daemons (SetFence).
	fence atomic.Pointer[Fence]
	// attempts is the attempt mark (attempt.go). Only the holder, under
	// the store lock, uses it.
	attempts attemptMark
}

// Fence is a daemon writer's claim on a store whose queue several daemons
// can reach (a *claim.Claim). Every journal transaction that decides jobs (a
// batch's outcomes and intent, an exec run's start and end) checks it and
// the journal's fence token in the same transaction: a writer whose claim
// is lost or unrenewed, or older than one the journal was written under,
// commits nothing, however long it was paused between its last check and
// its commit. Only the daemon's own journal has a fence: direct writers
// take the store lock, which a daemon on another machine cannot see, and
// are not fenced.
type Fence interface {
	// Token is the claim's fencing token, larger for every later claim.
	Token() uint64
	// Check returns nil while the claim certainly holds.
	Check() error
}

// ErrFenced means the journal was written under a later claim than this
// writer's (see Fence): another daemon is the store's writer now.
var ErrFenced = errors.New("the journal was written by a later claim holder")

// SetFence makes the journal's deciding transactions check f (nil: none).
func (j *Journal) SetFence(f Fence) {
	if f == nil {
		j.fence.Store(nil)
		return
	}
	j.fence.Store(&f)
}

// checkFence fails a deciding transaction whose writer may no longer be
// the store's (see Fence), and records a newer token.
func (j *Journal) checkFence(tx *bolt.Tx) error {
	p := j.fence.Load()
	if p == nil {
		return nil
	}
	f := *p
	if err := f.Check(); err != nil {
		return err
	}
	m := tx.Bucket(bucketMeta)
	switch stored, token := getUint(m, keyFence), f.Token(); {
	case stored > token:
		return fmt.Errorf("%w: this writer's token is %d, the journal's %d", ErrFenced, token, stored)
	case stored < token:
		return m.Put(keyFence, putUint(token))
	}
	return nil
}

// Open opens (creating) a journal for writing, held to the rules of
// .scribe (queue.OpenPrivate). Callers must hold the store lock.
func Open(path string) (*Journal, error) {
	fi, statErr := os.Lstat(path)
	if err := forgotten(path, fi, statErr); err != nil {
		return nil, err
	}
	db, err := openBolt(path, &bolt.Options{Timeout: journalTimeout, OpenFile: queue.OpenPrivate})
	if errors.Is(err, queue.ErrInsecure) || errors.Is(err, ErrDamaged) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	buckets := [][]byte{bucketOutcomes, bucketMeta, bucketIntent, bucketPending, bucketDead, bucketByTime}
	complete := false
	err = db.View(func(tx *bolt.Tx) error {
		complete = !slices.ContainsFunc(buckets, func(b []byte) bool { return tx.Bucket(b) == nil })
		return nil
	})
	if err == nil && !complete {
		// Only then: a commit that changes nothing still writes bbolt's
		// freelist and meta page, two fdatasyncs that each holder's start
		// (a direct write, a daemon's first job after idle) would pay.
		err = db.Update(func(tx *bolt.Tx) error {
			for _, b := range buckets {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err == nil && errors.Is(statErr, fs.ErrNotExist) {
		// A new journal's entry in .scribe must survive a power cut as
		// its first batch's outcomes do: bbolt syncs the file only.
		err = queue.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("init journal %s: %w", path, err)
	}
	j := &Journal{db: db}
	j.loadMark(true)
	return j, nil
}

// forgotten refuses a journal that is missing or empty (fi and statErr:
// what Lstat said of path) though the settled mark beside it was written:
// bbolt takes an empty or missing file for a new journal, and a new
// journal would forget every ID the old one recorded, and apply them
// again.
func forgotten(path string, fi os.FileInfo, statErr error) error {
	var what string
	switch {
	case errors.Is(statErr, fs.ErrNotExist):
		what = "missing, though the settled mark beside it says batches were recorded in it (was it removed?)"
	case statErr == nil && fi.Mode().IsRegular() && fi.Size() == 0:
		what = "empty, though the settled mark beside it says batches were recorded in it (was it cut short?)"
	default:
		return nil
	}
	if m, err := os.Lstat(markPath(path)); err != nil || m.Size() == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s is %s", ErrDamaged, path, what)
}

// ErrBusy means OpenReadOnly gave up waiting for a writer that has the
// journal open.
var ErrBusy = errors.New("journal busy (a writer has it open)")

// ErrDamaged means the journal file is not what bbolt wrote: cut short,
// or pages that are not what its meta page says. Nothing in it is read,
// nothing is written to it; an operator restores it (recovery.md).
var ErrDamaged = errors.New("the journal is damaged")

// openBolt opens the journal with bbolt, refusing a damaged one with an
// error instead of a crash: bbolt maps the file and trusts its meta page,
// so a page past the end of a file cut short is a SIGBUS (cutShort finds
// those first), and a page that is not what it should be fails one of its
// assertions, a panic turned into ErrDamaged here. bbolt's mapping of the
// file, and with it the file's flock, then stays until the process exits:
// a later open of the journal in the same process waits for it and times
// out.
func openBolt(path string, o *bolt.Options) (db *bolt.DB, err error) {
	if err := cutShort(path); err != nil {
		return nil, err
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("%w: %s: %v", ErrDamaged, path, r)
		}
	}()
	if db, err = bolt.Open(path, 0o600, o); err != nil {
		return nil, err
	}
	err = db.View(func(tx *bolt.Tx) error {
		_ = tx.Bucket(bucketMeta) // the root page, read once under the guard
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// cutShort refuses a journal file shorter than its meta page says its
// pages take, before bbolt maps it: a page past the end of the file would
// be a SIGBUS, and a mapping bbolt made cannot be undone but by closing
// the journal, which a failed open never returns. It reads bbolt's
// on-disk meta pages (pages 0 and 1): a 16-byte page header, then magic,
// version, page size, flags, the root bucket (16 bytes), the freelist's
// page, the high-water page id, the txid and an FNV-64a checksum of what
// comes before it. A file whose meta pages are both invalid is left to
// bbolt, which refuses it.
func cutShort(path string) error {
	f, err := queue.OpenPrivate(path, os.O_RDONLY, 0)
	if err != nil {
		return nil // bbolt's own open says why
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return nil
	}
	const header, metaSize = 16, 64
	read := func(off int64) (pageSize uint32, pages, txid uint64, ok bool) {
		b := make([]byte, metaSize)
		if _, err := f.ReadAt(b, off+header); err != nil {
			return 0, 0, 0, false
		}
		e := binary.NativeEndian
		h := fnv.New64a()
		h.Write(b[:56])
		if e.Uint32(b[0:]) != 0xED0CDAED || e.Uint32(b[4:]) != 2 || e.Uint64(b[56:]) != h.Sum64() {
			return 0, 0, 0, false
		}
		return e.Uint32(b[8:]), e.Uint64(b[40:]), e.Uint64(b[48:]), true
	}
	size, pages, txid, ok := read(0)
	second := int64(os.Getpagesize())
	if ok {
		second = int64(size)
	}
	if s1, p1, t1, ok1 := read(second); ok1 && (!ok || t1 > txid) {
		size, pages, ok = s1, p1, true
	}
	if ok && uint64(fi.Size()) < pages*uint64(size) {
		return fmt.Errorf("%w: %s is %d bytes, and its meta page says its pages take %d (was it cut short?)", ErrDamaged, path, fi.Size(), pages*uint64(size))
	}
	return nil
}

// loadMark opens the settled mark (for writing, too, if write) and takes
// the intent it names as carried out. Called once the journal is open,
// so that no writer can change the mark meanwhile.
func (j *Journal) loadMark(write bool) {
	path := markPath(j.db.Path())
	if write {
		if f, err := openMark(path, true); err == nil {
			j.mark = f
		}
	}
	j.boot = currentBoot()
	// A written mark shows outcomes to look-ups; a holder redoes its
	// intent, and so syncs its files: a disk can lose what was not synced
	// without the machine restarting (a drive cut off, a power cut of its
	// own).
	if t, synced, ok := readMark(path, j.boot); ok && (synced || !write) {
		j.settled.Store(&t)
	}
}

// OpenReadOnly opens a journal for look-ups without the store lock.
// It fails after a short timeout while a writer has the journal open.
// The journal and its store's .scribe are held to the rules of .scribe
// (queue.Layout.Check, queue.OpenPrivate): a journal another user could
// have written is an *InsecureError, and nothing of it is read.
func OpenReadOnly(path string, timeout time.Duration) (*Journal, error) {
	meta := filepath.Dir(path)
	check := queue.CheckPrivatePath(meta, true)
	if filepath.Base(meta) == queue.MetaDir {
		check = queue.Layout{Root: filepath.Dir(meta)}.Check()
	}
	if check != nil {
		return nil, check
	}
	fi, statErr := os.Lstat(path)
	if err := forgotten(path, fi, statErr); err != nil {
		return nil, err
	}
	db, err := openBolt(path, &bolt.Options{Timeout: timeout, ReadOnly: true, OpenFile: queue.OpenPrivate})
	if errors.Is(err, queue.ErrInsecure) || errors.Is(err, ErrDamaged) {
		return nil, err
	}
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s: %w", ErrBusy, path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	j := &Journal{db: db}
	j.loadMark(false)
	return j, nil
}

// Close closes the journal, dropping the intent of a batch carried out
// and synced: no later holder need redo it, or read the mark.
func (j *Journal) Close() error {
	if !j.db.IsReadOnly() && j.settled.Load() != nil && !j.unsynced {
		var done bool // an intent stands, carried out
		_ = j.db.View(func(tx *bolt.Tx) error {
			done = tx.Bucket(bucketIntent).Get(keyIntent) != nil && j.carriedOut(tx)
			return nil
		})
		if done {
			_ = j.db.Update(func(tx *bolt.Tx) error {
				if !j.carriedOut(tx) {
					return nil
				}
				return dropIntent(tx)
			})
		}
	}
	if j.mark != nil {
		_ = j.mark.Close()
	}
	if j.attempts.f != nil {
		_ = j.attempts.f.Close()
	}
	return j.db.Close()
}

// NextEpoch raises the epoch counter and returns the new value. It is
// called once per acquisition of the store lock.
func (j *Journal) NextEpoch() (uint64, error) {
	var epoch uint64
	err := j.db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		epoch = getUint(m, keyEpoch) + 1
		return m.Put(keyEpoch, putUint(epoch))
	})
	return epoch, err
}

// Meta returns the current epoch and the last applied stream sequence.
func (j *Journal) Meta() (epoch, lastSeq uint64, err error) {
	err = j.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if m == nil {
			return nil
		}
		epoch, lastSeq = getUint(m, keyEpoch), getUint(m, keyLastSeq)
		return nil
	})
	return epoch, lastSeq, err
}

// Outcome returns the recorded outcome of a job, or nil if there is none.
func (j *Journal) Outcome(id string) (*queue.Outcome, error) {
	var out *queue.Outcome
	err := j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketOutcomes)
		if b == nil {
			return nil
		}
		v := b.Get([]byte(id))
		if v == nil || j.provisional(tx, []byte(id)) {
			return nil
		}
		o, err := queue.DecodeOutcome(v)
		out = o
		return err
	})
	return out, err
}

// provisional reports whether the outcome of id belongs to a batch whose
// files may not be on disk yet: the standing intent's, unless it is
// carried out. Every look-up, listing and count of outcomes asks it.
func (j *Journal) provisional(tx *bolt.Tx, id []byte) bool {
	p := tx.Bucket(bucketPending)
	if p == nil {
		return false
	}
	v := p.Get(id)
	return v != nil && j.pendingRule(tx).hides(v)
}

// pendingRule says which of the standing intent's pending outcomes are
// provisional.
type pendingRule struct {
	none bool   // the intent is carried out: none is
	from uint64 // else those recorded with an intent of this generation or later
}

// hides reports whether the rule makes the pending outcome of value v
// provisional. v is the generation of the intent that recorded it; an
// outcome pending in a journal of an earlier version has none.
func (r pendingRule) hides(v []byte) bool {
	if r.none {
		return false
	}
	return len(v) != 8 || binary.BigEndian.Uint64(v) >= r.from
}

// pendingRule returns the rule of the standing intent. An intent that
// carries the changes of the one before, whose files were written, keeps
// that one's outcomes shown until it is carried out itself, if the mark
// still names the one before: a look-up between the two never hides an
// outcome it showed.
func (j *Journal) pendingRule(tx *bolt.Tx) pendingRule {
	if j.carriedOut(tx) {
		return pendingRule{none: true}
	}
	b := tx.Bucket(bucketIntent)
	if t := j.settled.Load(); b != nil && t != nil && bytes.Equal(b.Get(keyCarries), t[:]) {
		return pendingRule{from: getUint(b, keyIntentGen)}
	}
	return pendingRule{}
}

// Lookup returns the outcome of a job or, if there is none, the journal's
// prune cutoff.
func (j *Journal) Lookup(id string) (queue.Lookup, error) {
	o, err := j.Outcome(id)
	if err != nil {
		return queue.Lookup{}, err
	}
	if o != nil {
		return queue.Lookup{Found: true, Outcome: o, State: queue.StateOf(o)}, nil
	}
	pruned, err := j.PrunedBefore()
	return queue.Lookup{PrunedBefore: pruned}, err
}

// Commit records outcomes, dead letters and the last sequence, and drops
// the standing intent (settled, or carried out by a redo), all in one
// transaction. An intent whose files are written but not synced yet
// (SettleWritten) stays: until Settle it is all that makes them durable.
// Outcomes already recorded are never overwritten.
func (j *Journal) Commit(outs []*queue.Outcome, dead []queue.DeadLetter, lastSeq uint64) error {
	return j.decided(outs, dead, lastSeq, j.db.Update(func(tx *bolt.Tx) error {
		if err := j.checkFence(tx); err != nil {
			return err
		}
		if !j.unsynced {
			if err := dropIntent(tx); err != nil {
				return err
			}
		}
		if err := putDead(tx, dead); err != nil {
			return err
		}
		return recordOutcomes(tx, outs, lastSeq)
	}))
}

// encodeRecorded encodes an outcome about to be recorded, cutting it
// first, in place, if it does not fit queue.MaxOutcomeBytes, so that it
// can always be delivered in one message: a command's output of control
// bytes encodes to six times its size. The writer has told it to no one
// yet, and tells what was recorded.
func encodeRecorded(o *queue.Outcome) ([]byte, error) {
	v, err := queue.EncodeOutcome(o)
	if err != nil || len(v) <= queue.MaxOutcomeBytes {
		return v, err
	}
	*o = *o.Fit(queue.MaxOutcomeBytes)
	return queue.EncodeOutcome(o)
}

func putDead(tx *bolt.Tx, dead []queue.DeadLetter) error {
	for _, d := range dead {
		v, err := json.Marshal(d)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketDead).Put(putUint(d.Seq), v); err != nil {
			return err
		}
	}
	return nil
}

// appendFill is how full the outcome buckets' pages are left when they
// split.
const appendFill = 0.9

// recordOutcomes records outcomes not yet recorded and the last sequence,
// and drops the attempt record of the job they settle. Each outcome is
// fitted first, in place (encodeRecorded): what its caller is told is
// what was recorded.
func recordOutcomes(tx *bolt.Tx, outs []*queue.Outcome, lastSeq uint64) error {
	b, idx := tx.Bucket(bucketOutcomes), tx.Bucket(bucketByTime)
	// Both take their keys in about increasing order (time first; IDs
	// are version 7 UUIDs but for those a caller chose): pages split
	// nearly full, not half, hold the same outcomes in about half the
	// pages.
	b.FillPercent, idx.FillPercent = appendFill, appendFill
	t, err := readTally(tx)
	if err != nil {
		return err
	}
	for _, o := range outs {
		if o.ID == "" || b.Get([]byte(o.ID)) != nil {
			continue
		}
		v, err := encodeRecorded(o)
		if err != nil {
			return err
		}
		if err := b.Put([]byte(o.ID), v); err != nil {
			return err
		}
		if err := idx.Put(timeKey(o.At, o.ID), nil); err != nil {
			return err
		}
		t.add(o.Status, 1)
	}
	if err := t.write(tx); err != nil {
		return err
	}
	m := tx.Bucket(bucketMeta)
	if lastSeq > getUint(m, keyLastSeq) {
		if err := m.Put(keyLastSeq, putUint(lastSeq)); err != nil {
			return err
		}
	}
	return m.Delete(keyAttempt)
}

func timeKey(t time.Time, id string) []byte {
	return append(putUint(uint64(t.UnixNano())), id...)
}

func getUint(b *bolt.Bucket, k []byte) uint64 {
	v := b.Get(k)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func putUint(v uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, v)
}

// DeadLetters returns up to limit dead letters, newest first, and how many
// the journal keeps in all.
func (j *Journal) DeadLetters(limit int) (out []queue.DeadLetter, total int, err error) {
	err = j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDead)
		if b == nil {
			return nil
		}
		total = b.Stats().KeyN
		c := b.Cursor()
		for k, v := c.Last(); k != nil && len(out) < limit; k, v = c.Prev() {
			var d queue.DeadLetter
			if err := json.Unmarshal(v, &d); err != nil {
				return err
			}
			out = append(out, d)
		}
		return nil
	})
	return out, total, err
}

// Info describes the journal: its path and size, how many outcomes it
// keeps (how many of them applied, how many rejected), its epoch and last
// applied queue sequence. Provisional outcomes are not counted.
func (j *Journal) Info() (queue.JournalInfo, error) {
	info := queue.JournalInfo{Path: j.db.Path()}
	if fi, err := os.Stat(info.Path); err == nil {
		info.Bytes = fi.Size()
	}
	err := j.db.View(func(tx *bolt.Tx) error {
		if m := tx.Bucket(bucketMeta); m != nil {
			info.Epoch, info.LastSeq = getUint(m, keyEpoch), getUint(m, keyLastSeq)
		}
		b := tx.Bucket(bucketOutcomes)
		if b == nil {
			return nil // a read-only open of a journal never written
		}
		t, err := readTally(tx)
		if err != nil {
			return err
		}
		n := b.Stats().KeyN
		if p, rule := tx.Bucket(bucketPending), j.pendingRule(tx); p != nil && !rule.none {
			err := p.ForEach(func(k, gen []byte) error {
				if v := b.Get(k); v != nil && rule.hides(gen) {
					t.add(outcomeStatus(v), -1)
					n--
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		info.Outcomes, info.Applied, info.Rejected = n, t.applied, t.rejected
		return nil
	})
	return info, err
}

// OutcomeFilter selects the outcomes Recent lists.
type OutcomeFilter struct {
	// Status keeps the outcomes of this status only; empty keeps all.
	Status queue.Status
	// Since keeps the outcomes recorded at or after it; zero keeps all.
	Since time.Time
	// Limit is the most outcomes listed; 0 means no limit.
	Limit int
}

// Recent lists recorded outcomes, newest first, in the order of the
// journal's by_time index (when each was recorded). It reads the index
// backwards and stops at f.Since, so its cost follows what it lists (and,
// with a Status, what it skips), not the journal's size.
func (j *Journal) Recent(f OutcomeFilter) ([]*queue.Outcome, error) {
	var out []*queue.Outcome
	err := j.db.View(func(tx *bolt.Tx) error {
		idx, outs := tx.Bucket(bucketByTime), tx.Bucket(bucketOutcomes)
		if idx == nil || outs == nil {
			return nil // a read-only open of a journal never written
		}
		c := idx.Cursor()
		for k, _ := c.Last(); k != nil && (f.Limit <= 0 || len(out) < f.Limit); k, _ = c.Prev() {
			if len(k) < 8 {
				continue
			}
			if !f.Since.IsZero() && int64(binary.BigEndian.Uint64(k[:8])) < f.Since.UnixNano() {
				break
			}
			v := outs.Get(k[8:])
			if v == nil || j.provisional(tx, k[8:]) {
				continue // pruned under the index (cannot happen in one transaction, but harmless), or not yet on disk
			}
			o, err := queue.DecodeOutcome(v)
			if err != nil {
				return fmt.Errorf("outcome %q: %w", k[8:], err)
			}
			if f.Status != "" && o.Status != f.Status {
				continue
			}
			out = append(out, o)
		}
		return nil
	})
	return out, err
}
