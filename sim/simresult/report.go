package simresult

import (
	"io"
	"math"

	"github.com/staggerhq/stagger/internal/report"
)

// page turns a simulation result into a report page: one section with
// the notes, the summary table and the charts (lines per strategy).
// subtitle is printed under the title (the CLI prints its command line).
func page(res *Result, subtitle string) (report.Page, error) {
	cells, err := res.Table.Strings()
	if err != nil {
		return report.Page{}, err
	}
	cols := make([]string, len(res.Table.Columns))
	for i, c := range res.Table.Columns {
		cols[i] = c.Title
	}
	settings := "Settings:"
	for _, s := range res.Settings {
		settings += " " + s.Name + "=" + s.Value
	}
	sec := report.Section{Title: res.Title, Notes: res.Notes}
	rows := report.Section{Title: "Rows", Table: &report.Table{Columns: cols, Rows: cells},
		Notes: []string{"The rows printed by the command (also with --json or --csv)."}}
	for _, m := range smallMultiples(res.Charts) {
		c := mergeCoincident(m.Chart)
		rc := report.Chart{
			XMin:     m.xMin,
			XMax:     m.xMax,
			Title:    c.Title,
			Kind:     report.Lines,
			XLabel:   c.XLabel,
			YLabel:   c.YLabel,
			BarWidth: c.BarWidth,
			LogY:     c.LogY && positive(c),
		}
		if !c.Bars && len(c.Series) > 1 {
			// Strategies that land on the same values draw on top of each
			// other: a dash pattern each, and their names at the line ends.
			rc.Dashed, rc.EndLabels = true, true
		}
		if c.Bars {
			rc.Kind = report.Bars
		}
		for _, s := range c.Series {
			pts := make([]report.Point, len(s.Points))
			for i, p := range s.Points {
				pts[i] = report.Point{X: p.X, Y: p.Y}
			}
			rc.Series = append(rc.Series, report.Series{Name: s.Name, Points: pts})
		}
		for _, sh := range c.Shades {
			rc.Shades = append(rc.Shades, report.Shade{From: sh.From, To: sh.To, Label: sh.Label})
		}
		sec.Charts = append(sec.Charts, rc)
	}
	return report.Page{
		Title:    "stagger sim " + res.Scenario,
		Subtitle: subtitle,
		Notes: []string{
			"Simulated in virtual time with the shipped retry, backoff, budget and limit code; the same flags and seed give the same numbers.",
			settings,
		},
		Sections: []report.Section{sec, rows},
	}, nil
}

// spreadLimit is the ratio between the largest and the smallest series
// peak of a linear chart beyond which the small series would be flat lines
// at zero: such a chart is drawn as small multiples.
const spreadLimit = 30

// smallMultiples splits every line chart without a log scale whose series
// peak orders of magnitude apart into one chart per series, each on its
// own Y scale, so that the small series stay readable.
// The multiples share the X range of the chart they come from.
func smallMultiples(charts []Chart) []multiple {
	var out []multiple
	for _, c := range charts {
		if c.Bars || c.LogY || len(c.Series) < 2 || peakSpread(c) < spreadLimit {
			out = append(out, multiple{Chart: c})
			continue
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range c.Series {
			for _, p := range s.Points {
				lo, hi = math.Min(lo, p.X), math.Max(hi, p.X)
			}
		}
		for _, sh := range c.Shades {
			lo, hi = math.Min(lo, sh.From), math.Max(hi, sh.To)
		}
		for _, s := range c.Series {
			one := c
			one.Title = c.Title + " — " + s.Name + " (own scale)"
			one.Series = []Series{s}
			out = append(out, multiple{Chart: one, xMin: lo, xMax: hi})
		}
	}
	return out
}

// coincide is how close, as a fraction of the chart's Y span, two lines
// must stay at every X to be drawn as one.
const coincide = 0.015

// mergeCoincident draws lines that lie on top of each other as one line
// named after all of them ("credits ≈ grpc"): stacked, they would read as
// one line of the last colour, with a pile of names at its end.
func mergeCoincident(c Chart) Chart {
	if c.Bars || len(c.Series) < 2 {
		return c
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, p := range s.Points {
			lo, hi = math.Min(lo, p.Y), math.Max(hi, p.Y)
		}
	}
	tol := coincide * (hi - lo)
	if c.LogY {
		tol = coincide // in log10 units
	}
	var out []Series
	for _, s := range c.Series {
		merged := false
		for i := range out {
			if sameLine(out[i].Points, s.Points, tol, c.LogY) {
				out[i].Name += " ≈ " + s.Name
				merged = true
				break
			}
		}
		if !merged {
			out = append(out, s)
		}
	}
	c.Series = out
	return c
}

// sameLine reports whether a and b have the same X values and Y values
// within tol (of log10 Y on a log scale).
func sameLine(a, b []Point, tol float64, logY bool) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for i := range a {
		if a[i].X != b[i].X {
			return false
		}
		d := math.Abs(a[i].Y - b[i].Y)
		if logY && a[i].Y > 0 && b[i].Y > 0 {
			d = math.Abs(math.Log10(a[i].Y) - math.Log10(b[i].Y))
		}
		if d > tol {
			return false
		}
	}
	return true
}

// multiple is a chart to draw, with the X range it shares with its
// siblings (none when xMin == xMax).
type multiple struct {
	Chart
	xMin, xMax float64
}

// peakSpread is the largest series peak over the smallest positive one
// (0 when fewer than two series have a positive peak).
func peakSpread(c Chart) float64 {
	lo, hi := math.Inf(1), 0.0
	n := 0
	for _, s := range c.Series {
		peak := 0.0
		for _, p := range s.Points {
			peak = math.Max(peak, p.Y)
		}
		if peak > 0 {
			n++
			lo, hi = math.Min(lo, peak), math.Max(hi, peak)
		}
	}
	if n < 2 {
		return 0
	}
	return hi / lo
}

// positive reports whether every y value of c is > 0 (a log axis needs it).
func positive(c Chart) bool {
	for _, s := range c.Series {
		for _, p := range s.Points {
			if !(p.Y > 0) {
				return false
			}
		}
	}
	return true
}

// WriteReport writes the result as a self-contained HTML page (inline SVG,
// no scripts, no network): the notes, the table and the charts. subtitle is
// printed under the title (for example how and when the run was made).
func (res *Result) WriteReport(w io.Writer, subtitle string) error {
	p, err := page(res, subtitle)
	if err != nil {
		return err
	}
	return report.Write(w, p)
}

// WriteReportFile is WriteReport to the file at path, written atomically.
func (res *Result) WriteReportFile(path string, subtitle string) error {
	p, err := page(res, subtitle)
	if err != nil {
		return err
	}
	return report.WriteFile(path, p)
}
