//go:build !linux

package bench

// onTmpfs cannot tell a memory filesystem here.
func onTmpfs(string) bool { return false }
