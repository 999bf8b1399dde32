package writer

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// tree is a store's folder as the writer reaches into it: from a descriptor
// on the store folder, one name at a time, with O_NOFOLLOW on every
// component. A symlink anywhere in a path, however the tree changes between
// deciding a batch and carrying it out, makes the operation fail instead of
// being followed, and no folder on the way may be scribe's own: no job can
// reach .scribe/ (os.Root would follow a symlink that stays inside the
// store, such as d → .scribe).
type tree struct {
	dir *os.File // the store folder
	// protected are the keys of scribe's own folder and files (.scribe,
	// the lock file, the journal): no op may open them.
	protected []fileKey
}

// fileKey is a file's identity: its device and inode.
type fileKey struct{ dev, ino uint64 }

// tmpSuffix marks the temporary file a write goes through. Its name is
// fixed per target: only the lock holder writes, and a redo reuses it.
const tmpSuffix = ".scribe-tmp"

// errSymlink reports a symlink where a path needs a folder or a file.
var errSymlink = errors.New("is a symlink; scribe does not follow symlinks in a store")

// errProtected reports a path that leads into scribe's own files.
var errProtected = errors.New("leads into scribe's own folder")

// pathError is a failure to reach a path of the store: its cause is the
// path's shape (a symlink, a file where a folder should be, a name too
// long) or an I/O fault, told apart by classify.
type pathError struct {
	Path string
	Err  error
}

func (e *pathError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *pathError) Unwrap() error { return e.Err }

func openTree(dir string) (*tree, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	return &tree{dir: os.NewFile(uintptr(fd), dir)}, nil
}

// Name is the store folder's path.
func (t *tree) Name() string { return t.dir.Name() }

// Close closes the store folder.
func (t *tree) Close() error { return t.dir.Close() }

func (t *tree) isProtected(k fileKey) bool {
	for _, p := range t.protected {
		if p == k {
			return true
		}
	}
	return false
}

// openDir opens the folder dir ("." for the store itself), walking one
// name at a time without following symlinks, and creating missing folders
// (mode 0755 less the umask) if create. The caller closes the descriptor.
func (t *tree) openDir(dir string, create bool) (int, error) {
	fd, err := unix.Dup(int(t.dir.Fd()))
	if err != nil {
		return -1, err
	}
	if dir == "." || dir == "" {
		return fd, nil
	}
	walked := ""
	for seg := range strings.SplitSeq(dir, "/") {
		walked = path.Join(walked, seg)
		next, err := openat(fd, seg, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, seg, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = openat(fd, seg, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, &pathError{walked, folderErr(err)}
		}
		fd = next
		k, err := fdKey(fd)
		if err != nil {
			unix.Close(fd)
			return -1, &pathError{walked, err}
		}
		if t.isProtected(k) {
			unix.Close(fd)
			return -1, &pathError{walked, errProtected}
		}
	}
	return fd, nil
}

// openat opens name in the folder dirfd, never following a symlink, retrying
// on EINTR.
func openat(dirfd int, name string, flags int, perm fs.FileMode) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm))
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// folderErr explains why a name could not be opened as a folder: with
// O_NOFOLLOW|O_DIRECTORY a symlink fails with ELOOP (or ENOTDIR on older
// kernels), so look at what is there.
func folderErr(err error) error {
	if errors.Is(err, unix.ELOOP) {
		return errSymlink
	}
	return err
}

// entry is what lstat finds at a path.
type entry struct {
	mode  fs.FileMode // with fs.ModeSticky for a folder with the sticky bit
	size  int64
	nlink uint64
	key   fileKey
	mtime int64 // nanoseconds
	uid   uint32
}

// lstat describes p itself (a symlink is not followed) and fails with
// fs.ErrNotExist when p, or a folder above it, does not exist.
func (t *tree) lstat(p string) (entry, error) {
	fd, err := t.openDir(path.Dir(p), false)
	if err != nil {
		return entry{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstatat(fd, path.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return entry{}, &pathError{p, err}
	}
	return entryOf(&st), nil
}

func entryOf(st *unix.Stat_t) entry {
	m := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	if st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return entry{mode: m, size: st.Size, nlink: uint64(st.Nlink), key: fileKey{uint64(st.Dev), st.Ino}, mtime: st.Mtim.Nano(), uid: st.Uid}
}

func fdKey(fd int) (fileKey, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileKey{}, err
	}
	return fileKey{uint64(st.Dev), st.Ino}, nil
}

// openFile opens the regular file p with flags (O_NOFOLLOW is added), and
// refuses anything that is not a regular file with one name outside
// scribe's own files. New files get perm less the umask.
func (t *tree) openFile(p string, flags int, perm fs.FileMode, createDirs bool) (*os.File, error) {
	dfd, err := t.openDir(path.Dir(p), createDirs)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := openat(dfd, path.Base(p), flags|unix.O_NONBLOCK, perm)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			err = errSymlink
		}
		return nil, &pathError{p, err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &pathError{p, err}
	}
	e := entryOf(&st)
	switch {
	case !e.mode.IsRegular():
		err = fmt.Errorf("is a %s, not a regular file", describeMode(e.mode))
	case t.isProtected(e.key):
		err = errProtected
	case e.nlink > 1:
		err = fmt.Errorf("has %d hard links; scribe writes only files with one name", e.nlink)
	}
	if err != nil {
		unix.Close(fd)
		return nil, &pathError{p, err}
	}
	// O_NONBLOCK only kept a FIFO swapped in from blocking the open.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &pathError{p, err}
	}
	return os.NewFile(uintptr(fd), path.Join(t.Name(), p)), nil
}

