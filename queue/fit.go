package queue

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Size bounds of what a daemon sends. An outcome travels as one NATS
// message (published to its caller, and in a status reply), and a NATS
// server carries at most its max_payload, 1 MiB by default: bytes are not
// what counts but their JSON encoding, in which a control byte of a
// command's output takes six (\u001b).
const (
	// MaxOutcomeBytes is the most an encoded outcome may be: 1 MiB less
	// room for the reply that wraps it and the message's headers. Every
	// outcome a writer records is fitted to it (Outcome.Fit).
	MaxOutcomeBytes = 1<<20 - 64<<10
	// MaxReplyBytes is the most a status service reply may be; a daemon
	// on a server that carries less fits its replies to that.
	MaxReplyBytes = 1<<20 - 16<<10
	// MinFitBytes is the smallest limit Outcome.Fit always meets, for an
	// outcome whose fields of bounded size are within their bounds (ID,
	// CoalescedInto: MaxIDLen; Digest, Reason, Mode, the exec command's
	// name and signal as the writer makes them).
	MinFitBytes = 2048
)

// cutMarker is what stands in a string for the bytes cut from its middle
// to fit a message.
func cutMarker(n int) string {
	return "\n[... " + strconv.Itoa(n) + " bytes cut to fit the outcome ...]\n"
}

// Fit returns o if its encoding takes at most limit bytes, and otherwise a
// copy (o is not changed) cut until it does, in this order: the middle of
// the command's stdout and stderr (the larger first, with a marker where
// the cut is, counted in StdoutCut and StderrCut), then the middle of the
// longest of Detail and the Meta values (each with a marker; a Meta entry
// with no room for one goes), and last whole Meta entries, the largest
// first (those that go counted in MetaCut). What is kept is never changed
// otherwise. For a limit of at least MinFitBytes,
// the copy fits.
func (o *Outcome) Fit(limit int) *Outcome {
	size := encodedLen(o)
	if size <= limit {
		return o
	}
	c := *o
	if o.Exec != nil {
		x := *o.Exec
		c.Exec = &x
		size = fitFields(&c, size, limit, []field{{s: &x.Stdout, cut: &x.StdoutCut}, {s: &x.Stderr, cut: &x.StderrCut}})
	}
	if size > limit {
		c.Meta = maps.Clone(o.Meta)
		keys := slices.Sorted(maps.Keys(c.Meta))
		values := make([]string, len(keys))
		fields := []field{{s: &c.Detail}}
		for i, k := range keys {
			values[i] = c.Meta[k]
			fields = append(fields, field{s: &values[i]})
		}
		size = fitFields(&c, size, limit, fields, func() {
			for i, k := range keys {
				c.Meta[k] = values[i]
			}
		})
		for i, k := range keys {
			if values[i] == "" && o.Meta[k] != "" { // no room even for a marker: the entry goes
				delete(c.Meta, k)
				c.MetaCut++
			}
		}
		size = encodedLen(&c)
		for size > limit && len(c.Meta) > 0 {
			c.dropMeta(size - limit + len(`,"meta_cut":`) + 20)
			size = encodedLen(&c)
		}
	}
	return &c
}

