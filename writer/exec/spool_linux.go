package exec

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// spoolFile makes the file a command's output goes to: an anonymous
// memory file (memfd), so that the output never touches the store's
// disk (a full disk must not fail the command's writes) and a command
// that outlives a killed daemon still writes without SIGPIPE. Where the
// kernel has no memfd (or forbids it), an unlinked file in dir.
func spoolFile(dir string) (*os.File, error) {
	fd, err := unix.MemfdCreate("scribe-exec-output", unix.MFD_CLOEXEC|unix.MFD_NOEXEC_SEAL)
	if errors.Is(err, unix.EINVAL) { // a kernel before 6.3 knows no MFD_NOEXEC_SEAL
		fd, err = unix.MemfdCreate("scribe-exec-output", unix.MFD_CLOEXEC)
	}
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), "memfd:scribe-exec-output"), nil
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return diskSpool(dir)
	}
	return nil, fmt.Errorf("command output: memfd_create: %w", err)
}
