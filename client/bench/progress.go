package bench

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// progress is the line of progress `scribe bench` keeps on a terminal:
// each show replaces it. It is cut to the terminal's width, since a line
// that wraps leaves rows that a carriage return cannot go back over.
type progress struct {
	w    io.Writer // nil: no progress shown
	line string
}

// newProgress shows progress on w if on.
func newProgress(w io.Writer, on bool) *progress {
	if !on {
		return &progress{}
	}
	return &progress{w: w}
}

// show replaces the line.
func (p *progress) show(format string, args ...any) {
	p.line = fmt.Sprintf(format, args...)
	p.draw()
}

// add adds to the line.
func (p *progress) add(s string) {
	p.line += s
	p.draw()
}

// clear blanks the line.
func (p *progress) clear() {
	if p.w != nil {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// draw writes the line, one column short of the width: a line that
// fills the last column wraps on some terminals.
func (p *progress) draw() {
	if p.w != nil {
		fmt.Fprint(p.w, "\r\033[K"+fit(p.line, termWidth(p.w)-1))
	}
}

// fit cuts s to n columns (runes), marking the cut with an ellipsis.
func fit(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	return string(r[:n-1]) + "…"
}

// termWidth is the width of the terminal w is, asked each time (it may
// be resized); 80 when unknown.
func termWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	return 80
}
