package daemon

import "github.com/scribehq/scribe/queue"

// high reports whether the item is a high-priority job. A job that did
// not decode is normal.
func (it item) high() bool { return it.e.Err == nil && it.e.Job.High() }

// pick chooses the class of the next batch from the jobs in ahead (not
// empty): high jobs first, but after queue.MaxHighBatches batches of
// them in a row while normal jobs wait, one batch of normal jobs, so
// that a flood of high jobs does not starve them. It reports whether it
// chose the high class.
func (w *Writer) pick() bool {
	var high, normal bool
	for _, it := range w.ahead {
		if it.high() {
			high = true
		} else {
			normal = true
		}
	}
	switch {
	case high && normal && w.highRun >= queue.MaxHighBatches:
		w.highRun = 0
		return false
	case high && normal:
		w.highRun++
		return true
	case !high:
		w.highRun = 0
	}
	return high
}

// takeBatch takes from ahead a batch of file jobs of one class (high or
// not), in order: up to its next exec job, which runs alone, within the
// batch's bounds. The jobs of the other class keep their places.
func (w *Writer) takeBatch(high bool) []item {
	var batch []item
	rest, size := w.ahead[:0:0], 0
	for i, it := range w.ahead {
		if it.high() != high {
			rest = append(rest, it)
			continue
		}
		size += len(it.m.Data())
		if it.isExec() || (len(batch) > 0 && (len(batch) >= w.cfg.BatchSize || w.cautious > 0 || size > maxBatchBytes)) {
			rest = append(rest, w.ahead[i:]...)
			break
		}
		batch = append(batch, it)
	}
	w.ahead = rest
	return batch
}
