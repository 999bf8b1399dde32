//go:build !linux

package lock

// NetworkFilesystem is not implemented off Linux: it reports nothing.
func NetworkFilesystem(path string) string { return "" }
