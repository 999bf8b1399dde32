//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package caller

import "golang.org/x/sys/unix"

// isTTY reports whether fd is a terminal: one with terminal attributes,
// not merely a character device (/dev/null is one too).
func isTTY(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TIOCGETA)
	return err == nil
}
