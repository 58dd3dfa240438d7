package simresult

import (
	"io"

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
	for _, c := range res.Charts {
		rc := report.Chart{
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
