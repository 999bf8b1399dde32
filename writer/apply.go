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

	jsonpatch "github.com/evanphx/json-patch/v5"
	"golang.org/x/sys/unix"

	"scribe/queue"
)

// fileState is one file as a batch sees it: what is on disk, plus the
// batch's changes so far. Nothing touches the disk until the batch's intent
// is committed.
type fileState struct {
	origExists bool
	origSize   int64
	mode       fs.FileMode // the original's permissions; 0 if there was none

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
// time, all or nothing, so that a batch touches each file once.
type overlay struct {
	root    *os.Root
	maxFile int64
	files   map[string]*fileState
	// protected are scribe's own folder and files (the .scribe folder, the
	// lock file, the journal). No op may reach them, whatever symlinks or
	// hard links inside the store lead there.
	protected []os.FileInfo
}

func newOverlay(root *os.Root, maxFile int64) *overlay {
	return &overlay{root: root, maxFile: maxFile, files: map[string]*fileState{}}
}

// applyJob applies all of a job's ops or, if one is rejected, none of them.
// A *queue.RejectError rejects the job; any other error is an I/O fault of
// the store and fails the batch.
func (ov *overlay) applyJob(job *queue.Job) (err error) {
	saved := map[string]*fileState{}
	defer func() {
		if r := recover(); r != nil {
			err = queue.Reject(queue.ReasonInternal, "applier panicked: %v\n%s", r, debug.Stack())
		}
		if err == nil {
			return
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
	opHook(op.Path)
	st, err := ov.state(op.Path)
	if err != nil {
		return err
	}
	if op.IfMatch != "" {
		if err := ov.checkPrecondition(op, st); err != nil {
			return err
		}
	}
	switch op.Kind {
	case queue.OpPut:
		if err := ov.checkSize(int64(len(op.Data))); err != nil {
			return err
		}
		st.exists, st.replaced, st.content, st.tail = true, true, op.Data, nil
	case queue.OpAppend:
		if err := ov.checkSize(st.size() + int64(len(op.Data))); err != nil {
			return err
		}
		if st.replaced {
			st.content = concat(st.content, op.Data)
		} else {
			st.tail = concat(st.tail, op.Data)
		}
		st.exists = true
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
		// Merging costs the square of the nesting depth: a 60 KB patch
		// nested 10 000 deep takes seconds, and a job holds many.
		if d := jsonDepth(cur); d > MaxMergeDepth {
			return queue.Reject(queue.ReasonTooLarge, "file is nested %d deep, merge limit %d", d, MaxMergeDepth)
		}
		if d := jsonDepth(op.Data); d > MaxMergeDepth {
			return queue.Reject(queue.ReasonTooLarge, "merge patch is nested %d deep, limit %d", d, MaxMergeDepth)
		}
		merged, err := jsonpatch.MergePatch(cur, op.Data)
		if err != nil {
			return queue.Reject(queue.ReasonInvalidJSON, "merge: %v", err)
		}
		merged = append(merged, '\n')
		if err := ov.checkSize(int64(len(merged))); err != nil {
			return err
		}
		st.exists, st.replaced, st.content, st.tail = true, true, merged, nil
	case queue.OpDelete:
		st.exists, st.replaced, st.content, st.tail = false, true, nil, nil
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

// MaxMergeDepth is the deepest nesting of objects and arrays that merge
// accepts, in the file and in the patch.
const MaxMergeDepth = 128

// jsonDepth returns how deep objects and arrays nest in b, valid JSON.
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
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
	b, err := ov.root.ReadFile(p)
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
	if err := ov.checkParents(p); err != nil {
		return nil, err
	}
	st := &fileState{}
	fi, err := ov.root.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, classify(p, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, queue.Reject(queue.ReasonNotRegular, "%s is a symlink", p)
	case !fi.Mode().IsRegular():
		return nil, queue.Reject(queue.ReasonNotRegular, "%s is a %s", p, describeMode(fi.Mode()))
	case ov.isProtected(fi):
		return nil, queue.Reject(queue.ReasonPathEscapes, "%s is one of scribe's own files", p)
	case hardLinks(fi) > 1:
		// Replacing it would split it from its other names, and changes
		// through two names in one batch would overwrite each other.
		return nil, queue.Reject(queue.ReasonNotRegular, "%s has %d hard links; scribe writes only files with one name", p, hardLinks(fi))
	default:
		st.origExists, st.exists, st.origSize, st.mode = true, true, fi.Size(), fi.Mode().Perm()
	}
	if err := ov.checkWritable(p, st.origExists); err != nil {
		return nil, err
	}
	ov.files[p] = st
	return st, nil
}

func hardLinks(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

func (ov *overlay) isProtected(fi os.FileInfo) bool {
	for _, q := range ov.protected {
		if os.SameFile(fi, q) {
			return true
		}
	}
	return false
}

// checkParents makes sure every existing folder above p is a real folder
// of the store: not a symlink (a file must have one name only, or two
// names in one batch would overwrite each other's changes) and not
// scribe's own. Creating p later then cannot fail or escape.
func (ov *overlay) checkParents(p string) error {
	dir := ""
	for seg := range strings.SplitSeq(path.Dir(p), "/") {
		if seg == "." {
			break
		}
		dir = path.Join(dir, seg)
		fi, err := ov.root.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // nothing deeper exists either
		}
		if err != nil {
			return classify(dir, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := ov.root.Stat(dir)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return classify(dir, err)
			}
			if err == nil && ov.isProtected(target) {
				return queue.Reject(queue.ReasonPathEscapes, "%s leads into scribe's own folder", dir)
			}
			return queue.Reject(queue.ReasonNotRegular, "%s is a symlink; paths may not go through symlinks", dir)
		}
		if !fi.IsDir() {
			return queue.Reject(queue.ReasonNotRegular, "%s is not a folder", dir)
		}
		if ov.isProtected(fi) {
			return queue.Reject(queue.ReasonPathEscapes, "%s is scribe's own folder", dir)
		}
	}
	return nil
}

// checkWritable rejects, before anything changes, a path this process may
// not write: the file itself (for an append) and the folder its name is in
// (for a replace or a removal), or the nearest existing folder above a new
// file. Found only when the batch is carried out, such a fault would stop
// the queue behind it. A read-only filesystem is not the job's fault: it
// is left to fail the batch, which is retried until it clears.
func (ov *overlay) checkWritable(p string, exists bool) error {
	abs := filepath.Join(ov.root.Name(), filepath.FromSlash(p))
	check := func(path string, mode uint32) error {
		err := unix.Access(path, mode)
		switch {
		case err == nil, errors.Is(err, unix.EROFS):
			return nil
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
			return queue.Reject(queue.ReasonNotPermitted, "%s is not writable by the writer (uid %d)", p, os.Geteuid())
		}
		return err
	}
	if exists {
		if err := check(abs, unix.W_OK); err != nil {
			return err
		}
		return check(filepath.Dir(abs), unix.W_OK|unix.X_OK)
	}
	dir := filepath.Dir(abs)
	for ; dir != ov.root.Name(); dir = filepath.Dir(dir) {
		if _, err := os.Lstat(dir); err == nil {
			break
		}
	}
	return check(dir, unix.W_OK|unix.X_OK)
}

// classify turns an error from resolving a path into a rejection when it is
// the path's fault (it escapes, loops, names a file as a folder) and leaves
// it as an I/O fault otherwise.
func classify(p string, err error) error {
	switch {
	case strings.Contains(err.Error(), "path escapes"):
		return queue.Reject(queue.ReasonPathEscapes, "%s leaves the store", p)
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
func (ov *overlay) changes() []fileChange {
	var out []fileChange
	for p, st := range ov.files {
		switch {
		case !st.exists && st.origExists:
			out = append(out, fileChange{Path: p, Kind: changeRemove})
		case !st.exists:
		case st.replaced:
			out = append(out, fileChange{Path: p, Kind: changeWrite, Data: st.content, Mode: st.mode, New: !st.origExists})
		case len(st.tail) > 0 || !st.origExists: // an empty append still creates the file
			out = append(out, fileChange{Path: p, Kind: changeAppend, Data: st.tail, Base: st.origSize, Mode: st.mode, New: !st.origExists})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
