package writer

import (
	"path"
	"slices"
	"strings"
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

// Bounds of the carry: each batch's intent writes it again, so a batch
// that would make it larger syncs it first.
const (
	maxCarryBytes   = 16 << 10 // of data
	maxCarryEntries = 64       // changes, and outcomes
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
// next, one after the other, as one: one change per path, so that a redo
// of it after a power loss has the effect of both. A later write or
// removal of a file replaces the earlier change; an append directly after
// an append (nothing else wrote to the file between them) joins it. Any
// other pair on one path (an append after a write; bytes of another
// program between two appends; the removal of a file the carried changes
// made), a folder made, or a path inside another's cannot be folded: false, and the carried changes are synced first.
func fold(carried, next []journal.Change) ([]journal.Change, bool) {
	byPath := make(map[string]journal.Change, len(carried)+len(next))
	above := map[string]bool{} // the folders above the carried paths
	for _, c := range carried {
		byPath[c.Path] = c
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
		c, ok := byPath[n.Path]
		switch {
		case !ok:
		case c.Kind == journal.ChangeMkdir:
			return nil, false
		case n.Kind == journal.ChangeAppend:
			if c.Kind != journal.ChangeAppend || n.Base != c.Base+int64(len(c.Data)) {
				return nil, false
			}
			c.Data = slices.Concat(c.Data, n.Data)
			n = c
		case n.Kind == journal.ChangeRemove && c.New:
			return nil, false // the folders made for the file must be synced
		default: // a write or a removal states the file whole
			n.New = n.New || c.New
		}
		byPath[n.Path] = n
	}
	out := make([]journal.Change, 0, len(byPath))
	for _, c := range byPath {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b journal.Change) int { return strings.Compare(a.Path, b.Path) })
	return out, true
}
