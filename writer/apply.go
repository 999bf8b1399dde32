package writer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer/internal/fault"
	"github.com/scribehq/scribe/writer/journal"
)

// fileState is one file as a batch sees it: what is on disk, plus the
// batch's changes so far. Nothing touches the disk until the batch's intent
// is committed.
type fileState struct {
	origExists bool
	origSize   int64
	orig       *journal.Stamp // the original, if there was one
	mode       fs.FileMode    // the original's permissions; 0 if there was none
	owner      uint32         // the original's owner
	removeOK   bool           // checkReplace found the original removable
	tempOK     bool           // checkReplace found its temporary name free to write through

	exists   bool
	replaced bool   // content is the whole file; otherwise the file is the original plus tail
	content  []byte // when replaced
	tail     []byte // when !replaced: bytes appended to the original
}

func (f *fileState) size() int64 {
	if f.replaced {
		return int64(len(f.content))
	}
	return f.origSize + int64(len(f.tail))
}

// overlay applies jobs to an in-memory view of the store, one job at a
// time, all or nothing, so that a batch touches each file once. Everything
// that could make carrying the batch out fail because of what a job asks
// (a path that is a file here and a folder there, a symlink, a name too
// long, a file the writer may not write) is found here, and rejects that
// job alone: a decided batch must never be impossible to carry out.
type overlay struct {
	tree    *tree
	maxFile int64
	files   map[string]*fileState
	// folders are the folders the batch's files need: once an op creates a
	// file, the folders above it exist, as they would on disk (scribe never
	// removes a folder), even if a later op deletes the file.
	folders map[string]bool
	// jobFolders are the folders the current job added, forgotten if it is
	// rejected.
	jobFolders []string
}

func newOverlay(t *tree, maxFile int64) *overlay {
	return &overlay{tree: t, maxFile: maxFile, files: map[string]*fileState{}, folders: map[string]bool{}}
}

// setExists records whether p exists after the op, and the folders above
// a file that now exists.
func (ov *overlay) setExists(p string, st *fileState, exists bool) {
	st.exists = exists
	if !exists {
		return
	}
	for d := path.Dir(p); d != "." && !ov.folders[d]; d = path.Dir(d) {
		ov.folders[d] = true
		ov.jobFolders = append(ov.jobFolders, d)
	}
}

// checkShape makes sure p can be a file after the ops so far: it is not a
// folder the batch needs, and no folder above it is a file of the batch.
// What the disk holds was checked when p was first seen (state).
func (ov *overlay) checkShape(p string) error {
	if ov.folders[p] {
		return queue.Reject(queue.ReasonNotRegular, "%s is a folder (an earlier op of this batch created a file in it)", p)
	}
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if st, ok := ov.files[d]; ok && st.exists {
			return queue.Reject(queue.ReasonNotRegular, "%s is a file; %s needs it to be a folder", d, p)
		}
	}
	return nil
}

// applyJob applies all of a job's ops or, if one is rejected, none of them.
// A *queue.RejectError rejects the job; any other error is an I/O fault of
// the store and fails the batch.
func (ov *overlay) applyJob(job *queue.Job) (err error) {
	saved := map[string]*fileState{}
	ov.jobFolders = ov.jobFolders[:0]
	defer func() {
		if r := recover(); r != nil {
			err = queue.Reject(queue.ReasonInternal, "applier panicked: %v\n%s", r, debug.Stack())
		}
		if err == nil {
			return
		}
		for _, d := range ov.jobFolders {
			delete(ov.folders, d)
		}
		for p, st := range saved {
			if st == nil {
				delete(ov.files, p)
			} else {
				ov.files[p] = st
			}
		}
	}()
	for i, op := range job.Ops {
		if _, ok := saved[op.Path]; !ok {
			if st, ok := ov.files[op.Path]; ok {
				cp := *st
				saved[op.Path] = &cp
			} else {
				saved[op.Path] = nil
			}
		}
		if err := ov.applyOp(op); err != nil {
			var rej *queue.RejectError
			if errors.As(err, &rej) {
				rej.Detail = fmt.Sprintf("op %d (%s %s): %s", i, op.Kind, op.Path, rej.Detail)
			}
			return err
		}
	}
	return nil
}

