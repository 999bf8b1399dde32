package lock

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
)

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
// rest) if it is a hold of the store real on the lock file key, which
// this process has just opened as f, and that hold still stands; else it
// returns nil and the caller contends like anyone. holds must be locked.
// (A hold of another store that shares the lock file is not joined: its
// epoch is that store's journal's.)
//
// The descriptor alone proves nothing: after the parent has let go (LOCK_UN)
// a flock on it simply takes the lock again, and every process that kept a
// copy shares that one open file description, so all of them would "hold"
// it at once. join therefore flocks it only once the parent's identity
// shows that its hold stands, behind the gate that keeps it standing.
func joinInherited(real, path string, key fileKey, f *os.File) *lockState {
	if adopted.gone || os.Getenv(EnvLockID) != key.String() || os.Getenv(EnvLockGate) != (queue.Layout{Root: real}).Join() {
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
	if h != nil {
		h.store = real
	}
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
