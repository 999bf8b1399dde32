//go:build unix

package queue

import (
	"io/fs"
	"syscall"
)

// privateFlags are added to every open of a file under .scribe: never
// follow a symlink, never block on a FIFO or a device.
const privateFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// fileOwner is the uid that owns the file fi describes.
func fileOwner(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}
