//go:build !linux

package exec

import "os"

// spoolFile makes the file a command's output goes to: an unlinked file
// in dir (Linux has memfd instead: spool_linux.go). A command's writes to
// it fail while the disk under dir is full.
func spoolFile(dir string) (*os.File, error) { return diskSpool(dir) }
