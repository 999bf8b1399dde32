//go:build !unix

package queue

import "io/fs"

// privateFlags: the rules of .scribe are Unix's (owners, modes,
// O_NOFOLLOW); the rest of scribe (flock, the store lock) runs on Unix
// only, and this keeps the wire format's package building elsewhere.
const privateFlags = 0

// fileOwner is unknown here.
func fileOwner(fs.FileInfo) (uint32, bool) { return 0, false }
