package sim

import (
	"io"

	"github.com/staggerhq/stagger/internal/simkit"
)

// Result is what a scenario run produces: a table (printed, or written as
// JSON or CSV), charts for the HTML report, and notes. Every number in it
// is a pure function of the scenario's parameters and the seed.
type Result struct {
	Scenario string    // scenario name, e.g. "herd"
	Title    string    // one line saying what was simulated
	Settings []Setting // every parameter's value, in order
	Notes    []string  // findings and model statements printed under the table
	Log      []string  // per-attempt lines (outage), printed after the notes; not in the report
	Table    Table     // the rows
	Charts   []Chart   // the charts of the HTML report, in order
}

// Setting is one parameter value of a run.
type Setting struct {
	Name, Value string // the parameter's name and its value as printed
}

// Table is a result's rows. A cell is a string, an int, an int64 or a
// float64 (printed with its column's precision).
type Table struct {
	Columns []Column // in order
	Rows    [][]any  // each of len(Columns) cells
}

// Column describes a table column.
type Column struct {
	Key   string // JSON and CSV name (snake_case)
	Title string // heading in the text table
	Prec  int    // digits after the point for float64 cells
}

// Chart is one chart of the report: lines (or stacked bars) per series on
// shared axes.
type Chart struct {
	Title          string   // caption
	XLabel, YLabel string   // axis titles
	Bars           bool     // stacked bars instead of lines
	BarWidth       float64  // Bars: width of one bar in X units; 0 = auto
	LogY           bool     // values span orders of magnitude
	Series         []Series // in legend order
	Shades         []Shade  // shaded X ranges, e.g. an outage
}

// Series is one named line of a chart.
type Series struct {
	Name   string  // legend entry, e.g. a strategy
	Points []Point // Bars: X is the left edge of the bar
}

// Point is one (x, y) value, in the chart's axis units.
type Point struct{ X, Y float64 }

// Shade marks an X range, e.g. an outage.
type Shade struct {
	From, To float64 // X range in axis units, From <= To
	Label    string  // e.g. "down"
}

// WriteText prints the title, the settings, the table with aligned columns,
// the notes and the log, as `stagger sim` does.
func (r *Result) WriteText(w io.Writer) error { return r.kit().WriteText(w) }

// WriteCSV writes a header of column keys and one record per row.
func (r *Result) WriteCSV(w io.Writer) error { return r.kit().WriteCSV(w) }

// WriteJSON writes one JSON object: {"scenario", "title", "settings",
// "rows": [{column key: value, ...}, ...], "notes", "log"}, keys in column
// order, numbers with their column's precision, newline-terminated — the
// output of `stagger sim NAME --json`.
func (r *Result) WriteJSON(w io.Writer) error { return r.kit().WriteJSON(w) }

// WriteReport writes the result as a self-contained HTML page (inline SVG,
// no scripts, no network): the notes, the table and the charts. subtitle is
// printed under the title (for example how and when the run was made).
func (r *Result) WriteReport(w io.Writer, subtitle string) error {
	return simkit.WriteReport(w, r.kit(), subtitle)
}

// fromKit and kit convert between the public result and the
// implementation's, whose types have the same fields (a test checks).
func fromKit(k *simkit.Result) *Result {
	r := &Result{Scenario: k.Scenario, Title: k.Title, Notes: k.Notes, Log: k.Log,
		Table: Table{Rows: k.Table.Rows}}
	r.Settings = convert(k.Settings, func(s simkit.Setting) Setting { return Setting(s) })
	r.Table.Columns = convert(k.Table.Columns, func(c simkit.Column) Column { return Column(c) })
	r.Charts = convert(k.Charts, func(c simkit.Chart) Chart {
		return Chart{Title: c.Title, XLabel: c.XLabel, YLabel: c.YLabel, Bars: c.Bars, BarWidth: c.BarWidth, LogY: c.LogY,
			Shades: convert(c.Shades, func(s simkit.Shade) Shade { return Shade(s) }),
			Series: convert(c.Series, func(s simkit.Series) Series {
				return Series{Name: s.Name, Points: convert(s.Points, func(p simkit.Point) Point { return Point(p) })}
			}),
		}
	})
	return r
}

func (r *Result) kit() *simkit.Result {
	k := &simkit.Result{Scenario: r.Scenario, Title: r.Title, Notes: r.Notes, Log: r.Log,
		Table: simkit.Table{Rows: r.Table.Rows}}
	k.Settings = convert(r.Settings, func(s Setting) simkit.Setting { return simkit.Setting(s) })
	k.Table.Columns = convert(r.Table.Columns, func(c Column) simkit.Column { return simkit.Column(c) })
	k.Charts = convert(r.Charts, func(c Chart) simkit.Chart {
		return simkit.Chart{Title: c.Title, XLabel: c.XLabel, YLabel: c.YLabel, Bars: c.Bars, BarWidth: c.BarWidth, LogY: c.LogY,
			Shades: convert(c.Shades, func(s Shade) simkit.Shade { return simkit.Shade(s) }),
			Series: convert(c.Series, func(s Series) simkit.Series {
				return simkit.Series{Name: s.Name, Points: convert(s.Points, func(p Point) simkit.Point { return simkit.Point(p) })}
			}),
		}
	})
	return k
}

// convert maps f over s, keeping nil as nil.
func convert[A, B any](s []A, f func(A) B) []B {
	if s == nil {
		return nil
	}
	out := make([]B, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}
