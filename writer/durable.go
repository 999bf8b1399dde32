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

	"github.com/scribehq/scribe/queue"
)

// Kinds of fileChange.
const (
	changeWrite  = "write"  // replace the whole file with Data
	changeAppend = "append" // add Data at the end of the file (it had Base bytes when decided)
	changeRemove = "remove" // the file is gone
	changeMkdir  = "mkdir"  // the folder exists (the batch made it and emptied it again)
)

// fileChange is a batch's net effect on one file, stated so that carrying
// it out again after a partial attempt has the same result as once.
type fileChange struct {
	Path string      `json:"path"`
	Kind string      `json:"kind"`
	Data []byte      `json:"data,omitempty"`
	Base int64       `json:"base,omitempty"` // append: the file's size when the batch was decided
	Mode fs.FileMode `json:"mode,omitempty"` // the replaced file's mode; 0 for a new file
	New  bool        `json:"new,omitempty"`  // the file did not exist before the batch
}

// perm is the mode a new file is created with: the replaced file's, or
// 0666 less the umask for a new one.
func (c fileChange) perm() fs.FileMode {
	if c.Mode == 0 {
		return 0o666
	}
	return c.Mode
}

// intent is a batch decided but not yet on disk: committed to the journal
// before the first file changes, dropped by the commit that records the
// outcomes. If it is found on opening the journal, the batch is redone.
type intent struct {
	Epoch    uint64           `json:"epoch"`
	Changes  []fileChange     `json:"changes"`
	Outcomes []*queue.Outcome `json:"outcomes"`
	LastSeq  uint64           `json:"last_seq"`
}

// tmpSuffix marks the temporary file a write goes through. Its name is
// fixed per target: only the lock holder writes, and a redo reuses it.
const tmpSuffix = ".scribe-tmp"

// materialize carries out changes and makes them durable: each file is
// fsynced, then each folder whose entries changed. Removals go first, so
// that a folder may take the place of a file the batch removes. redo says
// that the changes may have been carried out in part already (by a holder
// that died, or an attempt that failed): appends then look at what the
// file holds before writing (see appendFile).
func materialize(t *tree, changes []fileChange, redo bool) error {
	dirs := map[string]bool{}
	ordered := make([]fileChange, 0, len(changes))
	for _, c := range changes {
		if c.Kind == changeRemove {
			ordered = append(ordered, c)
		}
	}
	for _, c := range changes {
		if c.Kind != changeRemove {
			ordered = append(ordered, c)
		}
	}
	for _, c := range ordered {
		var err error
		switch c.Kind {
		case changeWrite, changeAppend:
			if c.New {
				// A new file's folders may be new too, and their entries
				// must reach the disk as well: also on a redo, which finds
				// folders a crashed attempt made and never synced.
				for d := path.Dir(c.Path); d != "."; {
					d = path.Dir(d)
					dirs[d] = true
				}
			}
			if c.Kind == changeWrite {
				err = t.replace(c.Path, c.Data, c.Mode)
			} else {
				err = appendFile(t, c, redo)
			}
		case changeRemove:
			err = t.remove(c.Path)
		case changeMkdir:
			var fd int
			if fd, err = t.openDir(c.Path, true); err == nil {
				unix.Close(fd)
			}
			for d := c.Path; d != "."; d = path.Dir(d) {
				dirs[path.Dir(d)] = true
			}
		default:
			err = fmt.Errorf("unknown change kind %q", c.Kind)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", c.Kind, c.Path, err)
		}
		crashPoint("file")
		// A rename, a removal or a new name changes the folder; an append
		// to a file that was there changes only the file, synced above.
		if c.Kind != changeAppend || c.New {
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

// appendFile adds c.Data at the end of the file and syncs it. It never
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
func appendFile(t *tree, c fileChange, redo bool) error {
	flags := unix.O_WRONLY | unix.O_APPEND | unix.O_CREAT
	if redo {
		flags = unix.O_RDWR | unix.O_CREAT
	}
	f, err := t.openFile(c.Path, flags, c.perm(), true)
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
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

func redoAppend(f *os.File, c fileChange) error {
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