// readFile returns the content of the regular file p.
func (t *tree) readFile(p string) ([]byte, error) {
	f, err := t.openFile(p, unix.O_RDONLY, 0, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// access reports whether this process may change p: with W_OK on a file,
// W_OK|X_OK on a folder. It uses the real ids, like access(2), as the
// writer runs with them.
func (t *tree) access(p string, mode uint32) error {
	dfd, err := t.openDir(path.Dir(p), false)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	name := path.Base(p)
	if p == "." {
		name = "."
	}
	return unix.Faccessat(dfd, name, mode, 0)
}

// remove removes the file p; a missing file (or folder above it) is not
// an error.
func (t *tree) remove(p string) error {
	dfd, err := t.openDir(path.Dir(p), false)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	err = unix.Unlinkat(dfd, path.Base(p), 0)
	// A folder there now means the file is gone already: a redo finds the
	// folder the batch itself made in its place.
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EISDIR) {
		return &pathError{p, err}
	}
	return nil
}

// replace atomically replaces p with data, through its temp file
// (writeTemp), synced before the rename if sync.
func (t *tree) replace(p string, data []byte, mode fs.FileMode, sync bool) error {
	dfd, tmp, err := t.writeTemp(p, data, mode, sync)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Renameat(dfd, tmp, dfd, path.Base(p)); err != nil {
		return &pathError{p, err}
	}
	return nil
}

// tempName is the temp file beside the file name: where replace and stage
// write its new content.
func tempName(name string) string { return "." + name + tmpSuffix }

// writeTemp writes data, with mode (0666 less the umask if 0), to the temp
// file beside p, making p's folders if missing, and syncs it if sync. It
// returns the folder's descriptor, which the caller closes, and the temp
// file's name in it. A temp file that fails is removed.
func (t *tree) writeTemp(p string, data []byte, mode fs.FileMode, sync bool) (dfd int, tmp string, err error) {
	dfd, tmp, f, err := t.createTemp(p, data, mode)
	if err != nil {
		return -1, "", err
	}
	if sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		unix.Close(dfd)
		return -1, "", &pathError{p, err}
	}
	return dfd, tmp, nil
}

// createTemp is writeTemp without its sync, the temp file left open for
// the caller to sync and close: never opened again by name, where another
// program may have put something else (a FIFO, whose open would block)
// meanwhile.
func (t *tree) createTemp(p string, data []byte, mode fs.FileMode) (dfd int, tmp string, f *os.File, err error) {
	dfd, err = t.openDir(path.Dir(p), true)
	if err != nil {
		return -1, "", nil, err
	}
	tmp = tempName(path.Base(p))
	// Remove what a crashed attempt (or anyone) left at the temp name and
	// create it afresh with O_EXCL: never write through what is there.
	if err := unix.Unlinkat(dfd, tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		unix.Close(dfd)
		return -1, "", nil, &pathError{path.Join(path.Dir(p), tmp), err}
	}
	perm := mode
	if perm == 0 {
		perm = 0o666
	}
	fd, err := openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, perm)
	if err != nil {
		unix.Close(dfd)
		return -1, "", nil, &pathError{path.Join(path.Dir(p), tmp), err}
	}
	f = os.NewFile(uintptr(fd), tmp)
	if mode != 0 { // keep a replaced file's mode exactly, whatever the umask
		err = f.Chmod(mode)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if err != nil {
		f.Close()
		_ = unix.Unlinkat(dfd, tmp, 0)
		unix.Close(dfd)
		return -1, "", nil, &pathError{p, err}
	}
	return dfd, tmp, f, nil
}

// syncDir fsyncs the folder dir, so that names created, renamed or removed
// in it survive a power loss.
func (t *tree) syncDir(dir string) error {
	fd, err := t.openDir(dir, false)
	if err != nil {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	return nil
}

func keyOfInfo(fi os.FileInfo) fileKey {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileKey{uint64(st.Dev), st.Ino}
	}
	return fileKey{}
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