// dropMeta drops the largest Meta entries until their encoding has shed at
// least excess bytes, or none is left.
func (o *Outcome) dropMeta(excess int) {
	keys := slices.Collect(maps.Keys(o.Meta))
	cost := func(k string) int { return jsonLen(k) + jsonLen(o.Meta[k]) + 6 } // "k":"v",
	slices.SortFunc(keys, func(a, b string) int {
		if d := cost(b) - cost(a); d != 0 {
			return d
		}
		return cmpString(a, b)
	})
	for _, k := range keys {
		if excess <= 0 {
			break
		}
		excess -= cost(k)
		delete(o.Meta, k)
		o.MetaCut++
	}
	if len(o.Meta) == 0 {
		o.Meta = nil
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// field is a string that may be cut from its middle to fit a message, and
// the counter of bytes cut from it, if it has one.
type field struct {
	s   *string
	cut *int64
}

// counterRoom is the most a cut counter's member can add to an encoding:
// `,"stdout_cut":` and 19 digits.
const counterRoom = len(`,"stdout_cut":`) + 19

// fitFields cuts fields, the longest first down to a common length, until
// v's encoding (of size bytes) takes at most limit bytes or they are
// empty; sync, if given, puts the fields back into v before each measure.
// It returns v's size.
func fitFields(v any, size, limit int, fields []field, sync ...func()) int {
	for round := 0; size > limit && round < 8; round++ {
		costs := make([]int, len(fields))
		excess := size - limit
		for i, f := range fields {
			costs[i] = jsonLen(*f.s)
			if f.cut != nil {
				excess += counterRoom // the count may appear, or grow
			}
		}
		budgets := waterline(costs, excess)
		changed := false
		for i, f := range fields {
			if budgets[i] >= costs[i] {
				continue
			}
			s, n := cutMiddle(*f.s, budgets[i])
			if s == *f.s {
				continue
			}
			*f.s, changed = s, true
			if f.cut != nil {
				*f.cut += int64(n)
			}
		}
		if !changed {
			break
		}
		for _, fn := range sync {
			fn()
		}
		size = encodedLen(v)
	}
	return size
}

// waterline returns a budget for each cost such that the largest are cut
// down to one common level and the cuts add up to at least excess (or all
// is cut).
func waterline(costs []int, excess int) []int {
	sorted := slices.Sorted(slices.Values(costs))
	total := 0
	for _, c := range sorted {
		total += c
	}
	level := 0
	if excess < total {
		// The highest level L with sum(max(0, c-L)) >= excess: walk down
		// from the largest cost.
		n := len(sorted)
		above := 0 // sum of costs above the level
		for i := n - 1; i >= 0; i-- {
			above += sorted[i]
			k := n - i // costs at or above sorted[i]
			next := 0
			if i > 0 {
				next = sorted[i-1]
			}
			// Cutting those k down to next sheds above - k*next.
			if above-k*next >= excess {
				level = (above - excess) / k
				break
			}
		}
	}
	budgets := make([]int, len(costs))
	for i, c := range costs {
		budgets[i] = min(c, level)
	}
	return budgets
}

// cutMiddle returns s with its middle replaced by a cutMarker so that its
// JSON string encoding (quotes left out) takes at most budget bytes, and
// how many bytes of s went; "" and len(s) if not even the marker fits.
// It cuts between characters.
func cutMiddle(s string, budget int) (string, int) {
	if jsonLen(s) <= budget {
		return s, 0
	}
	avail := budget - jsonLen(cutMarker(len(s))) // len(s) has the most digits the count can have
	if avail <= 0 {
		return "", len(s)
	}
	head, cost := 0, 0
	for head < len(s) {
		r, n := utf8.DecodeRuneInString(s[head:])
		c := runeCost(r, n)
		if cost+c > avail/2 {
			break
		}
		cost += c
		head += n
	}
	tail := len(s)
	for tail > head {
		r, n := utf8.DecodeLastRuneInString(s[head:tail])
		c := runeCost(r, n)
		if cost+c > avail {
			break
		}
		cost += c
		tail -= n
	}
	cut := tail - head
	return s[:head] + cutMarker(cut) + s[tail:], cut
}

// jsonLen is the length of s encoded as a JSON string by encoding/json,
// quotes left out.
func jsonLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		n += runeCost(r, size)
		i += size
	}
	return n
}

// runeCost is what encoding/json writes for a character of size bytes:
// two for the short escapes, six for \u00XX (the other control
// characters, <, > and &, U+2028, U+2029, and a byte that is not UTF-8,
// which becomes \ufffd), else the character itself.
func runeCost(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1:
		return 6
	case r == '"', r == '\\', r == '\n', r == '\r', r == '\t', r == '\b', r == '\f':
		return 2
	case r < 0x20, r == '<', r == '>', r == '&', r == '\u2028', r == '\u2029':
		return 6
	}
	return size
}

