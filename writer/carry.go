package writer

import (
	"path"
	"time"

	"github.com/scribehq/scribe/writer/journal"
)

// carry is the changes of batches whose files are written and not yet
// synced, folded into the standing intent (see fold), which each later
// batch's intent carries again until they are synced. Each batch's work
// on it is in proportion to the batch, not to the carry.
type carry struct {
	changes []journal.Change // as the journal recorded them, in order
	ids     []string         // the outcomes pending with them
	token   journal.Token    // the standing intent's
	since   time.Time        // when the first of them was answered
	// paths are the files the changes are of, above the folders above
	// those, and bytes the changes' data.
	paths map[string]carriedPath
	above map[string]bool
	bytes int
}

// carriedPath is what the carried changes of one file are: the last of
// them, whether one made the file, how many there are and their data.
type carriedPath struct {
	last  journal.Change
	made  bool
	n     int
	bytes int
}

// Bounds of the carry, which a batch that would make it larger syncs
// first: a redo after a crash writes it all again.
const (
	maxCarryBytes   = 1 << 20 // of data
	maxCarryEntries = 1024    // changes, and outcomes
)

// folding is a batch's changes as fold takes them into the carry: added
// after the carried ones, and replacing every carried change of the
// paths in replaced.
type folding struct {
	added    []journal.Change
	replaced map[string]bool
}

// fold says how an intent can state both the carried changes and next,
// those of the batch after them, so that a redo of it after a crash or a
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
func (c *carry) fold(next []journal.Change) (folding, bool) {
	var f folding
	seen := make(map[string]bool, len(next))
	for _, n := range next {
		if seen[n.Path] || c.above[n.Path] || n.Kind == journal.ChangeMkdir {
			return f, false
		}
		for d := path.Dir(n.Path); d != "."; d = path.Dir(d) {
			if _, ok := c.paths[d]; ok || seen[d] {
				return f, false
			}
		}
		seen[n.Path] = true
		p, ok := c.paths[n.Path]
		switch {
		case !ok:
		case p.last.Kind == journal.ChangeMkdir:
			return f, false
		case n.Kind == journal.ChangeAppend:
			if p.last.Kind != journal.ChangeAppend || n.Base != p.last.Base+int64(len(p.last.Data)) {
				return f, false
			}
		case n.Kind != journal.ChangeStaged:
			return f, false
		default:
			n.New = n.New || p.made
			if f.replaced == nil {
				f.replaced = map[string]bool{}
			}
			f.replaced[n.Path] = true
		}
		f.added = append(f.added, n)
	}
	return f, true
}

// fits reports whether the carry with f folded in, and outcomes pending,
// is within the carry's bounds.
func (c *carry) fits(f folding, outcomes int) bool {
	n, size := len(c.changes)+len(f.added), c.bytes
	for p := range f.replaced {
		n -= c.paths[p].n
		size -= c.paths[p].bytes
	}
	for _, a := range f.added {
		size += len(a.Data)
	}
	return size <= maxCarryBytes && n <= maxCarryEntries && outcomes <= maxCarryEntries
}

// joined returns the changes of the intent that states the carried ones
// with f folded in: the carried ones, but those f replaces, then f's.
func (c *carry) joined(f folding) []journal.Change {
	if len(f.replaced) == 0 {
		return append(c.changes, f.added...)
	}
	out := make([]journal.Change, 0, len(c.changes)+len(f.added))
	for _, ch := range c.changes {
		if !f.replaced[ch.Path] {
			out = append(out, ch)
		}
	}
	return append(out, f.added...)
}

// take makes the changes of the intent recorded with token, and the
// outcomes pending with it, the carry: of added folded into it (f), or,
// if the carry was empty, of changes alone.
func (c *carry) take(changes []journal.Change, added []journal.Change, token journal.Token, ids []string) {
	if len(c.changes) == 0 {
		*c = carry{since: time.Now(), paths: map[string]carriedPath{}, above: map[string]bool{}}
		added = changes
	}
	c.changes, c.token, c.ids = changes, token, ids
	for _, a := range added {
		p := c.paths[a.Path]
		if a.Kind == journal.ChangeStaged {
			c.bytes -= p.bytes
			p = carriedPath{}
		}
		p.last, p.made, p.n, p.bytes = a, p.made || a.New, p.n+1, p.bytes+len(a.Data)
		c.paths[a.Path] = p
		c.bytes += len(a.Data)
		for d := path.Dir(a.Path); d != "." && !c.above[d]; d = path.Dir(d) {
			c.above[d] = true
		}
	}
}
