//go:build !linux

package writer

// NetworkFilesystem is not implemented off Linux: it reports nothing.
func NetworkFilesystem(path string) string { return "" }