// encodedLen is the length of v's JSON encoding.
func encodedLen(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

// Fit cuts the look-up until its encoding takes at most limit bytes: its
// outcome (Outcome.Fit), recorded by a version that did not bound it, and
// its detail.
func (l *Lookup) Fit(limit int) {
	size := encodedLen(l)
	if size <= limit {
		return
	}
	if l.Outcome != nil {
		o := encodedLen(l.Outcome)
		l.Outcome = l.Outcome.Fit(max(o-(size-limit), 0))
		size = encodedLen(l)
	}
	fitFields(l, size, limit, []field{{s: &l.Detail}, {s: &l.Error}})
}

// Fit cuts the list until its encoding takes at most limit bytes: each
// outcome first to its share of the room (Outcome.Fit: a listing is a
// summary; the look-up of one job has its whole outcome), then the oldest
// outcomes (counted in OutcomesCut) and the last queued jobs (QueuedTotal
// still counts them) are left out. Each entry is encoded once or twice,
// never the whole list.
func (l *JobList) Fit(limit int) {
	osizes, ototal := entrySizes(l.Outcomes)
	qsizes, qtotal := entrySizes(l.Queued)
	empty := *l
	empty.Outcomes, empty.Queued = []*Outcome{}, []QueuedJob{}
	empty.OutcomesCut = len(l.Outcomes) + l.OutcomesCut // as many digits as it may get
	room := limit - encodedLen(&empty)
	if ototal+qtotal <= room {
		return
	}
	outRoom := room
	if len(l.Queued) > 0 {
		outRoom = room - min(qtotal, room/2)
	}
	if n := len(l.Outcomes); n > 0 {
		share := max(outRoom/n-1, MinFitBytes)
		kept, used := 0, 0
		for i, o := range l.Outcomes {
			s := osizes[i]
			if s-1 > share {
				o = o.Fit(share)
				s = encodedLen(o) + 1
			}
			if used+s > outRoom {
				break
			}
			l.Outcomes[i] = o
			used += s
			kept++
		}
		l.OutcomesCut += n - kept
		l.Outcomes = l.Outcomes[:kept]
		room -= used
	}
	kept, used := 0, 0
	for _, s := range qsizes {
		if used+s > room {
			break
		}
		used += s
		kept++
	}
	l.Queued = l.Queued[:kept]
}

// entrySizes is the encoded size of each entry, a comma included, and
// their sum.
func entrySizes[T any](entries []T) ([]int, int) {
	sizes, total := make([]int, len(entries)), 0
	for i := range entries {
		sizes[i] = encodedLen(entries[i]) + 1
		total += sizes[i]
	}
	return sizes, total
}

// Fit cuts the report's strings, the longest first, until its encoding
// takes at most limit bytes: they say why, and their start and end say
// most of it.
func (r *StatusReport) Fit(limit int) {
	size := encodedLen(r)
	if size <= limit {
		return
	}
	fields := []field{{s: &r.Waiting}, {s: &r.Fault}, {s: &r.Running}, {s: &r.Deferred}}
	if r.Holder != nil {
		h := *r.Holder
		r.Holder = &h
		fields = append(fields, field{s: &h.Command}, field{s: &h.Host})
	}
	if r.Journal != nil {
		j := *r.Journal
		r.Journal = &j
		fields = append(fields, field{s: &j.Error})
	}
	if r.Interrupted != nil {
		in := *r.Interrupted
		r.Interrupted = &in
		fields = append(fields, field{s: &in.Stuck})
	}
	fitFields(r, size, limit, fields)
}

// Fit leaves out the oldest dead letters until the encoding takes at most
// limit bytes (Total still counts them).
func (d *DeadLetters) Fit(limit int) {
	size := encodedLen(d)
	for len(d.Letters) > 0 && size > limit {
		size -= encodedLen(&d.Letters[len(d.Letters)-1]) + 1
		d.Letters = d.Letters[:len(d.Letters)-1]
	}
	fitFields(d, encodedLen(d), limit, []field{{s: &d.Error}})
}
