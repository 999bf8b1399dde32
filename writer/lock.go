package writer

import (
	"context"
	"encoding/json"
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

	"github.com/gofrs/flock"
	"golang.org/x/sys/unix"

	"scribe/queue"
)

// Lock modes, recorded in the holder identity.
const (
	ModeDaemon = "daemon"
	ModeDirect = "direct"
)

// DefaultLockPath is the store lock file of a store: <store>/.scribe/lock.
func DefaultLockPath(store string) string {
	return filepath.Join(store, queue.MetaDir, "lock")
}

// MetaDir returns a store's private folder, creating it (mode 0700) if
// needed.
func MetaDir(store string) (string, error) {
	dir := filepath.Join(store, queue.MetaDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	return dir, nil
}

// Environment a `scribe lock` child receives so that scribe commands it
// runs join the parent's hold instead of waiting on it (docs/locking.md).
const (
	EnvLockFD   = "SCRIBE_LOCK_FD"   // the inherited descriptor number
	EnvLockID   = "SCRIBE_LOCK_ID"   // "<dev>:<inode>" of the lock file it locks
	EnvLockFile = "SCRIBE_LOCK_FILE" // the lock file's path
	EnvEpoch    = "SCRIBE_EPOCH"     // the epoch of the parent's hold
)

// LockOptions says which lock file to take and who takes it.
type LockOptions struct {
	// LockPath is the lock file; empty means DefaultLockPath(store). Set
	// it to share the lock an existing tool already takes.
	LockPath string
	// Mode is ModeDaemon or ModeDirect (the default), for the identity.
	Mode string
	// Command describes the holder in other processes' error messages.
	Command string
}

// Hold is a hold on a store lock: an exclusive flock(2) on the lock file.
// Only the kernel releases a flock when its holder dies; scribe never
// breaks a lock because it is old and never unlinks the lock file.
//
// Holds are re-entrant within a process: asking again for a lock this
// process holds (from any goroutine) returns a nested hold on the same
// open file description, and the flock goes only when the last hold is
// released. A hold inherited from a `scribe lock` parent is joined the same
// way. Each Hold must be released with Unlock exactly once.
type Hold struct {
	h    *lockState
	once sync.Once
}

// lockState is one process's flock on one lock file, shared by nested Holds.
type lockState struct {
	mu sync.Mutex // guards epoch and state

	path      string
	key       fileKey
	f         *os.File
	inherited bool // the flock belongs to a parent: never LOCK_UN it
	refs      int
	epoch     uint64  // set by the first Session under this hold
	state     *shared // the journal and root Sessions under this hold share
}

type fileKey struct{ dev, ino uint64 }

func (k fileKey) String() string { return fmt.Sprintf("%d:%d", k.dev, k.ino) }

// holds are this process's held store locks by lock-file identity.
var holds = struct {
	sync.Mutex
	m map[fileKey]*lockState
}{m: map[fileKey]*lockState{}}

// TryLock takes the store lock without waiting. If another process holds
// it, the error is a *LockedError naming the holder (errors.Is(err,
// ErrLocked)); contention is a result, not a fault.
func TryLock(store string, o LockOptions) (*Hold, error) {
	path, err := lockPathFor(store, o.LockPath)
	if err != nil {
		return nil, err
	}
	if o.Mode == "" {
		o.Mode = ModeDirect
	}
	holds.Lock()
	defer holds.Unlock()
	for range 3 { // the file may be replaced between open and flock: retry
		h, retry, err := tryHold(path, o)
		if err != nil || !retry {
			return h, err
		}
	}
	return nil, fmt.Errorf("lock %s: the file keeps being replaced; something unlinks it", path)
}

// tryHold makes one attempt; holds must be locked.
func tryHold(path string, o LockOptions) (_ *Hold, retry bool, err error) {
	if err := checkLockFile(path); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	key, err := keyOf(f)
	if err != nil {
		f.Close()
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	if h, ok := holds.m[key]; ok { // nested: share the hold
		f.Close()
		h.refs++
		return &Hold{h: h}, false, nil
	}
	if inh := inheritedFile(key); inh != nil {
		f.Close()
		h := &lockState{path: path, key: key, f: inh, inherited: true, refs: 1}
		if e, err := strconv.ParseUint(os.Getenv(EnvEpoch), 10, 64); err == nil {
			h.epoch = e
		}
		holds.m[key] = h
		return &Hold{h: h}, false, nil
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, &LockedError{Path: path, Holder: liveHolder(path)}
		}
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	// The path may have been unlinked and recreated between open and
	// flock: then we locked a file nobody else will look at.
	if now, err := os.Stat(path); err != nil || !sameKey(now, key) {
		f.Close()
		return nil, true, nil
	}
	h := &lockState{path: path, key: key, f: f, refs: 1}
	holder := NewHolder(o.Mode, o.Command)
	if err := h.setHolder(holder); err != nil {
		f.Close()
		return nil, false, err
	}
	holds.m[key] = h
	return &Hold{h: h}, false, nil
}

// Lock takes the store lock, waiting while another process holds it, until
// ctx ends (then it returns the last *LockedError). While it waits it
// leaves a demand mark that a daemon's writer honours between batches by
// letting go for a grace period. It polls with jittered backoff; only the
// kernel ever frees the lock.
func Lock(ctx context.Context, store string, o LockOptions) (*Hold, error) {
	l, err := TryLock(store, o)
	if !errors.Is(err, ErrLocked) {
		return l, err
	}
	demand := markDemand(store)
	defer demand()
	for attempt := 0; ; attempt++ {
		d := min(time.Millisecond<<min(attempt, 6), 50*time.Millisecond)
		if !sleep(ctx, d/2+rand.N(d/2+1)) {
			return nil, err
		}
		l, err = TryLock(store, o)
		if !errors.Is(err, ErrLocked) {
			return l, err
		}
	}
}

// WithLock runs fn holding the store lock (fail-fast) and releases it on
// every path out of fn: return, error or panic.
func WithLock(store string, o LockOptions, fn func(*Hold) error) error {
	l, err := TryLock(store, o)
	if err != nil {
		return err
	}
	defer l.Unlock()
	return fn(l)
}

// Unlock releases this hold. The flock itself goes with the last hold of
// the process: its identity is emptied first, while still held, so that a
// later non-scribe holder is not reported under our name. Calling Unlock
// again is a no-op.
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
			return // the parent's flock, on the parent's open file: not ours to drop
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
// descriptor fd join this hold.
func (l *Hold) ChildEnv(fd int, epoch uint64) []string {
	return []string{
		EnvLockFD + "=" + strconv.Itoa(fd),
		EnvLockID + "=" + l.h.key.String(),
		EnvLockFile + "=" + l.h.path,
		EnvEpoch + "=" + strconv.FormatUint(epoch, 10),
	}
}

// adopted is the inherited descriptor once joined, kept for the life of
// the process (guarded by holds): a second *os.File on the same number
// would close it under the first when either is garbage collected, and a
// later join would then find no descriptor and wait on its own parent.
var adopted struct {
	fd int
	f  *os.File
}

// inheritedFile returns the descriptor named by EnvLockFD if it is open on
// the lock file key and holds its flock, else nil. The descriptor is made
// close-on-exec: only an explicit hand-over passes it further. holds must
// be locked.
func inheritedFile(key fileKey) *os.File {
	if os.Getenv(EnvLockID) != key.String() {
		return nil
	}
	fd, err := strconv.Atoi(os.Getenv(EnvLockFD))
	if err != nil || fd < 3 {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || (fileKey{uint64(st.Dev), st.Ino}) != key {
		return nil
	}
	// On the same open file description that holds the flock this
	// succeeds at once; on any other it fails, and we do not trust it.
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return nil
	}
	if adopted.f == nil || adopted.fd != fd {
		unix.CloseOnExec(fd)
		adopted.fd, adopted.f = fd, os.NewFile(uintptr(fd), os.Getenv(EnvLockFile))
	}
	return adopted.f
}

func keyOf(f *os.File) (fileKey, error) {
	fi, err := f.Stat()
	if err != nil {
		return fileKey{}, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fileKey{uint64(st.Dev), st.Ino}, nil
}

func sameKey(fi os.FileInfo, k fileKey) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == k.dev && st.Ino == k.ino
}

// lockPathFor resolves the lock file of a store: the store must exist, and
// the lock folder is created (0700) when it is scribe's own.
func lockPathFor(store, lockPath string) (string, error) {
	real, err := queue.ResolveStore(store)
	if err != nil {
		return "", err
	}
	if lockPath == "" {
		if _, err := MetaDir(real); err != nil {
			return "", err
		}
		return DefaultLockPath(real), nil
	}
	abs, err := filepath.Abs(lockPath)
	if err != nil {
		return "", err
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", fmt.Errorf("lock file %s: %w", lockPath, err)
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
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
	if _, err := MetaDir(real); err != nil {
		return func() {}
	}
	fl := flock.New(DemandPath(real), flock.SetFlag(os.O_CREATE|os.O_RDONLY), flock.SetPermissions(0o600))
	if err := fl.RLock(); err != nil {
		return func() {}
	}
	return func() { _ = fl.Unlock() }
}

// DemandPath is the file direct writers hold a shared flock on while they
// wait for the store.
func DemandPath(store string) string {
	return filepath.Join(store, queue.MetaDir, "demand")
}

// Demanded reports whether a direct writer is waiting for the store. It
// takes the demand file's exclusive flock for an instant to find out.
func Demanded(store string) bool {
	fl := flock.New(DemandPath(store), flock.SetFlag(os.O_RDONLY))
	ok, err := fl.TryLock()
	if err != nil {
		return false // no demand file: nobody ever waited
	}
	if ok {
		_ = fl.Unlock()
	}
	return !ok
}

// checkLockFile refuses a lock path that exists and is not a regular file.
func checkLockFile(path string) error {
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

// setHolder records h in the lock file. It writes the new identity over
// the old one and only then truncates to its length, so a reader never sees
// an empty file while the lock is held.
func (h *lockState) setHolder(id queue.Holder) error {
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := h.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write holder %s: %w", h.path, err)
	}
	if err := h.f.Truncate(int64(len(b))); err != nil {
		return fmt.Errorf("write holder %s: %w", h.path, err)
	}
	return nil
}

// setEpoch records the hold's epoch in its identity.
func (h *lockState) setEpoch(epoch uint64) error {
	h.epoch = epoch
	if h.inherited {
		return nil
	}
	id, err := ReadHolder(h.path)
	if err != nil {
		return err
	}
	id.Epoch = epoch
	return h.setHolder(*id)
}

// ReadHolder reads the holder identity from a lock file. It returns nil and
// an error when the file holds none or garbage: callers then report an
// unknown holder.
func ReadHolder(path string) (*queue.Holder, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h queue.Holder
	if err := json.Unmarshal(b, &h); err != nil || h.PID == 0 {
		return nil, fmt.Errorf("lock %s holds no scribe identity", path)
	}
	return &h, nil
}

// liveHolder reads the identity in a busy lock file, discarding one that
// names a process of this host that no longer exists: a holder killed before
// it could clear the file, while someone else (without an identity) holds
// the lock now.
func liveHolder(path string) *queue.Holder {
	h, err := ReadHolder(path)
	if err != nil {
		return nil
	}
	if host, _ := os.Hostname(); h.Host == host && errors.Is(syscall.Kill(h.PID, 0), syscall.ESRCH) {
		return nil
	}
	return h
}

// NewHolder describes this process as a lock holder.
func NewHolder(mode, command string) queue.Holder {
	host, _ := os.Hostname()
	return queue.Holder{PID: os.Getpid(), Host: host, Mode: mode, Command: command, Since: time.Now().UTC()}
}
