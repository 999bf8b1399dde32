package writer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/writer/internal/fault"
	"github.com/scribehq/scribe/writer/journal"
)

// materialize carries out changes and, if sync, makes them durable: each
// file is fsynced, then each folder whose entries changed (syncChanges
// does that later for changes carried out without). Removals go first,
// so that a folder may take the place of a file the batch removes. redo
// says that the changes may have been carried out in part already (by a
// holder that died, or an attempt that failed): appends then look at what
// the file holds before writing (see appendFile).
func materialize(t *tree, changes []journal.Change, redo, sync bool) error {
	ordered := make([]journal.Change, 0, len(changes))
	for _, c := range changes {
		if c.Kind == journal.ChangeRemove {
			ordered = append(ordered, c)
		}
	}
	for _, c := range changes {
		if c.Kind != journal.ChangeRemove {
			ordered = append(ordered, c)
		}
	}
	for _, c := range ordered {
		var err error
		switch {
		case redo && (c.Kind == journal.ChangeWrite || c.Kind == journal.ChangeRemove):
			err = redoWhole(t, c, sync)
		case c.Kind == journal.ChangeWrite:
			err = t.replace(c.Path, c.Data, c.Mode, sync)
		case c.Kind == journal.ChangeStaged:
			err = t.renameStaged(c, redo)
		case c.Kind == journal.ChangeAppend:
			err = appendFile(t, c, redo, sync)
		case c.Kind == journal.ChangeRemove:
			err = t.remove(c.Path)
		case c.Kind == journal.ChangeMkdir:
			var fd int
			if fd, err = t.openDir(c.Path, true); err == nil {
				unix.Close(fd)
			}
		default:
			err = fmt.Errorf("unknown change kind %q", c.Kind)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", c.Kind, c.Path, err)
		}
		fault.Crash("file")
	}
	if !sync {
		return nil
	}
	return syncDirs(t, changes)
}

// syncChanges makes changes carried out without sync durable: each file
// is fsynced (a staged one was, before it was renamed), then each folder
// whose entries changed. A file gone since (another program removed it)
// has nothing left to sync.
func syncChanges(t *tree, changes []journal.Change) error {
	synced := map[string]bool{} // a file appended to in several batches is synced once
	for _, c := range changes {
		if c.Kind != journal.ChangeWrite && c.Kind != journal.ChangeAppend || synced[c.Path] {
			continue
		}
		synced[c.Path] = true
		f, err := t.openFile(c.Path, unix.O_RDONLY, 0, false)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err != nil {
			return fmt.Errorf("sync %s: %w", c.Path, err)
		}
	}
	return syncDirs(t, changes)
}

// syncDirs fsyncs each folder whose entries changes changed: a rename, a
// removal or a new name changes the folder (an append to a file that was
// there changes only the file), and a new file's or folder's folders may
// be new too, and their entries must reach the disk as well: also on a
// redo, which finds folders a crashed attempt made and never synced.
func syncDirs(t *tree, changes []journal.Change) error {
	dirs := map[string]bool{}
	for _, c := range changes {
		switch {
		case c.Kind == journal.ChangeMkdir:
			for d := c.Path; d != "."; d = path.Dir(d) {
				dirs[path.Dir(d)] = true
			}
		case c.Kind != journal.ChangeRemove && c.New:
			for d := c.Path; d != "."; d = path.Dir(d) {
				dirs[path.Dir(d)] = true
			}
		case c.Kind != journal.ChangeAppend:
			dirs[path.Dir(c.Path)] = true
		}
	}
	for dir := range dirs {
		if err := t.syncDir(dir); err != nil {
			return err
		}
	}
	return nil
}

// appendFile adds c.Data at the end of the file and, if sync, syncs it. It never
// removes a byte another program wrote: in normal operation the data is
// written with O_APPEND, after whatever the file holds by then (a shell
// >> beside scribe keeps its lines). A redo first looks at the file from
// c.Base, the size the batch was decided on:
//   - the data is there, at c.Base or later: done already;
//   - what follows c.Base is no longer than the data, and each byte of it
//     is the data's own or zero (a write cut short, or a power loss that
//     left the size and not the bytes): overwrite it with the data;
//   - anything else (another program wrote there): append the data whole.
//
// So a redo overwrites at most scribe's own partial bytes, and cuts none.
func appendFile(t *tree, c journal.Change, redo, sync bool) error {
	flags := unix.O_WRONLY | unix.O_APPEND | unix.O_CREAT
	if redo {
		flags = unix.O_RDWR | unix.O_CREAT
	}
	f, err := t.openFile(c.Path, flags, perm(c), true)
	if err != nil {
		return err
	}
	defer f.Close()
	if redo {
		err = redoAppend(f, c)
	} else {
		_, err = f.Write(c.Data)
	}
	if err != nil {
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	return f.Close()
}

// redoWhole redoes a write or a removal of a file only where it did not
// happen: while the path still shows the file the batch found (c.Was), or
// none for a new file, or, for a write, scribe's own bytes cut short. A
// path that shows the write's data (another program may have appended
// since), or another file (another program replaced, rewrote, removed
// or made the file since), is left as it is, and synced: a redo removes
// nothing another program wrote. What is no file scribe may write (a
// folder in the way, a symlink, a folder above swapped) gets the change
// tried as it is, which fails to be reported, or retried. An intent of an
// earlier version, without Was, is redone as it is.
func redoWhole(t *tree, c journal.Change, sync bool) error {
	undone := c.Was == nil && !c.New
	f, err := t.openFile(c.Path, unix.O_RDONLY, 0, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		undone = undone || c.Kind == journal.ChangeWrite && c.New
	case err != nil:
		undone = true
	default:
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return err
		}
		e := entryOf(&st)
		switch {
		case c.Was != nil && e.key.ino == c.Was.Ino && e.size == c.Was.Size && e.mtime == c.Was.Mtime:
			undone = true
		case c.Kind == journal.ChangeWrite && e.size <= int64(len(c.Data)):
			b, err := io.ReadAll(f)
			if err != nil {
				return err
			}
			undone = undone || ownPartial(b, c.Data) && !bytes.Equal(b, c.Data)
		}
		if !undone && sync {
			return f.Sync() // done, but answered maybe before its sync
		}
	}
	switch {
	case !undone:
		return nil
	case c.Kind == journal.ChangeRemove:
		return t.remove(c.Path)
	default:
		return t.replace(c.Path, c.Data, c.Mode, sync)
	}
}

// perm is the mode a new file is created with: the replaced file's, or
// 0666 less the umask for a new one.
func perm(c journal.Change) fs.FileMode {
	if c.Mode == 0 {
		return 0o666
	}
	return c.Mode
}

func redoAppend(f *os.File, c journal.Change) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if size := fi.Size(); size > c.Base {
		tail := make([]byte, size-c.Base)
		if _, err := f.ReadAt(tail, c.Base); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		switch {
		case bytes.Contains(tail, c.Data):
			return nil
		case ownPartial(tail, c.Data):
			_, err := f.WriteAt(c.Data, c.Base)
			return err
		}
	}
	// At the end, whoever else appends meanwhile (O_APPEND is atomic).
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, flags|unix.O_APPEND)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(c.Data)
	return err
}

// ownPartial reports whether tail can only be a cut-short write of data:
// no longer than it, and each byte either data's or zero.
func ownPartial(tail, data []byte) bool {
	if len(tail) > len(data) {
		return false
	}
	for i, b := range tail {
		if b != data[i] && b != 0 {
			return false
		}
	}
	return true
}
