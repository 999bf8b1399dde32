package lock

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
)

// DefaultPath is the store lock file of a store: <store>/.scribe/lock
// (queue.Layout.Lock).
func DefaultPath(store string) string {
	return queue.Layout{Root: store}.Lock()
}

// makeMeta makes a store's private folder (mode 0700) if needed, once it
// has passed the rules of .scribe (queue.Layout.Check): nothing is read
// or written in a folder another user could change.
func makeMeta(store string) error {
	return queue.Layout{Root: store}.Make()
}

// openLockFile opens a store lock file with os.OpenFile's flag. Neither
// kind follows a symlink or blocks on a FIFO. scribe's own, in .scribe,
// is held to the rules of .scribe (queue.OpenPrivate: an *InsecureError);
// one shared with another tool (--lock-file) is that tool's, whatever its
// owner and mode, and need only be a regular file (ErrNotLockFile).
func openLockFile(path string, flag int) (*os.File, error) {
	if filepath.Base(filepath.Dir(path)) == queue.MetaDir {
		return queue.OpenPrivate(path, flag, 0o600)
	}
	if err := CheckLockPath(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		if cerr := CheckLockPath(path); cerr != nil { // replaced since
			return nil, cerr
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("lock %s is a %s: %w", path, describeMode(fi.Mode()), ErrNotLockFile)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Environment a `scribe lock` child receives so that scribe commands it
// runs join the parent's hold instead of waiting on it, for as long as
// that hold stands (docs/locking.md).
const (
	EnvLockFD    = "SCRIBE_LOCK_FD"    // the inherited descriptor number
	EnvLockID    = "SCRIBE_LOCK_ID"    // "<dev>:<inode>" of the lock file it locks
	EnvLockFile  = "SCRIBE_LOCK_FILE"  // the lock file's path
	EnvLockToken = "SCRIBE_LOCK_TOKEN" // the hold's token, as in the lock file's identity
	EnvLockGate  = "SCRIBE_LOCK_GATE"  // the file joined children hold a shared flock on
	EnvEpoch     = "SCRIBE_EPOCH"      // the epoch of the parent's hold
)

// Options says which lock file Acquire takes, who takes it, and how long
// it waits.
type Options struct {
	// LockPath is the lock file; empty means DefaultPath(store). Set it
	// to share the lock an existing tool already takes.
	LockPath string
	// Mode is queue.ModeDaemon or queue.ModeDirect (the default), for the
	// identity. A hold in queue.ModeDaemon never joins a hold handed down
	// by a parent process.
	Mode queue.Mode
	// Command describes the holder in other processes' error messages.
	Command string
	// Wait is how long Acquire waits for a busy lock; 0 means not at all
	// (fail fast: a busy lock returns a *LockedError at once). The
	// context given to Acquire bounds the wait too.
	Wait time.Duration
}

// Hold is a hold on a store lock: an exclusive flock(2) on the lock file,
// taken with Acquire. Only the kernel releases a flock when its holder dies;
// scribe never breaks a lock because it is old and never unlinks the lock
// file.
//
// Holds are re-entrant within a process: asking again for a lock this
// process holds (from any goroutine) returns a nested hold on the same
// open file description, and the flock goes only when the last hold is
// released. A hold handed down by a `scribe lock` parent (ChildEnv) is
// joined the same way while that hold stands, and never after it ended;
// never in daemon mode, which contends like any other process.
// Each Hold must be released with Unlock exactly once.
type Hold struct {
	h    *lockState
	once sync.Once
}

// lockState is one process's flock on one lock file, shared by nested Holds.
type lockState struct {
	mu sync.Mutex // guards holder

	path      string
	key       fileKey
	f         *os.File
	inherited bool // the flock belongs to a parent: never LOCK_UN it
	refs      int
	holder    queue.Holder  // the identity written into the lock file (own holds)
	parent    *queue.Holder // the parent's identity, read when joining (inherited holds)
	// epoch is the hold's fencing token (guarded by mu): 0 until its
	// first user raises one (SetEpoch), or the parent's for an inherited
	// hold.
	epoch uint64

	token  string   // names this hold: in its identity and its children's environment
	gate   string   // the join gate of this hold's children (see joinInherited)
	store  string   // the real path of the store it is a hold of (its gate's folder)
	handed bool     // ChildEnv was called: the last Unlock waits at the gate (guarded by holds)
	joined *os.File // inherited holds: our shared flock on the gate
}

type fileKey struct{ dev, ino uint64 }

func (k fileKey) String() string { return fmt.Sprintf("%d:%d", k.dev, k.ino) }

// holds are this process's held store locks by lock-file identity.
var holds = struct {
	sync.Mutex
	m map[fileKey]*lockState
}{m: map[fileKey]*lockState{}}

// try takes the store lock without waiting. If another process holds it,
// the error is a *LockedError naming the holder (errors.Is(err,
// ErrLocked)).
func try(store string, o Options) (*Hold, error) {
	real, path, err := lockPathFor(store, o.LockPath)
	if err != nil {
		return nil, err
	}
	if o.Mode == "" {
		o.Mode = queue.ModeDirect
	}
	holds.Lock()
	defer holds.Unlock()
	for range 3 { // the file may be replaced between open and flock: retry
		h, retry, err := tryHold(real, path, o)
		if err != nil || !retry {
			return h, err
		}
	}
	return nil, fmt.Errorf("lock %s: the file keeps being replaced; something unlinks it", path)
}

// tryHold makes one attempt on the lock file path of the store real;
// holds must be locked.
func tryHold(real, path string, o Options) (_ *Hold, retry bool, err error) {
	f, err := openLockFile(path, os.O_RDWR|os.O_CREATE)
	if errors.Is(err, queue.ErrInsecure) || errors.Is(err, ErrNotLockFile) {
		return nil, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	key, err := keyOf(f)
	if err != nil {
		f.Close()
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	if path != DefaultPath(real) {
		// Holding it writes over it: the journal, linked in as a tool's
		// lock, would lose every outcome.
		fi, err := f.Stat()
		if err == nil {
			err = queue.Layout{Root: real}.CheckLockFileInfo(path, fi)
		}
		if err != nil {
			f.Close()
			return nil, false, fmt.Errorf("%w: %w", err, ErrNotLockFile)
		}
	}
	if h, ok := holds.m[key]; ok { // nested: share the hold
		f.Close()
		if h.inherited && o.Mode == queue.ModeDaemon {
			// A daemon outlives whatever started it: it never shares a
			// hold that belongs to a parent process (see below).
			return nil, false, &LockedError{Path: path}
		}
		if h.store != real {
			// A lock file shared by two stores guards each in turn: a
			// hold for the other store is another holder, whose epoch
			// and journal are that store's.
			return nil, false, &LockedError{Path: path}
		}
		h.refs++
		return &Hold{h: h}, false, nil
	}
	// A daemon never joins a hold handed down by a `scribe lock` parent:
	// it outlives that hold, and would apply queued jobs under it. It
	// contends like anyone instead.
	if o.Mode != queue.ModeDaemon {
		if h := joinInherited(real, path, key, f); h != nil {
			f.Close()
			holds.m[key] = h
			return &Hold{h: h}, false, nil
		}
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, &LockedError{Path: path}
		}
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	// The path may have been unlinked and recreated between open and
	// flock: then we locked a file nobody else will look at.
	if now, err := os.Stat(path); err != nil || !sameKey(now, key) {
		f.Close()
		return nil, true, nil
	}
	h := &lockState{path: path, key: key, f: f, refs: 1, token: crand.Text(), gate: queue.Layout{Root: real}.Join(), store: real}
	h.holder = newHolder(o.Mode, o.Command)
	h.holder.Token = h.token
	if err := h.setHolder(h.holder); err != nil {
		f.Close()
		return nil, false, err
	}
	holds.m[key] = h
	return &Hold{h: h}, false, nil
}

// Acquire takes the store lock of store, which must exist. If another
// process holds it, the error is a *LockedError naming the holder
// (errors.Is(err, ErrLocked)): at once, unless o.Wait is set; then it
// waits up to o.Wait, or until ctx ends, and returns the last
// *LockedError. While it waits it leaves a demand mark that a daemon's
// writer honours between batches by letting go for a grace period
// (Demanded). It polls with jittered backoff; only the kernel ever frees
// the lock.
//
// It finishes no batch an earlier holder was interrupted in: a caller
// that changes the store holds it through package writer (writer.Open,
// writer.Take), which does.
func Acquire(ctx context.Context, store string, o Options) (*Hold, error) {
	l, err := try(store, o)
	if o.Wait <= 0 || !errors.Is(err, ErrLocked) {
		return l, namedHolder(err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Wait)
	defer cancel()
	demand := markDemand(store)
	defer demand()
	for attempt := 0; ; attempt++ {
		d := min(time.Millisecond<<min(attempt, 6), 50*time.Millisecond)
		t := time.NewTimer(d/2 + rand.N(d/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, namedHolder(err)
		case <-t.C:
		}
		l, err = try(store, o)
		if !errors.Is(err, ErrLocked) {
			return l, err
		}
	}
}

// Unlock releases this hold. The flock itself goes with the last hold of
// the process: its identity is emptied first, while still held, so that a
// later non-scribe holder is not reported under our name. If the hold was
// handed to children (ChildEnv), the last Unlock first waits until every
// child that joined it has let go; meanwhile no child can join, and this
// process takes no other lock. Calling Unlock again is a no-op.
func (l *Hold) Unlock() error {
	var err error
	l.once.Do(func() {
		holds.Lock()
		defer holds.Unlock()
		h := l.h
		if h.refs--; h.refs > 0 {
			return
		}
		delete(holds.m, h.key)
		if h.inherited {
			// The parent's flock, on the parent's open file: not ours to
			// drop. Leaving the gate lets the parent's release go on.
			h.joined.Close()
			return
		}
		if h.handed {
			h.awaitJoined()
		}
		_ = h.f.Truncate(0)
		if e := unix.Flock(int(h.f.Fd()), unix.LOCK_UN); e != nil {
			err = fmt.Errorf("unlock %s: %w", h.path, e)
		}
		h.f.Close()
	})
	return err
}

// Path is the lock file.
func (l *Hold) Path() string { return l.h.path }

// File is the locked open file, for passing to a child process (see
// ChildEnv). It is not to be closed or unlocked by the caller.
func (l *Hold) File() *os.File { return l.h.f }

// ChildEnv is the environment that lets a child process given File() as
// descriptor fd join this hold while it stands: the lock file's identity,
// the hold's token and gate, and its epoch (Epoch). From
// then on the last Unlock waits for the children that joined.
func (l *Hold) ChildEnv(fd int) []string {
	h := l.h
	holds.Lock()
	h.handed = true
	holds.Unlock()
	if !h.inherited {
		_ = makeMeta(h.store) // the gate's folder; without it no child joins
	}
	epoch := l.Epoch()
	return []string{
		EnvLockFD + "=" + strconv.Itoa(fd),
		EnvLockID + "=" + h.key.String(),
		EnvLockFile + "=" + h.path,
		EnvLockToken + "=" + h.token,
		EnvLockGate + "=" + h.gate,
		EnvEpoch + "=" + strconv.FormatUint(epoch, 10),
	}
}

// Epoch is the fencing token of this hold: the epoch its first user
// raised (SetEpoch), or the parent's for a hold joined through ChildEnv;
// 0 while it has none. It stays readable after Unlock.
func (l *Hold) Epoch() uint64 {
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	return l.h.epoch
}

// SetEpoch records epoch, the fencing token its user raised for this
// hold, as the hold's: in its identity in the lock file, for an own hold
// (an inherited hold writes none), and for Epoch and ChildEnv. Nested
// holds share it.
func (l *Hold) SetEpoch(epoch uint64) error {
	h := l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	h.epoch = epoch
	if h.inherited {
		return nil
	}
	h.holder.Epoch = epoch
	return h.setHolder(h.holder)
}

// Token names this hold: nested holds of one process share it, and no
// other hold has it (an inherited hold has its parent's). It is in the
// hold's identity and in its children's environment (ChildEnv).
func (l *Hold) Token() string { return l.h.token }

// lockPathFor resolves a store (its real path) and its lock file: the
// store must exist, and the lock folder is created (0700) when it is
// scribe's own.
func lockPathFor(store, lockPath string) (real, path string, err error) {
	real, err = queue.ResolveStore(store)
	if err != nil {
		return "", "", err
	}
	if lockPath == "" {
		if err := makeMeta(real); err != nil {
			return "", "", err
		}
		return real, DefaultPath(real), nil
	}
	abs, err := filepath.Abs(lockPath)
	if err != nil {
		return "", "", err
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", "", fmt.Errorf("lock file %s: %w", lockPath, err)
	}
	path = filepath.Join(dir, filepath.Base(abs))
	if err := queue.CheckLockFile(path); err != nil {
		return "", "", fmt.Errorf("%w: %w", err, ErrNotLockFile)
	}
	return real, path, nil
}

// markDemand leaves the mark of a direct writer waiting for the store: a
// shared flock on <store>/.scribe/demand, which the kernel drops if the
// waiter dies. It returns the function that removes the mark.
func markDemand(store string) func() {
	real, err := queue.ResolveStore(store)
	if err != nil {
		return func() {}
	}
	// With a custom lock path nothing else may have made the folder yet.
	if err := makeMeta(real); err != nil {
		return func() {}
	}
	f, err := queue.OpenPrivate(queue.Layout{Root: real}.Demand(), os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return func() {}
	}
	if err := flockRetry(f, unix.LOCK_SH); err != nil {
		f.Close()
		return func() {}
	}
	return func() { f.Close() } // closing the last descriptor drops the flock
}

// flockRetry takes a flock on f, waiting for it, through interruptions.
func flockRetry(f *os.File, how int) error {
	for {
		if err := unix.Flock(int(f.Fd()), how); err != unix.EINTR {
			return err
		}
	}
}

// Demanded reports whether a direct writer is waiting for the store (see
// Acquire): a daemon's writer lets go between batches then. It takes the
// demand file's exclusive flock for an instant to find out; store is the
// store's real path.
func Demanded(store string) bool {
	f, err := queue.OpenPrivate(queue.Layout{Root: store}.Demand(), os.O_RDONLY, 0)
	if err != nil {
		return false // no demand file: nobody ever waited (or not one to trust)
	}
	defer f.Close()
	return errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
}

// CheckLockPath refuses a lock path that exists and is not a regular file
// (ErrNotLockFile: a folder, FIFO, socket, device or symlink).
func CheckLockPath(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("lock %s is a %s: %w", path, describeMode(fi.Mode()), ErrNotLockFile)
	}
	return nil
}

func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "folder"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "non-regular file"
}