func (ov *overlay) applyOp(op queue.Op) error {
	fault.Op(op.Path)
	st, err := ov.state(op.Path)
	if err != nil {
		return err
	}
	if op.IfMatch != "" {
		if err := ov.checkPrecondition(op, st); err != nil {
			return err
		}
	}
	if err := ov.checkShape(op.Path); err != nil {
		return err
	}
	if err := ov.checkReplace(op, st); err != nil {
		return err
	}
	switch op.Kind {
	case queue.OpPut:
		if err := ov.checkSize(int64(len(op.Data))); err != nil {
			return err
		}
		ov.setExists(op.Path, st, true)
		st.replaced, st.content, st.tail = true, op.Data, nil
	case queue.OpAppend:
		if err := ov.checkSize(st.size() + int64(len(op.Data))); err != nil {
			return err
		}
		if st.replaced {
			st.content = concat(st.content, op.Data)
		} else {
			st.tail = concat(st.tail, op.Data)
		}
		ov.setExists(op.Path, st, true)
	case queue.OpMerge:
		cur := []byte("{}")
		if st.exists {
			if cur, err = ov.read(op.Path, st); err != nil {
				return err
			}
		}
		if !isJSONObject(cur) {
			return queue.Reject(queue.ReasonInvalidJSON, "file is not a JSON object")
		}
		if !isJSONObject(op.Data) {
			return queue.Reject(queue.ReasonInvalidJSON, "merge patch is not a JSON object")
		}
		// Deep nesting costs stack and time for nothing a store needs.
		if d := jsonDepth(cur); d > MaxMergeDepth {
			return queue.Reject(queue.ReasonTooLarge, "file is nested %d deep, merge limit %d", d, MaxMergeDepth)
		}
		if d := jsonDepth(op.Data); d > MaxMergeDepth {
			return queue.Reject(queue.ReasonTooLarge, "merge patch is nested %d deep, limit %d", d, MaxMergeDepth)
		}
		merged, err := mergePatch(cur, op.Data)
		if err != nil {
			return queue.Reject(queue.ReasonInvalidJSON, "merge: %v", err)
		}
		merged = append(merged, '\n')
		if err := ov.checkSize(int64(len(merged))); err != nil {
			return err
		}
		ov.setExists(op.Path, st, true)
		st.replaced, st.content, st.tail = true, merged, nil
	case queue.OpDelete:
		ov.setExists(op.Path, st, false)
		st.replaced, st.content, st.tail = true, nil, nil
	default:
		return queue.Reject(queue.ReasonUnknownOp, "unknown op %q", op.Kind)
	}
	return nil
}

