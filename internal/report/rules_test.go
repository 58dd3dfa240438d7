package report

import (
	"bufio"
	"io"
	"testing"
)

// The layout rules hold by construction for charts built to break them:
// long names, lines that end early, explicit colours that repeat, more
// series than the palette has colours. No label leaves the chart, no two
// series look alike, and a line that ends early gets no leader to the edge.
func TestLayoutRules(t *testing.T) {
	long := "expo-full+budget, a long strategy name"
	line := func(name string, n int, c Color) Series {
		var pts []Point
		for i := range n {
			pts = append(pts, Point{X: float64(i), Y: float64(i * (len(name) % 7))})
		}
		return Series{Name: name, Points: pts, Color: c}
	}
	var many []Series
	for i := range 20 {
		many = append(many, line("strategy "+itoa(i), 20, AutoColor))
	}
	charts := []Chart{
		{Kind: Lines, EndLabels: true, Series: []Series{line(long, 20, AutoColor), line("immediate", 6, AutoColor), line("x", 20, AutoColor)}},
		{Kind: Lines, EndLabels: true, Dashed: true, Wide: true, Series: many},
		{Kind: Lines, Series: []Series{line("a", 10, 1), line("b", 10, 1), line("c", 10, 1)}},
		{Kind: Lines, EndLabels: true, Series: []Series{line("Rate + k·(Rate − Capacity)", 20, AutoColor), line("100ms unbounded", 3, AutoColor)},
			Shades: []Shade{{From: 15, To: 19, Label: "a shade label far too long for its place"}}},
	}
	for ci := range charts {
		c := &charts[ci]
		r := newRenderer(bufio.NewWriter(io.Discard))
		l := r.layoutChart(c)
		seen := map[string]int{}
		for i := range c.Series {
			k := l.seriesColor[i] + "/" + l.dash(i)
			if j, dup := seen[k]; dup {
				t.Errorf("chart %d: series %d and %d share colour and dash %s", ci, j, i, k)
			}
			seen[k] = i
		}
		for _, it := range l.legend {
			if right := it.x + 16 + 6 + textWidth(it.name, fontLegend); right > l.width {
				t.Errorf("chart %d: legend %q ends at %.0f, past the chart's %.0f", ci, it.name, right, l.width)
			}
		}
		for _, e := range l.endLabels {
			name := l.legend[e.series].name
			w := textWidth(name, fontLegend)
			pts := l.drawn[e.series]
			early := pts[len(pts)-1].X < l.x.max-0.02*(l.x.max-l.x.min)
			if early != e.inside {
				t.Errorf("chart %d: %q ends early %v but is labelled inside %v", ci, name, early, e.inside)
			}
			lo, hi := l.right+8, l.right+8+w
			if e.inside {
				lo, hi = e.x, e.x+w
				if e.anchor == "end" {
					lo, hi = e.x-w, e.x
				}
				if lo < l.left || hi > l.right {
					t.Errorf("chart %d: inside label %q spans [%.0f, %.0f], the plot [%.0f, %.0f]", ci, name, lo, hi, l.left, l.right)
				}
			}
			if lo < 0 || hi > l.width {
				t.Errorf("chart %d: end label %q spans [%.0f, %.0f], the chart is %.0f wide", ci, name, lo, hi, l.width)
			}
			if e.y < l.top || e.y > l.bottom+6 {
				t.Errorf("chart %d: end label %q at y %.0f, the plot [%.0f, %.0f]", ci, name, e.y, l.top, l.bottom)
			}
		}
		for _, sl := range l.shadeLabels {
			w := textWidth(c.Shades[sl.shade].Label, fontTick)
			lo := map[string]float64{"start": sl.x, "end": sl.x - w, "middle": sl.x - w/2}[sl.anchor]
			if lo < 0 || lo+w > l.width {
				t.Errorf("chart %d: shade label %q spans [%.0f, %.0f], the chart is %.0f wide", ci, c.Shades[sl.shade].Label, lo, lo+w, l.width)
			}
		}
	}
}
