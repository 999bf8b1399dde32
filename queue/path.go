package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// MetaDir is the store's private folder (lock, journal, queue, discovery).
// Ops may never touch it.
const MetaDir = ".scribe"

// tmpSuffix ends the name of the temporary file the writer stages a
// replacement in, next to its target (writer/durable.go; keep them equal).
// Ops may not name such a file.
const tmpSuffix = ".scribe-tmp"

// MaxNameLen is the longest name a path segment may have: 255 bytes (the
// limit of Linux filesystems) less what the writer's temporary name adds
// ("." and tmpSuffix), so that every file scribe writes can be replaced.
const MaxNameLen = 255 - 1 - len(tmpSuffix)

// relativeHint ends the message of a path that is not a clean path
// relative to the store: the usual mistake is a shell habit ("/abs",
// "../x", "a//b").
const relativeHint = "; use a path relative to the store, such as notes/today.md"

// TrimDotSlash removes the leading "./" from a path given by a person
// ("./notes.txt" and "././notes.txt" are "notes.txt"), and nothing else:
// "a/./b" is left for CheckPath to refuse. The wire format stays strict (a
// job carries clean paths); callers normalise before they build a job (the
// client and the command line do). Trimming twice is trimming once: a job
// may pass through more than one caller (a Python client, then the
// command line), and its digest must be of the path the daemon applies.
func TrimDotSlash(p string) string {
	for strings.HasPrefix(p, "./") {
		p = p[2:]
	}
	return p
}

// CheckPath applies the lexical rules for an op path: relative,
// slash-separated, clean (no ".", ".." or empty segments), not inside
// MetaDir, no name ending in ".scribe-tmp" (the writer's temporary files),
// no NUL or control characters, valid UTF-8, names of at most MaxNameLen
// bytes, at most MaxPathLen bytes in all. The writer additionally refuses
// any path through a symlink when it decides a job and when it writes.
func CheckPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty path")
	case len(p) > MaxPathLen:
		return fmt.Errorf("path is %d bytes, limit %d", len(p), MaxPathLen)
	case p[0] == '/':
		return fmt.Errorf("path %q is absolute%s", p, relativeHint)
	case strings.ContainsRune(p, '\\'):
		return fmt.Errorf("path %q contains a backslash%s", p, relativeHint)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("path %q is not valid UTF-8", p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("path %q contains a control character", p)
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "":
			return fmt.Errorf("path %q has an empty segment%s", p, relativeHint)
		case ".", "..":
			return fmt.Errorf("path %q has a %q segment%s", p, seg, relativeHint)
		}
		if len(seg) > MaxNameLen {
			return fmt.Errorf("path has a name of %d bytes, limit %d (%.40q…)", len(seg), MaxNameLen, seg)
		}
		// A name the writer uses for a temporary file would collide with
		// it (and a folder of that name would wedge later writes).
		if len(seg) >= len(tmpSuffix) && strings.EqualFold(seg[len(seg)-len(tmpSuffix):], tmpSuffix) {
			return fmt.Errorf("path %q has a name ending in %s", p, tmpSuffix)
		}
	}
	if first, _, _ := strings.Cut(p, "/"); strings.EqualFold(first, MetaDir) {
		return fmt.Errorf("path %q is inside %s/", p, MetaDir)
	}
	return nil
}

// ErrDirEscapes is the error of StoreDir for a folder that leads outside
// the store or into its .scribe folder.
var ErrDirEscapes = errors.New("outside the store or into " + MetaDir)

// StoreDir is the real path of rel, a folder relative to the store whose
// real path is root (an exec command's working folder): its symlinks
// resolved, it must be a folder inside the store and outside .scribe
// (ErrDirEscapes otherwise). "" is root itself.
func StoreDir(root, rel string) (string, error) {
	if rel == "" {
		return root, nil
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("dir %s: %w", rel, err)
	}
	inside, err := filepath.Rel(root, real)
	if err != nil || inside == ".." || strings.HasPrefix(inside, ".."+string(filepath.Separator)) || inside != "." && CheckPath(filepath.ToSlash(inside)) != nil {
		return "", fmt.Errorf("dir %s leads to %s, %w", rel, real, ErrDirEscapes)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("dir %s is not a folder", rel)
	}
	return real, nil
}
