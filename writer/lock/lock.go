package lock

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	if err := checkLockFile(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		if cerr := checkLockFile(path); cerr != nil { // replaced since
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
	store  string   // the store's real path (own holds), for the gate's folder
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
	if h, ok := holds.m[key]; ok { // nested: share the hold
		f.Close()
		if h.inherited && o.Mode == queue.ModeDaemon {
			// A daemon outlives whatever started it: it never shares a
			// hold that belongs to a parent process (see below).
			return nil, false, &LockedError{Path: path, Holder: busyHolder(path)}
		}
		h.refs++
		return &Hold{h: h}, false, nil
	}
	// A daemon never joins a hold handed down by a `scribe lock` parent:
	// it outlives that hold, and would apply queued jobs under it. It
	// contends like anyone instead.
	if o.Mode != queue.ModeDaemon {
		if h := joinInherited(path, key, f); h != nil {
			f.Close()
			holds.m[key] = h
			return &Hold{h: h}, false, nil
		}
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, &LockedError{Path: path, Holder: busyHolder(path)}
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
		return l, err
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
			return nil, err
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

// InheritedHold reports whether this process was handed a hold on the
// store's lock (lockPath, or the default) that still stands: by `scribe
// lock`, or by the daemon that runs it as an exec command (see
// ChildEnv). A write then joins that hold, whereas a job queued to the
// daemon would wait for the holder, which may be waiting for this very
// process. It changes nothing on disk.
func InheritedHold(store, lockPath string) bool {
	id, token := os.Getenv(EnvLockID), os.Getenv(EnvLockToken)
	if id == "" || token == "" {
		return false
	}
	path := lockPath
	if path == "" {
		real, err := queue.ResolveStore(store)
		if err != nil {
			return false
		}
		path = DefaultPath(real)
	}
	fi, err := os.Stat(path)
	if err != nil || !sameKey(fi, parseKey(id)) {
		return false
	}
	h, err := ReadHolder(path)
	return err == nil && h != nil && h.Token == token
}

// openGate opens a join gate, through an open file description of its
// own, held to the rules of .scribe.
func openGate(path string) (*os.File, error) {
	return queue.OpenPrivate(path, os.O_RDONLY|os.O_CREATE, 0o600)
}

// awaitJoined starts the release of a hold handed to children: it
// withdraws the hold's token from the identity, so that no child joins
// from now on, then waits until those that joined have left the gate.
// Only then may the flock go. holds must be locked.
func (h *lockState) awaitJoined() {
	h.mu.Lock()
	id := h.holder
	id.Token = ""
	_ = h.setHolder(id)
	h.mu.Unlock()
	g, err := openGate(h.gate)
	if err != nil {
		return // a child cannot have joined through a gate we cannot open
	}
	defer g.Close()
	for {
		if err := unix.Flock(int(g.Fd()), unix.LOCK_EX); err != unix.EINTR {
			return
		}
	}
}

// adopted is the inherited descriptor once joined, kept for the life of
// the process (guarded by holds): a second *os.File on the same number
// would close it under the first when either is garbage collected, and a
// later join would then find no descriptor and wait on its own parent.
// Once the hold it belongs to is over, it is closed and gone is set.
var adopted struct {
	fd   int
	f    *os.File
	gone bool
}

// joinInherited joins the hold a parent handed down (EnvLockFD and the
// rest) if it is a hold on the lock file key, which this process has just
// opened as f, and that hold still stands; else it returns nil and the
// caller contends like anyone. holds must be locked.
//
// The descriptor alone proves nothing: after the parent has let go (LOCK_UN)
// a flock on it simply takes the lock again, and every process that kept a
// copy shares that one open file description, so all of them would "hold"
// it at once. join therefore flocks it only once the parent's identity
// shows that its hold stands, behind the gate that keeps it standing.
func joinInherited(path string, key fileKey, f *os.File) *lockState {
	if adopted.gone || os.Getenv(EnvLockID) != key.String() {
		return nil
	}
	fd, err := strconv.Atoi(os.Getenv(EnvLockFD))
	if err != nil || fd < 3 || fd == int(f.Fd()) {
		return nil
	}
	if adopted.f == nil || adopted.fd != fd {
		// A descriptor handed down across exec is not close-on-exec; one
		// that is was opened by this process, whatever its number.
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			return nil
		}
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || (fileKey{uint64(st.Dev), st.Ino}) != key {
		return nil
	}
	h, over := join(fd, path, key, f)
	if over {
		// Our copy can only keep a dead holder's flock alive or be taken
		// again: close it. Closing a copy never frees a live holder's
		// flock (the holder has its own); if ours was the last copy of a
		// dead holder's description, the kernel frees the lock as it
		// would at our exit.
		if adopted.f != nil && adopted.fd == fd {
			adopted.f.Close()
			adopted.f = nil
		} else {
			unix.Close(fd)
		}
		adopted.gone = true
	}
	return h
}

// join joins the hold whose descriptor fd (open on the lock file key, like
// f) a parent handed down, if it stands. over reports that it does not
// and never will again: the parent has let go, begun to, or died.
//
// The parent (see Unlock and awaitJoined) writes its identity with the
// token after taking the flock; when it lets go it first withdraws the
// token, then takes the gate exclusively, waiting for joined children,
// and only then truncates the identity and unlocks. A child takes the gate
// shared, without waiting, then reads the identity. So:
//
//   - Gate refused: the parent holds it, it is letting go. Not joined.
//   - Gate taken, token present: the parent had not begun to let go when
//     we took the gate, and cannot unlock until we leave it. The flock on
//     the parent's description stands, and a flock on fd succeeds without
//     taking anything exactly when fd is that description. Joined; we
//     keep the gate until our last Unlock.
//   - Gate taken, token absent (withdrawn, truncated, or another hold's):
//     the hold is over, whenever the parent's unlock comes or came. fd is
//     never flocked, so a released lock is never taken through it.
//   - Token present, parent dead (SIGKILL: nobody withdrew it): while any
//     process has the description open the kernel keeps its flock, and
//     nobody else can get in; but that hold has no owner any more, and
//     siblings sharing the description would all join it. Over.
//   - Parent dies after our check (or after we joined): the flock stays
//     with the description, which we have open; we finish under it and
//     nobody else gets in.
//
// A child never unlocks the parent's flock, in any of these cases.
func join(fd int, path string, key fileKey, f *os.File) (_ *lockState, over bool) {
	token, gatePath := os.Getenv(EnvLockToken), os.Getenv(EnvLockGate)
	if token == "" || gatePath == "" {
		return nil, true // a hold that gives no token cannot be checked
	}
	gate, err := openGate(gatePath)
	if err != nil {
		return nil, false
	}
	if unix.Flock(int(gate.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil {
		gate.Close()
		return nil, false
	}
	id, err := readIdentity(f, path)
	host, _ := os.Hostname()
	if err != nil || id.Token != token || id.Host != host || !processAlive(id.PID, id.Start) {
		gate.Close()
		return nil, true
	}
	// On the description that holds the flock this succeeds at once; on
	// any other it fails (the parent holds it), and we do not trust it.
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		gate.Close()
		return nil, false
	}
	if adopted.f == nil || adopted.fd != fd {
		unix.CloseOnExec(fd)
		adopted.fd, adopted.f = fd, os.NewFile(uintptr(fd), os.Getenv(EnvLockFile))
	}
	return &lockState{path: path, key: key, f: adopted.f, inherited: true, refs: 1, parent: id,
		token: token, gate: gatePath, joined: gate, epoch: parentEpoch(id)}, false
}

func keyOf(f *os.File) (fileKey, error) {
	fi, err := f.Stat()
	if err != nil {
		return fileKey{}, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fileKey{uint64(st.Dev), st.Ino}, nil
}

// parseKey reads a fileKey's String, the zero key if s is not one.
func parseKey(s string) fileKey {
	dev, ino, ok := strings.Cut(s, ":")
	d, err1 := strconv.ParseUint(dev, 10, 64)
	i, err2 := strconv.ParseUint(ino, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return fileKey{}
	}
	return fileKey{d, i}
}

// parentEpoch is the epoch of a hold handed down by a parent process: the
// one in the parent's identity or, from a parent that relays a hold it
// joined itself (and so writes no identity), the one in its environment.
// It is 0 for a parent that gave none: then the first user of the hold
// raises one.
func parentEpoch(parent *queue.Holder) uint64 {
	if parent != nil && parent.Epoch != 0 {
		return parent.Epoch
	}
	epoch, _ := strconv.ParseUint(os.Getenv(EnvEpoch), 10, 64)
	return epoch
}

func sameKey(fi os.FileInfo, k fileKey) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == k.dev && st.Ino == k.ino
}

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

// ReadHolder reads the holder identity from a lock file: scribe's own, or
// the "\x00<pid> <argv…>" another tool writes (decodeHolder). It returns
// nil and an error when the file holds none or garbage: callers then report
// an unknown holder.
func ReadHolder(path string) (*queue.Holder, error) {
	f, err := openLockFile(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readIdentity(f, path)
}

// readIdentity reads the identity through f, an open file on the lock file
// path: the file whose inode we know, whatever the path names now.
func readIdentity(f *os.File, path string) (*queue.Holder, error) {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if err != nil {
		return nil, err
	}
	h, err := decodeHolder(b, path)
	if err == nil && h.Since.IsZero() {
		// Another tool's identity has no time: it wrote it when it took
		// the lock, so the file's modification time stands in.
		if fi, err := f.Stat(); err == nil {
			h.Since = fi.ModTime().UTC()
		}
	}
	return h, err
}

// decodeHolder reads an identity: scribe's JSON line, or the one a tool
// that shares the lock file writes, a NUL byte, its pid in decimal, a
// space and its command line ("\x00<pid> <argv…>"). The latter gives a
// Holder with that PID and Command, this host (a flock is the local
// kernel's), no Mode and no Since (readIdentity takes the file's time).
func decodeHolder(b []byte, path string) (*queue.Holder, error) {
	if pid, command, ok := foreignIdentity(b); ok {
		host, _ := os.Hostname()
		return &queue.Holder{PID: pid, Host: host, Command: command}, nil
	}
	var h queue.Holder
	if err := json.Unmarshal(b, &h); err != nil || h.PID == 0 {
		return nil, fmt.Errorf("lock %s holds no scribe identity", path)
	}
	return &h, nil
}

// foreignIdentity parses "\x00<pid> <argv…>": a NUL byte, 1-10 decimal
// digits of a positive pid, then, after one space, the command line, whose
// words may be separated by spaces or NUL bytes (both read as spaces).
// Trailing NULs and white space are dropped; bytes that are not UTF-8
// become U+FFFD.
func foreignIdentity(b []byte) (pid int, command string, ok bool) {
	rest, ok := bytes.CutPrefix(b, []byte{0})
	if !ok {
		return 0, "", false
	}
	rest = bytes.TrimRight(rest, "\x00 \t\r\n")
	digits, argv, _ := bytes.Cut(rest, []byte{' '})
	if len(digits) == 0 || len(digits) > 10 || bytes.ContainsFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, "", false
	}
	n, err := strconv.ParseInt(string(digits), 10, 32)
	if err != nil || n <= 0 {
		return 0, "", false
	}
	argv = bytes.ReplaceAll(argv, []byte{0}, []byte{' '})
	return int(n), strings.ToValidUTF8(string(argv), "\uFFFD"), true
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
	if onThisHost(h) && !processAlive(h.PID, h.Start) {
		return nil
	}
	return h
}

// onThisHost says whether the identity h names a process of this host.
func onThisHost(h *queue.Holder) bool {
	host, _ := os.Hostname()
	return h.Host == host
}

// busyHolder is who holds the busy lock on path, for the error that says
// so: the identity in the file, as ProbeLock (and so scribe status) reads
// it. A live process that wrote its identity there, let go and went on
// running is not taken for whoever holds the lock now (flock(1), say).
func busyHolder(path string) *queue.Holder {
	_, _, h := ProbeLock(path)
	return h
}

// newHolder describes this process as a lock holder.
func newHolder(mode queue.Mode, command string) queue.Holder {
	host, _ := os.Hostname()
	return queue.Holder{PID: os.Getpid(), Host: host, Mode: mode, Command: command, Since: time.Now().UTC(), Start: selfStart()}
}