func concat(a, b []byte) []byte {
	out := make([]byte, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}

func isJSONObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

func (ov *overlay) checkSize(n int64) error {
	if ov.maxFile > 0 && n > ov.maxFile {
		return queue.Reject(queue.ReasonTooLarge, "file would be %d bytes, limit %d", n, ov.maxFile)
	}
	return nil
}

func (ov *overlay) checkPrecondition(op queue.Op, st *fileState) error {
	if op.IfMatch == queue.IfAbsent {
		if st.exists {
			return queue.Reject(queue.ReasonPreconditionFailed, "file exists, if_match wants it absent")
		}
		return nil
	}
	if !st.exists {
		return queue.Reject(queue.ReasonPreconditionFailed, "file is absent, if_match wants %s", op.IfMatch)
	}
	cur, err := ov.read(op.Path, st)
	if err != nil {
		return err
	}
	if h := queue.ContentHash(cur); h != op.IfMatch {
		return queue.Reject(queue.ReasonPreconditionFailed, "file has %s, if_match wants %s", h, op.IfMatch)
	}
	return nil
}

// read returns a file's whole content as the batch sees it.
func (ov *overlay) read(p string, st *fileState) ([]byte, error) {
	if st.replaced {
		return st.content, nil
	}
	if !st.origExists {
		return st.tail, nil
	}
	b, err := ov.tree.readFile(p)
	if err != nil {
		return nil, classify(p, err)
	}
	if int64(len(b)) != st.origSize {
		return nil, fmt.Errorf("read %s: size changed under the store lock (%d, was %d)", p, len(b), st.origSize)
	}
	return concat(b, st.tail), nil
}

// state returns the batch's view of a file, loading it on first use. The
// path must be a regular file or absent, with folders (or nothing) above it.
func (ov *overlay) state(p string) (*fileState, error) {
	if st, ok := ov.files[p]; ok {
		return st, nil
	}
	under, err := ov.checkParents(p)
	if err != nil {
		return nil, err
	}
	st := &fileState{}
	e, err := ov.tree.lstat(p)
	if under != "" {
		err = fs.ErrNotExist // the file above is removed before p is made
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, classify(p, err)
	case e.mode&fs.ModeSymlink != 0:
		return nil, queue.Reject(queue.ReasonNotRegular, "%s is a symlink", p)
	case !e.mode.IsRegular():
		return nil, queue.Reject(queue.ReasonNotRegular, "%s is a %s", p, describeMode(e.mode))
	case ov.tree.isProtected(e.key):
		return nil, queue.Reject(queue.ReasonPathEscapes, "%s is one of scribe's own files", p)
	case e.nlink > 1:
		// Replacing it would split it from its other names, and changes
		// through two names in one batch would overwrite each other.
		return nil, queue.Reject(queue.ReasonNotRegular, "%s has %d hard links; scribe writes only files with one name", p, e.nlink)
	default:
		st.origExists, st.exists, st.origSize, st.mode, st.owner = true, true, e.size, e.mode.Perm(), e.uid
		st.orig = &journal.Stamp{Ino: e.key.ino, Size: e.size, Mtime: e.mtime}
	}
	if err := ov.checkWritable(p, st.origExists); err != nil {
		return nil, err
	}
	ov.files[p] = st
	return st, nil
}

// checkParents makes sure every folder above p is a real folder of the
// store or absent: not a symlink (a file must have one name only, or two
// names in one batch would overwrite each other's changes), not a file
// (unless the batch removes it first: then it returns that file's path),
// not scribe's own. Creating p later then cannot fail or escape.
func (ov *overlay) checkParents(p string) (removed string, err error) {
	dir := ""
	for seg := range strings.SplitSeq(path.Dir(p), "/") {
		if seg == "." {
			break
		}
		dir = path.Join(dir, seg)
		if st, ok := ov.files[dir]; ok {
			if st.exists {
				return "", queue.Reject(queue.ReasonNotRegular, "%s is a file; %s needs it to be a folder", dir, p)
			}
			if st.origExists {
				return dir, nil // a file the batch removes: nothing is under it
			}
			return "", nil // never there: nothing deeper exists either
		}
		e, err := ov.tree.lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil // nothing deeper exists either
		}
		if err != nil {
			return "", classify(dir, err)
		}
		switch {
		case e.mode&fs.ModeSymlink != 0:
			return "", ov.symlinkRejection(dir)
		case !e.mode.IsDir():
			return "", queue.Reject(queue.ReasonNotRegular, "%s is not a folder", dir)
		case ov.tree.isProtected(e.key):
			return "", queue.Reject(queue.ReasonPathEscapes, "%s is scribe's own folder", dir)
		}
	}
	return "", nil
}

// symlinkRejection rejects a path through the symlink dir, saying where it
// leads when that is out of the store or into scribe's own folder.
func (ov *overlay) symlinkRejection(dir string) error {
	root := ov.tree.Name()
	if real, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(dir))); err == nil {
		if rel, err := filepath.Rel(root, real); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return queue.Reject(queue.ReasonPathEscapes, "%s is a symlink out of the store", dir)
		}
		if fi, err := os.Stat(real); err == nil && ov.tree.isProtected(keyOfInfo(fi)) {
			return queue.Reject(queue.ReasonPathEscapes, "%s leads into scribe's own folder", dir)
		}
	}
	return queue.Reject(queue.ReasonNotRegular, "%s is a symlink; paths may not go through symlinks", dir)
}

// checkWritable rejects, before anything changes, a path this process may
// not write: the file itself (for an append) and the folder its name is in
// (for a replace or a removal), or the nearest existing folder above a new
// file. Found only when the batch is carried out, such a fault would stop
// the queue behind it. A read-only filesystem is not the job's fault: it
// is left to fail the batch, which is retried until it clears.
func (ov *overlay) checkWritable(p string, exists bool) error {
	check := func(target string, mode uint32) error {
		err := ov.tree.access(target, mode)
		switch {
		case err == nil, errors.Is(err, unix.EROFS):
			return nil
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
			return queue.Reject(queue.ReasonNotPermitted, "%s is not writable by the writer (uid %d)", p, os.Geteuid())
		}
		return classify(target, err)
	}
	if exists {
		if err := check(p, unix.W_OK); err != nil {
			return err
		}
		return check(path.Dir(p), unix.W_OK|unix.X_OK)
	}
	// The nearest folder on disk above p: the first that exists and is
	// not a file the batch removes (checkParents vetted the rest).
	dir := path.Dir(p)
	for ; dir != "."; dir = path.Dir(dir) {
		if e, err := ov.tree.lstat(dir); err == nil && e.mode.IsDir() {
			break
		}
	}
	return check(dir, unix.W_OK|unix.X_OK)
}

