//go:build !linux

package main

// onTmpfs cannot tell a memory filesystem here.
func onTmpfs(string) bool { return false }
