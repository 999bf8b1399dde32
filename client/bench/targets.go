package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// Target is one of the headline figures, the summary of a bench: scribe's
// figure against the alternative's, each over the rounds, and their
// ratio, paired within each round.
type Target struct {
	Figure      string  `json:"figure"`
	Scribe      string  `json:"scribe"`      // the scribe contender
	Alternative string  `json:"alternative"` // what it is held against
	Value       Spread  `json:"value"`
	AltValue    *Spread `json:"alternative_value"` // null: the alternative did not run
	Ratio       *Spread `json:"ratio"`             // Value ÷ AltValue of the same round
}

// targets are the headline figures of what rep ran: the process
// measures, then, at the most producers and the fewest, append and
// 1 MiB puts against flock.
func targets(rep *Report) []Target {
	var out []Target
	add := func(figure, scribe, alt string, a, b []float64) {
		va, ok := spread(a)
		if !ok {
			return
		}
		t := Target{Figure: figure, Scribe: scribe, Alternative: alt, Value: va}
		if vb, ok := spread(b); ok {
			t.AltValue = &vb
			if r, ok := spread(paired(a, b)); ok {
				t.Ratio = &r
			}
		}
		out = append(out, t)
	}

	hook := func(m, c string) []HookFigures {
		i := slices.IndexFunc(rep.Hooks, func(h HookResult) bool { return h.Measure == m && h.Contender == c })
		if i < 0 {
			return nil
		}
		return rep.Hooks[i].Rounds
	}
	hookRow := func(figure, m string, f func(HookFigures) float64) {
		add(figure, "scribe submit --wait", "flock(1) + dd", column(hook(m, HookScribe), f), column(hook(m, HookFlock), f))
	}
	if rep.Settings.Submits > 0 {
		hookRow("submit --wait, warm daemon: wall p50 ms", MeasureSubmit, func(f HookFigures) float64 { return f.P50MS })
		hookRow("submit --wait: CPU µs per process (+ daemon's)", MeasureSubmit, func(f HookFigures) float64 { return orNaN(f.CPUTotalUS) })
	}
	if n := rep.Settings.Hooks; n > 0 {
		hookRow(fmt.Sprintf("%d hooks at once: wall p50 ms", n), MeasureBurst, func(f HookFigures) float64 { return f.P50MS })
		hookRow(fmt.Sprintf("%d hooks at once: wall p90 ms", n), MeasureBurst, func(f HookFigures) float64 { return f.P90MS })
		hookRow(fmt.Sprintf("%d hooks at once: wall max ms", n), MeasureBurst, func(f HookFigures) float64 { return f.MaxMS })
	}

	ps := rep.Settings.Producers
	if len(ps) == 0 {
		return out
	}
	one, many := slices.Min(ps), slices.Max(ps)
	cell := func(w string, p int, c string) []Figures {
		i := slices.IndexFunc(rep.Results, func(r Result) bool { return r.Workload == w && r.Producers == p && r.Contender == c })
		if i < 0 {
			return nil
		}
		return rep.Results[i].Rounds
	}
	row := func(w string, p int, what, c, alt string, f func(Figures) float64) {
		add(fmt.Sprintf("%s, %s: %s", producersLabel(p), w, what), c, alt, column(cell(w, p, c), f), column(cell(w, p, "flock"), f))
	}
	rate := func(f Figures) float64 { return f.JobsPerSec }
	cpu := func(f Figures) float64 { return orNaN(f.CPUTotalUS) }
	r := rep.Settings.Relaxed
	apply, always, submit := "scribe-apply-"+r, "scribe-apply-always", "scribe-submit-"+r
	for _, c := range []string{apply, always, submit} {
		row("append", many, "jobs/s", c, "flock", rate)
	}
	for _, c := range []string{apply, always, submit} {
		row("append", many, "CPU µs/job", c, "flock", cpu)
	}
	row("append", one, "p50 ms", apply, "flock", func(f Figures) float64 { return f.P50MS })
	row("append", one, "syncs/job", apply, "flock", func(f Figures) float64 { return orNaN(f.SyncsPerJob) })
	put := workloads[slices.IndexFunc(workloads, func(w Workload) bool { return w.Name == "put1m" })]
	written := func(f Figures) float64 { return orNaN(f.BytesPerJob) / float64(put.Bytes) }
	for _, c := range []string{apply, always} {
		row(put.Name, many, "jobs/s", c, "flock + rename", rate)
	}
	for _, c := range []string{apply, always} {
		row(put.Name, many, "CPU µs/job", c, "flock + rename", cpu)
	}
	for _, c := range []string{apply, always} {
		row(put.Name, many, "bytes written / data", c, "flock + rename", written)
	}
	return out
}

func producersLabel(p int) string {
	if p == 1 {
		return "1 producer"
	}
	return fmt.Sprintf("%d producers", p)
}

// writeTargets writes the targets' table.
func writeTargets(w io.Writer, ts []Target, rounds int) {
	if len(ts) == 0 {
		return
	}
	fmt.Fprintf(w, "\ntargets: median (lowest–highest) over %d rounds; ratio: scribe's ÷ the alternative's of the same round\n", rounds)
	rows := [][]string{{"figure", "scribe", "alternative", "scribe's", "alternative's", "ratio"}}
	for _, t := range ts {
		alt, ratio := "n/a", "n/a"
		if t.AltValue != nil {
			alt = spreadText(*t.AltValue, figureText, "")
		}
		if t.Ratio != nil {
			ratio = spreadText(*t.Ratio, ratioText, "×")
		}
		rows = append(rows, []string{t.Figure, t.Scribe, t.Alternative, spreadText(t.Value, figureText, ""), alt, ratio})
	}
	writeTable(w, rows, 3)
}

// spreadText is "MEDIAN(unit) (MIN–MAX)", or the median alone when the
// rounds agree or one measured it.
func spreadText(s Spread, text func(float64) string, unit string) string {
	m := text(s.Median) + unit
	if s.N < 2 || text(s.Min) == text(s.Max) {
		return m
	}
	return m + " (" + text(s.Min) + "–" + text(s.Max) + ")"
}

// figureText is a figure with three significant digits or so.
func figureText(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "n/a"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func ratioText(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
