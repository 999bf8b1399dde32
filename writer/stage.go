package writer

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/writer/journal"
)

// stageBytes is the size from which a file a batch writes whole is staged
// instead of kept in the journal's intent: its data is then written once
// on the store's disk, to the file's temp file, where the journal would
// hold a second copy beside the file's.
const stageBytes = 64 << 10

// stage writes the data of each change in changes that writes a file whole
// with at least stageBytes to the file's temp file, syncs the temp files
// (together, so that the disk takes their data at once, as it does that of
// processes that each sync their own file) and the folders their names
// are in, and turns each change, in place, into a journal.ChangeStaged
// that names the temp file by size and checksum: carrying it out is then a
// rename (renameStaged). It runs before the batch's intent is recorded, so
// that no intent names a temp file a power loss could take back. A failed
// batch records nothing; what it staged is overwritten by the next write
// of the file.
func stage(t *tree, changes []journal.Change) error {
	var staged []journal.Change
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for i := range changes {
		c := &changes[i]
		if c.Kind != journal.ChangeWrite || len(c.Data) < stageBytes {
			continue
		}
		dfd, _, f, err := t.createTemp(c.Path, c.Data, c.Mode)
		if err != nil {
			return fmt.Errorf("stage %s: %w", c.Path, err)
		}
		unix.Close(dfd)
		files = append(files, f)
		c.Kind, c.Size, c.Sum, c.Data = journal.ChangeStaged, int64(len(c.Data)), crc32.Checksum(c.Data, castagnoli()), nil
		staged = append(staged, *c)
	}
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() { errs[i] = f.Sync() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("stage %s: %w", staged[i].Path, err)
		}
	}
	return syncDirs(t, staged)
}

// renameStaged carries out a staged change: its temp file is renamed over
// the file. A redo first checks that the temp file holds what was staged
// (its size and checksum). If it is gone, or holds other bytes (a later
// batch's, staged and not recorded), the rename was done: only a rename
// takes a synced temp file away, and only the next write of the file
// stages another. Whatever the file holds then is newer, and is kept.
func (t *tree) renameStaged(c journal.Change, redo bool) error {
	dfd, err := t.openDir(path.Dir(c.Path), false)
	if redo && errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	tmp := tempName(path.Base(c.Path))
	if redo {
		if ok, err := holdsStaged(dfd, tmp, c); err != nil || !ok {
			return err
		}
	}
	if err := unix.Renameat(dfd, tmp, dfd, path.Base(c.Path)); err != nil {
		return &pathError{c.Path, err}
	}
	return nil
}

// holdsStaged reports whether the file tmp in the folder dfd is the regular
// file c staged: c.Size bytes of checksum c.Sum.
func holdsStaged(dfd int, tmp string, c journal.Change) (bool, error) {
	fd, err := openat(dfd, tmp, unix.O_RDONLY|unix.O_NONBLOCK, 0) // a FIFO there must not hang the redo
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
		return false, nil
	}
	if err != nil {
		return false, &pathError{path.Join(path.Dir(c.Path), tmp), err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, &pathError{path.Join(path.Dir(c.Path), tmp), err}
	}
	if !fi.Mode().IsRegular() || fi.Size() != c.Size {
		return false, nil
	}
	h := crc32.New(castagnoli())
	if _, err := io.Copy(h, f); err != nil {
		return false, &pathError{path.Join(path.Dir(c.Path), tmp), err}
	}
	return h.Sum32() == c.Sum, nil
}

// castagnoli is the CRC-32C table, made on first use rather than at
// start: every hook process links this package.
func castagnoli() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) }
