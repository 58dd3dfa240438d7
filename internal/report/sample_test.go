package report_test

import (
	"math"
	"math/rand/v2"

	"github.com/staggerhq/stagger/internal/report"
)

// labWindows returns accepted/rejected counts per 200 ms window for a
// strategy whose attempts per window follow counts, with the gateway down
// (everything rejected) before downUntil ms.
func labWindows(counts []int, downUntil float64) []report.Series {
	acc := report.Series{Name: "accepted"}
	rej := report.Series{Name: "rejected"}
	for i, n := range counts {
		x := float64(i * 200)
		a := 0
		if x >= downUntil && n > 0 {
			a = min(n, 1)
		}
		acc.Points = append(acc.Points, report.Point{X: x, Y: float64(a)})
		rej.Points = append(rej.Points, report.Point{X: x, Y: float64(n - a)})
	}
	return []report.Series{acc, rej}
}

// samplePage is a small lab-like page: two Bars charts sharing axes and a
// Lines chart on a log X axis, with shades, marks and a summary table.
func samplePage() report.Page {
	immediate := []int{4, 18, 16, 4, 4, 4, 5, 4, 3, 2}
	jitter := []int{4, 4, 3, 4, 2, 3, 2, 2, 1, 0}
	shade := []report.Shade{{From: 0, To: 700, Label: "gateway down"}}
	var lines []report.Series
	for i, name := range []string{"retry immediately", "exponential + full jitter", "decorrelated jitter"} {
		s := report.Series{Name: name}
		for n := 1.0; n <= 1e6; n *= 10 {
			s.Points = append(s.Points, report.Point{X: n, Y: n * (16 - 4*float64(i)) * (1 + 0.1*math.Log10(n))})
		}
		lines = append(lines, s)
	}
	return report.Page{
		Title:    `Retry lab: "immediate" vs <jitter> & friends`,
		Subtitle: "go run ./cmd/stagger lab -callers 4 · 2025-01-01 12:00 UTC",
		Notes:    []string{"The gateway is down for the first 700 ms; every attempt is counted on the receiving side in 200 ms windows."},
		Sections: []report.Section{
			{
				Title: "Attempts per 200 ms window",
				Notes: []string{"Both charts share their axes: XMin 0, XMax 2000, YMax 20."},
				Table: &report.Table{
					Columns: []string{"strategy", "attempts", "accepted", "peak / window", "first success"},
					Rows: [][]string{
						{"retry immediately", "64", "4", "18", "708 ms"},
						{"exponential + full jitter", "25", "4", "13", "1,150 ms"},
					},
				},
				Charts: []report.Chart{
					{
						Title: "Retry immediately", Kind: report.Bars,
						XLabel: "time (ms)", YLabel: "attempts per window",
						XMin: 0, XMax: 2000, YMax: 20, BarWidth: 200,
						Series: labWindows(immediate, 700),
						Shades: shade,
						Marks:  []report.Mark{{X: 200, Y: 18, Label: "peak 18"}},
					},
					{
						Title: "Exponential + full jitter", Kind: report.Bars,
						XLabel: "time (ms)", YLabel: "attempts per window",
						XMin: 0, XMax: 2000, YMax: 20, BarWidth: 200,
						Series: labWindows(jitter, 700),
						Shades: shade,
						Marks:  []report.Mark{{X: 0, Y: 4, Label: "peak 4"}},
					},
				},
			},
			{
				Title: "Calls to the dependency vs number of callers",
				Charts: []report.Chart{{
					Title: "Calls vs N (simulated)", Kind: report.Lines,
					XLabel: "callers N", YLabel: "calls", LogX: true, LogY: true,
					Series: lines,
				}},
			},
		},
	}
}

// bigLines is a sim-sized Lines chart: series × n points of a noisy curve.
func bigLines(series, n int) report.Chart {
	rng := rand.New(rand.NewPCG(1, 2))
	c := report.Chart{Title: "sim", Kind: report.Lines, XLabel: "t (s)", YLabel: "in flight"}
	for s := range series {
		sr := report.Series{Name: "strategy " + string(rune('A'+s))}
		for i := range n {
			x := float64(i) / 10
			sr.Points = append(sr.Points, report.Point{X: x, Y: 100 + 50*math.Sin(x/10+float64(s)) + 20*rng.Float64()})
		}
		c.Series = append(c.Series, sr)
	}
	return c
}
