package daemon

// SetScanLimit lowers how many queued jobs one locate or jobs request
// reads, until the returned func restores it. Not for use while a writer
// runs: set it before starting one, restore it after closing it.
func SetScanLimit(n int) (restore func()) {
	was := scanLimit
	scanLimit = n
	return func() { scanLimit = was }
}
