package writer

import (
	"path"
	"slices"
	"time"

	"github.com/scribehq/scribe/writer/journal"
)

// carry is the changes of batches whose files are written and not yet
// synced, folded into the standing intent (see fold), which each later
// batch's intent carries again until they are synced.
type carry struct {
	changes []journal.Change
	ids     []string      // the outcomes pending with them
	token   journal.Token // the standing intent's
	since   time.Time     // when the first of them was answered
}

// Bounds of the carry, which a batch that would make it larger syncs
// first: each batch folds it again (the journal keeps its records, and
// adds the batch's own), and a redo after a crash writes it all again.
const (
	maxCarryBytes   = 1 << 20 // of data
	maxCarryEntries = 1024    // changes, and outcomes
)

// fits reports whether an intent of changes and n pending outcomes is
// within the carry's bounds.
func fits(changes []journal.Change, n int) bool {
	size := 0
	for _, c := range changes {
		size += len(c.Data)
	}
	return size <= maxCarryBytes && len(changes) <= maxCarryEntries && n <= maxCarryEntries
}

// fold returns the changes of an intent that states both carried and
// next, one after the other, so that a redo of it after a crash or a
// power loss has the effect of both. A staged write of a file replaces
// the earlier changes of it (its redo looks for its own temp file); an
// append directly after an append (nothing else wrote to the file between
// them) follows it as a change of its own, which a redo checks from its
// own base: one joined to the other would be appended again whole, the
// first one's bytes a second time, if another program appended after the
// first and before the second was written. Any other pair on one path (a
// write or a removal after any change, whose redo looks for the file the
// batch found, which the carried changes replaced with states of their
// own; an append after a write; bytes of another program between two
// appends), a folder made, or a path inside another's cannot be folded:
// false, and the carried changes are synced first.
func fold(carried, next []journal.Change) ([]journal.Change, bool) {
	byPath := make(map[string][]journal.Change, len(carried)+len(next))
	above := map[string]bool{} // the folders above the carried paths
	for _, c := range carried {
		byPath[c.Path] = append(byPath[c.Path], c)
		for d := path.Dir(c.Path); d != "."; d = path.Dir(d) {
			above[d] = true
		}
	}
	seen := map[string]bool{}
	for _, n := range next {
		if seen[n.Path] || above[n.Path] || n.Kind == journal.ChangeMkdir {
			return nil, false
		}
		seen[n.Path] = true
		for d := path.Dir(n.Path); d != "."; d = path.Dir(d) {
			if _, ok := byPath[d]; ok {
				return nil, false
			}
		}
		cs := byPath[n.Path]
		if len(cs) == 0 {
			byPath[n.Path] = []journal.Change{n}
			continue
		}
		last := cs[len(cs)-1]
		made := slices.ContainsFunc(cs, func(c journal.Change) bool { return c.New })
		switch {
		case last.Kind == journal.ChangeMkdir:
			return nil, false
		case n.Kind == journal.ChangeAppend:
			if last.Kind != journal.ChangeAppend || n.Base != last.Base+int64(len(last.Data)) {
				return nil, false
			}
			byPath[n.Path] = append(cs, n)
		case n.Kind != journal.ChangeStaged:
			return nil, false
		default:
			n.New = n.New || made
			byPath[n.Path] = []journal.Change{n}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	out := make([]journal.Change, 0, len(carried)+len(next))
	for _, p := range paths {
		out = append(out, byPath[p]...)
	}
	return out, true
}
