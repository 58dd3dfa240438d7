package report_test

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/staggerhq/stagger/internal/report"
)

// labPage is a lab-sized page: 6 strategies × 60 windows of accepted and
// rejected attempts on shared axes, a summary table and a Lines chart.
func labPage() report.Page {
	sec := report.Section{Title: "Attempts per 200 ms window", Table: &report.Table{Columns: []string{"strategy", "attempts", "accepted", "peak"}}}
	calls := report.Chart{Title: "attempts vs callers", Kind: report.Lines, LogX: true, XLabel: "callers", YLabel: "attempts"}
	for s := range 6 {
		name := fmt.Sprintf("strategy %d", s+1)
		var counts []int
		for w := range 60 {
			counts = append(counts, (w*7+s*13)%19)
		}
		sec.Charts = append(sec.Charts, report.Chart{
			Title: name, Kind: report.Bars, XLabel: "time (ms)", YLabel: "attempts",
			XMin: 0, XMax: 12000, YMax: 20, BarWidth: 200,
			Series: labWindows(counts, 1000),
			Shades: []report.Shade{{From: 0, To: 1000, Label: "gateway down"}},
			Marks:  []report.Mark{{X: 200, Y: 18, Label: "peak 18"}},
		})
		sec.Table.Rows = append(sec.Table.Rows, []string{name, "64", "4", "18"})
		sr := report.Series{Name: name}
		for n := 1.0; n <= 1e6; n *= 10 {
			sr.Points = append(sr.Points, report.Point{X: n, Y: n * float64(s+1)})
		}
		calls.Series = append(calls.Series, sr)
	}
	return report.Page{Title: "lab", Sections: []report.Section{sec, {Title: "scale", Charts: []report.Chart{calls}}}}
}

func BenchmarkWrite(b *testing.B) {
	for _, bc := range []struct {
		name string
		page report.Page
	}{
		{"lab-6x60", labPage()},
		{"sim-5x2000", report.Page{Sections: []report.Section{{Charts: []report.Chart{bigLines(5, 2000)}}}}},
		{"sim-5x10000-downsampled", report.Page{Sections: []report.Section{{Charts: []report.Chart{bigLines(5, 10000)}}}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var buf bytes.Buffer
			if err := report.Write(&buf, bc.page); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(buf.Len())) // MB/s of HTML produced
			b.ReportAllocs()
			for b.Loop() {
				if err := report.Write(io.Discard, bc.page); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "html-bytes")
		})
	}
}
