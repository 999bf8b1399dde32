package writer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"

	"scribe/queue"
)

// Kinds of fileChange.
const (
	changeWrite  = "write"  // replace the whole file with Data
	changeAppend = "append" // the file is its first Base bytes followed by Data
	changeRemove = "remove" // the file is gone
)

// fileChange is a batch's net effect on one file, stated so that carrying
// it out twice has the same result as once: recovery redoes it blindly.
type fileChange struct {
	Path string      `json:"path"`
	Kind string      `json:"kind"`
	Data []byte      `json:"data,omitempty"`
	Base int64       `json:"base,omitempty"`
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
// fsynced, then each folder whose entries changed.
func materialize(root *os.Root, changes []fileChange) error {
	dirs := map[string]bool{}
	for _, c := range changes {
		var err error
		switch c.Kind {
		case changeWrite, changeAppend:
			if err = mkdirParents(root, c.Path); err != nil {
				break
			}
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
				err = writeFile(root, c)
			} else {
				err = appendFile(root, c)
			}
		case changeRemove:
			err = root.Remove(c.Path)
			if errors.Is(err, fs.ErrNotExist) {
				err = nil
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
		if err := syncDir(root, dir); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(root *os.Root, c fileChange) error {
	tmp := path.Join(path.Dir(c.Path), "."+path.Base(c.Path)+tmpSuffix)
	// Remove what a crashed attempt (or anyone) left at the temp name and
	// create it afresh: opening it as found would follow a symlink there and
	// overwrite another file.
	if err := root.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, c.perm())
	if err != nil {
		return err
	}
	if c.Mode != 0 { // replacing a file: keep its mode exactly, whatever the umask
		if err := f.Chmod(c.Mode); err != nil {
			f.Close()
			return err
		}
	}
	if _, err := f.Write(c.Data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return root.Rename(tmp, c.Path)
}

func appendFile(root *os.Root, c fileChange) error {
	f, err := root.OpenFile(c.Path, os.O_WRONLY|os.O_CREATE, c.perm())
	if err != nil {
		return err
	}
	defer f.Close()
	// Cut anything a crashed attempt at this same change left, then write:
	// redoing the change yields the same bytes.
	if err := f.Truncate(c.Base); err != nil {
		return err
	}
	if _, err := f.WriteAt(c.Data, c.Base); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// mkdirParents creates the folders above p.
func mkdirParents(root *os.Root, p string) error {
	if dir := path.Dir(p); dir != "." {
		return root.MkdirAll(dir, 0o755)
	}
	return nil
}

func syncDir(root *os.Root, dir string) error {
	d, err := root.Open(dir)
	if err != nil {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	return nil
}
