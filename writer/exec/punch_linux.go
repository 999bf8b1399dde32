package exec

import (
	"os"

	"golang.org/x/sys/unix"
)

// punchHole frees the blocks (on disk, or the memory of a memfd) of a
// range of f already read, keeping its size; a filesystem that cannot
// punch holes keeps them.
func punchHole(f *os.File, off, n int64) {
	_ = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}
