package bench

import "golang.org/x/sys/unix"

// onTmpfs reports whether dir is on tmpfs, in memory, where fsync costs
// nothing and a benchmark of durable writes means little.
func onTmpfs(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC
}
