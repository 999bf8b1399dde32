package lock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/scribehq/scribe/queue"
)

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

// namedHolder fills in the holder of a *LockedError that Acquire returns
// (once, not at each attempt of a wait): the identity in the file, as
// ProbeLock (and so scribe status) reads it. A live process that wrote
// its identity there, let go and went on running is not taken for
// whoever holds the lock now (flock(1), say).
func namedHolder(err error) error {
	var le *LockedError
	if errors.As(err, &le) {
		_, _, le.Holder = ProbeLock(le.Path)
	}
	return err
}

// newHolder describes this process as a lock holder.
func newHolder(mode queue.Mode, command string) queue.Holder {
	host, _ := os.Hostname()
	return queue.Holder{PID: os.Getpid(), Host: host, Mode: mode, Command: command, Since: time.Now().UTC(), Start: selfStart()}
}
