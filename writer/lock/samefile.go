package lock

import (
	"os"
	"path/filepath"
)

// SameFile reports whether two paths name one file: the same path once
// their folders' symlinks are resolved (RealPath), or, when both exist,
// the same device and inode (a symlink or a hard link to it). It is how
// scribe tells whether a lock file someone names is the store lock.
func SameFile(a, b string) bool {
	if RealPath(a) == RealPath(b) {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// RealPath is p, absolute, with its folder's symlinks resolved (p itself
// may not exist yet, and may be a symlink).
func RealPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		return filepath.Join(dir, filepath.Base(p))
	}
	return filepath.Clean(p)
}
