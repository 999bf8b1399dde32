package queue

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
)

// A store's .scribe folder holds what every scribe process trusts: the
// store lock and its holder's identity, the journal of recorded outcomes,
// the daemon's credentials, its queue, the autostart gate, the config
// file that says which commands the daemon runs. Whoever could change
// anything there could rewrite history, take the daemon over, or make the
// owner's processes write where they point. So every process, whatever
// brought it there (the daemon, a direct writer, a status look-up, an MCP
// server, a hook that starts a daemon), holds .scribe to one rule, here,
// before it reads or writes anything in it:
//
//   - the folder is a real folder (not a symlink), owned by this process's
//     user, writable by no one else (Layout.Check);
//   - each file is opened with O_NOFOLLOW and O_NONBLOCK, and the open
//     descriptor is checked: a regular file, owned by this process's user,
//     writable by no one else (OpenPrivate). What was checked is what is
//     read or written, whatever replaces the path in between, and no FIFO
//     or device can block the open.

// maxMetaFile bounds what is read of a small file in .scribe (the
// discovery file, the stranded marker): they are a few hundred bytes.
const maxMetaFile = 1 << 20

// ErrInsecure means a store's .scribe folder, or a file scribe trusts in
// it, could be changed by another user: it is group- or world-writable,
// owned by another user, a symlink, or not the kind of file expected.
// The error is an *InsecureError naming the path.
var ErrInsecure = errors.New("insecure store metadata")

// InsecureError says which path a process refused to trust, why, and what
// fixes it.
type InsecureError struct {
	// Path is the offending folder or file.
	Path string
	// Problem says what is wrong with it, e.g. "is world-writable (mode
	// drwxrwxrwx)".
	Problem string
	// Fix is a suggested remedy, empty if there is no simple one.
	Fix string
	// What names the file's role in the message, e.g. "journal" or
	// "config file"; empty names the path alone.
	What string
}

func (e *InsecureError) Error() string {
	name := e.Path
	if e.What != "" {
		name = e.What + " " + e.Path
	}
	msg := fmt.Sprintf("refusing %s: it %s; scribe trusts only real folders and regular files that its own user owns and no one else can write", name, e.Problem)
	if e.Fix != "" {
		msg += " (fix: " + e.Fix + ")"
	}
	return msg
}

// Is makes errors.Is(err, ErrInsecure) true.
func (e *InsecureError) Is(target error) bool { return target == ErrInsecure }

// Check checks the store's .scribe folder, if it exists, and each file in
// it that scribe trusts (Layout names them all) that exists: real folders
// and regular files, owned by this process's user, writable by no one
// else (CheckPrivate). A folder that does not exist holds nothing to
// trust. The error is an *InsecureError. It costs a dozen lstat calls;
// what is opened afterwards is checked again on its descriptor
// (OpenPrivate), since the path may change in between.
func (l Layout) Check() error {
	if err := CheckPrivatePath(l.Meta(), true); err != nil {
		return err
	}
	for _, e := range l.entries() {
		if err := CheckPrivatePath(e.path, e.dir); err != nil {
			return err
		}
	}
	return nil
}

// Make creates the store's .scribe folder (mode 0700) if it is missing,
// then checks it (Check). A folder it creates is made durable at once
// (the store folder is fsynced): the journal and the queue in it count
// on their folder surviving a power cut.
func (l Layout) Make() error {
	meta := l.Meta()
	err := os.Mkdir(meta, 0o700)
	switch {
	case err == nil:
		if err := SyncDir(l.Root); err != nil {
			return fmt.Errorf("create %s: %w", meta, err)
		}
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("create %s: %w", meta, err)
	}
	return l.Check()
}

// SyncDir fsyncs a folder, so that the entries made or renamed in it
// (a new file, a rename over an old one) survive a power cut.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// CheckPrivatePath applies CheckPrivate to what Lstat says of path (a
// folder if dir). A path that does not exist passes: there is nothing
// there to trust.
func CheckPrivatePath(path string, dir bool) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	return CheckPrivate(path, fi, dir)
}