// checkReplace makes sure the batch can carry op out on its file: remove
// or replace the file itself (a put, a merge, a delete), which in a folder
// with the sticky bit (as /tmp has) the kernel lets only the file's owner
// or the folder's do; and write it whole through its temporary name beside
// it (a put, a merge, an append to a file the batch replaced), where
// nothing the writer cannot remove may stand (a folder; another user's
// file, in a sticky folder). access(2), which checkWritable asks, sees
// none of this.
func (ov *overlay) checkReplace(op queue.Op, st *fileState) error {
	remove := op.Kind != queue.OpAppend && st.origExists && !st.removeOK
	whole := (op.Kind == queue.OpPut || op.Kind == queue.OpMerge || op.Kind == queue.OpAppend && st.replaced) && !st.tempOK
	if !remove && !whole {
		return nil
	}
	p := op.Path
	dir := path.Dir(p)
	d, err := ov.tree.lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist), err == nil && !d.mode.IsDir():
		st.removeOK, st.tempOK = true, true // a folder the batch makes: nothing is in it
		return nil
	case err != nil:
		return classify(dir, err)
	}
	euid := uint32(os.Geteuid())
	mayRemove := func(owner uint32) bool {
		return d.mode&fs.ModeSticky == 0 || euid == 0 || owner == euid || d.uid == euid
	}
	if remove {
		if !mayRemove(st.owner) {
			return queue.Reject(queue.ReasonNotPermitted, "%s is another user's (uid %d) in %s, a folder with the sticky bit: the writer (uid %d) may not replace or remove it", p, st.owner, dir, euid)
		}
		st.removeOK = true
	}
	if whole {
		tmp := path.Join(dir, tempName(path.Base(p)))
		e, err := ov.tree.lstat(tmp)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return classify(tmp, err)
		case e.mode.IsDir():
			return queue.Reject(queue.ReasonNotRegular, "%s, the temporary name scribe writes %s through, is a folder", tmp, p)
		case !mayRemove(e.uid):
			return queue.Reject(queue.ReasonNotPermitted, "%s, the temporary name scribe writes %s through, is another user's (uid %d) in a folder with the sticky bit", tmp, p, e.uid)
		}
		st.tempOK = true
	}
	return nil
}

// classify turns an error from resolving a path into a rejection when it is
// the path's fault (it escapes, loops, names a file as a folder) and leaves
// it as an I/O fault otherwise.
func classify(p string, err error) error {
	switch {
	case errors.Is(err, errProtected):
		return queue.Reject(queue.ReasonPathEscapes, "%s: %v", p, err)
	case errors.Is(err, errSymlink):
		return queue.Reject(queue.ReasonNotRegular, "%s: %v", p, err)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EISDIR):
		return queue.Reject(queue.ReasonNotRegular, "%s: %v", p, err)
	case errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.EINVAL):
		return queue.Reject(queue.ReasonBadInput, "%s: %v", p, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return queue.Reject(queue.ReasonNotPermitted, "%s: %v", p, err)
	}
	return err
}

// changes returns the batch's net effect on each file it touched, in path
// order: what the intent records and materialize carries out.
func (ov *overlay) changes() []journal.Change {
	var out []journal.Change
	for p, st := range ov.files {
		switch {
		case !st.exists && st.origExists:
			out = append(out, journal.Change{Path: p, Kind: journal.ChangeRemove, Was: st.orig})
		case !st.exists:
		case st.replaced:
			out = append(out, journal.Change{Path: p, Kind: journal.ChangeWrite, Data: st.content, Mode: st.mode, New: !st.origExists, Was: st.orig})
		case len(st.tail) > 0 || !st.origExists: // an empty append still creates the file
			out = append(out, journal.Change{Path: p, Kind: journal.ChangeAppend, Data: st.tail, Base: st.origSize, Mode: st.mode, New: !st.origExists})
		}
	}
	// A folder the batch made whose files it deleted again stays, as it
	// would have had the jobs been applied one at a time.
	filled := map[string]bool{}
	for _, c := range out {
		if c.Kind != journal.ChangeRemove {
			for d := path.Dir(c.Path); d != "." && !filled[d]; d = path.Dir(d) {
				filled[d] = true
			}
		}
	}
	for d := range ov.folders {
		if !filled[d] {
			out = append(out, journal.Change{Path: d, Kind: journal.ChangeMkdir})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
