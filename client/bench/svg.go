package bench

import (
	"encoding/xml"
	"fmt"
	"math"
	"slices"
	"strings"
)

// The chart of `scribe bench --svg`: for each workload, throughput and
// p99 latency against producers, one line per contender, both on log
// scales. Hand-written SVG, self-contained.

// Chart geometry, in pixels.
const (
	svgWidth      = 960
	svgHeader     = 86  // title and legend
	svgBlock      = 300 // one workload: its title and two panels
	svgPanelW     = 470
	svgPlotLeft   = 64 // room for the y axis labels
	svgPlotRight  = 16
	svgPlotTop    = 48 // within a block: the workload's title and the panel's
	svgPlotBottom = 44 // room for the x axis labels
)

// svgSeries is one contender's line in a panel.
type svgSeries struct {
	name, color string
	dashed      bool
	x           []float64 // producers
	y           []float64
}

// SVG draws the report's medians: throughput and p99 latency against
// producers, a panel each per workload.
func (rep *Report) SVG() string {
	var sb strings.Builder
	height := svgHeader + svgBlock*len(rep.Workloads)
	fmt.Fprintf(&sb, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">
<rect width="100%%" height="100%%" fill="white"/>
`, svgWidth, height, svgWidth, height)
	rounds := "the median of %d rounds"
	if rep.Settings.Rounds == 1 {
		rounds = "%d round"
	}
	fmt.Fprintf(&sb, `<text x="%d" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", svgPlotLeft,
		esc("scribe bench: durable jobs/s and p99 latency against producers ("+fmt.Sprintf(rounds, rep.Settings.Rounds)+")"))
	// The legend: three contenders a row.
	for i, ct := range rep.Contenders {
		color, dashed := contenderStyle(ct)
		x, y := svgPlotLeft+(i%3)*280, 46+(i/3)*18
		fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/>`+"\n", x, y-4, x+26, y-4, color, dash(dashed))
		fmt.Fprintf(&sb, `<text x="%d" y="%d">%s</text>`+"\n", x+32, y, esc(ct.Name))
	}
	for i, wl := range rep.Workloads {
		top := svgHeader + i*svgBlock
		fmt.Fprintf(&sb, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", svgPlotLeft, top+18, esc(wl.Name+": "+wl.About))
		var rate, p99 []svgSeries
		for _, ct := range rep.Contenders {
			color, dashed := contenderStyle(ct)
			r := svgSeries{name: ct.Name, color: color, dashed: dashed}
			l := r
			for _, res := range rep.Results {
				if res.Workload == wl.Name && res.Contender == ct.Name {
					r.x, r.y = append(r.x, float64(res.Producers)), append(r.y, res.Median.JobsPerSec)
					l.x, l.y = append(l.x, float64(res.Producers)), append(l.y, res.Median.P99MS)
				}
			}
			rate, p99 = append(rate, r), append(p99, l)
		}
		svgPanel(&sb, 0, top, "throughput", "durable jobs/s (log scale)", rate)
		svgPanel(&sb, svgPanelW, top, "p99 latency (fail-fast: of the writes not lost)", "p99 latency, ms (log scale)", p99)
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

// svgPanel draws one panel at (left, top): axes, grid, a line per series.
func svgPanel(sb *strings.Builder, left, top int, title, yLabel string, series []svgSeries) {
	x0, x1 := float64(left+svgPlotLeft), float64(left+svgPanelW-svgPlotRight)
	y0, y1 := float64(top+svgPlotTop), float64(top+svgBlock-svgPlotBottom)
	xs, ys := []float64{}, []float64{}
	for _, s := range series {
		xs = append(xs, s.x...)
		for _, v := range s.y {
			if v > 0 {
				ys = append(ys, v)
			}
		}
	}
	fmt.Fprintf(sb, `<g><title>%s</title>`+"\n", esc(title))
	fmt.Fprintf(sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", x0, y0, x1-x0, y1-y0)
	fmt.Fprintf(sb, `<text x="%.1f" y="%.1f" font-weight="bold">%s</text>`+"\n", x0, y0-8, esc(title))
	fmt.Fprintf(sb, `<text x="%.1f" y="%.1f" text-anchor="middle">producers</text>`+"\n", (x0+x1)/2, y1+34)
	fmt.Fprintf(sb, `<text transform="translate(%.1f %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", float64(left+16), (y0+y1)/2, esc(yLabel))
	if len(xs) == 0 || len(ys) == 0 {
		fmt.Fprintf(sb, `<text x="%.1f" y="%.1f" text-anchor="middle">no data</text>`+"\n</g>\n", (x0+x1)/2, (y0+y1)/2)
		return
	}
	// x: log2 of producers; y: log10, whole decades.
	xlo, xhi := math.Log2(slices.Min(xs)), math.Log2(slices.Max(xs))
	xpos := func(p float64) float64 {
		if xhi == xlo {
			return (x0 + x1) / 2
		}
		return x0 + 12 + (math.Log2(p)-xlo)/(xhi-xlo)*(x1-x0-24)
	}
	ylo, yhi := math.Floor(math.Log10(slices.Min(ys))), math.Ceil(math.Log10(slices.Max(ys)))
	if yhi == ylo {
		yhi++
	}
	ypos := func(v float64) float64 { return y1 - (math.Log10(v)-ylo)/(yhi-ylo)*(y1-y0) }
	for _, p := range uniq(xs) {
		x := xpos(p)
		fmt.Fprintf(sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, y0, x, y1)
		fmt.Fprintf(sb, `<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`+"\n", x, y1+16, p)
	}
	steps := []float64{1, 2, 5}
	if yhi-ylo > 3 {
		steps = []float64{1}
	}
	for e := ylo; e <= yhi; e++ {
		for _, m := range steps {
			v := m * math.Pow(10, e)
			if math.Log10(v) > yhi+1e-9 {
				break
			}
			y := ypos(v)
			fmt.Fprintf(sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x0, y, x1, y)
			fmt.Fprintf(sb, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-4, y+4, tickLabel(v))
		}
	}
	for _, s := range series {
		var pts []string
		for i := range s.x {
			if s.y[i] > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xpos(s.x[i]), ypos(s.y[i])))
			}
		}
		if len(pts) == 0 {
			continue
		}
		fmt.Fprintf(sb, `<g><title>%s</title>`+"\n", esc(s.name))
		fmt.Fprintf(sb, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.color, dash(s.dashed))
		for _, p := range pts {
			x, y, _ := strings.Cut(p, ",")
			fmt.Fprintf(sb, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", x, y, s.color)
		}
		sb.WriteString("</g>\n")
	}
	sb.WriteString("</g>\n")
}

// contenderStyle is a contender's color (by kind) and whether its line is
// dashed (relaxed sync, fail-fast).
func contenderStyle(ct Contender) (color string, dashed bool) {
	switch {
	case ct.Scribe && ct.Submit:
		return "#2ca02c", ct.Sync != "always"
	case ct.Scribe:
		return "#1f77b4", ct.Sync != "always"
	case ct.FailFast:
		return "#ff7f0e", true
	}
	return "#d62728", false
}

func dash(dashed bool) string {
	if dashed {
		return ` stroke-dasharray="6 4"`
	}
	return ""
}

// tickLabel is a tick value, short: 500, 2k, 1M, 0.5.
func tickLabel(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%.3g", v)
}

// esc escapes text for XML.
func esc(s string) string {
	var sb strings.Builder
	_ = xml.EscapeText(&sb, []byte(s))
	return sb.String()
}

// uniq is v's distinct values, in first-seen order.
func uniq(v []float64) []float64 {
	var out []float64
	for _, x := range v {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