// CheckPrivate applies the rules of .scribe to fi, what Lstat or an open
// descriptor's Stat says of path (a folder if dir): not a symlink, the
// right kind, owned by this process's user, neither group- nor
// world-writable. The error is an *InsecureError.
func CheckPrivate(path string, fi fs.FileInfo, dir bool) error {
	err := checkPrivate(path, fi, dir)
	if ie, ok := err.(*InsecureError); ok {
		ie.What = role(path)
	}
	return err
}

// euid is this process's effective user, asked once: scribe never
// changes it, and a look at .scribe checks a dozen files.
var euid = sync.OnceValue(os.Geteuid)

func checkPrivate(path string, fi fs.FileInfo, dir bool) error {
	mode := fi.Mode()
	kind, fix := "regular file", "chmod 600 "+path
	if dir {
		kind, fix = "folder", "chmod 700 "+path
	}
	switch {
	case mode&fs.ModeSymlink != 0:
		return &InsecureError{Path: path, Problem: "is a symlink; scribe wants a real " + kind + " here", Fix: "remove it"}
	case dir && !mode.IsDir(), !dir && !mode.IsRegular():
		return &InsecureError{Path: path, Problem: fmt.Sprintf("is not a %s but %s (mode %s)", kind, describeKind(mode), mode), Fix: "remove it"}
	}
	if uid, ok := fileOwner(fi); ok && int(uid) != euid() {
		return &InsecureError{
			Path:    path,
			Problem: fmt.Sprintf("is owned by uid %d, not by this process's user (uid %d)", uid, euid()),
			Fix:     "run scribe as its owner, or remove it",
		}
	}
	switch perm := mode.Perm(); {
	case perm&0o002 != 0:
		return &InsecureError{Path: path, Problem: fmt.Sprintf("is world-writable (mode %s)", mode), Fix: "check its content, then " + fix}
	case perm&0o020 != 0:
		return &InsecureError{Path: path, Problem: fmt.Sprintf("is group-writable (mode %s)", mode), Fix: "check its content, then " + fix}
	}
	return nil
}

// describeKind names a file's kind, with its article.
func describeKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsRegular():
		return "a regular file"
	}
	return "an irregular file"
}

// OpenPrivate opens a file held to the rules of .scribe (see CheckPrivate)
// with os.OpenFile's flag and perm. It adds O_NOFOLLOW, so a symlink is
// never followed, and O_NONBLOCK, so a FIFO or a device cannot block the
// open; then it checks the open descriptor, so the file checked is the
// file used, whatever replaces the path meanwhile. O_TRUNC is applied
// only once the file has passed (it would otherwise truncate a file not
// ours, for a process that may write it: root). A missing file is
// fs.ErrNotExist (unless flag creates it); a file that fails the rules
// is an *InsecureError, and is neither read nor changed.
func OpenPrivate(path string, flag int, perm fs.FileMode) (*os.File, error) {
	trunc := flag&os.O_TRUNC != 0
	f, err := os.OpenFile(path, flag&^os.O_TRUNC|privateFlags, perm)
	if err != nil {
		// A symlink (ELOOP), a folder opened for writing (EISDIR), a FIFO
		// with no reader (ENXIO): say what is there, by the rules.
		if cerr := CheckPrivatePath(path, false); cerr != nil && errors.Is(cerr, ErrInsecure) {
			return nil, cerr
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = CheckPrivate(path, fi, false)
	}
	if err == nil && trunc {
		err = f.Truncate(0)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadPrivate reads a file held to the rules of .scribe (OpenPrivate),
// of at most max bytes: a larger one is an error, not read beyond
// max+1 bytes. A missing file is fs.ErrNotExist.
func ReadPrivate(path string, max int64) ([]byte, error) {
	f, err := OpenPrivate(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, max)
	}
	return b, nil
}

// WritePrivate replaces the content of a file held to the rules of
// .scribe (OpenPrivate), creating it with mode 0600. It is not atomic:
// write a temporary file and rename it for that.
func WritePrivate(path string, data []byte) error {
	f, err := OpenPrivate(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
