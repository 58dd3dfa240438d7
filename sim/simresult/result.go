// Package simresult is what a simulation produces — a table, charts and
// notes — and its writers (text, CSV, JSON, an HTML report). It is the one
// definition of the result that package sim returns (sim.Result is
// simresult.Result) and the simulator behind it builds.
package simresult

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Result is what a scenario run produces: a table (the rows printed, or
// written as JSON or CSV), charts for the HTML report, and notes. Every
// number in it is a pure function of the scenario's parameters and seed.
type Result struct {
	Scenario string    // scenario name, e.g. "herd"
	Title    string    // one line saying what was simulated
	Settings []Setting // the parameters used, in order
	Notes    []string  // findings and model statements printed under the table
	Log      []string  // per-attempt lines (outage), printed after the notes; not in the report
	Table    Table     // the rows, printed and written as JSON or CSV
	Charts   []Chart   // the charts of the HTML report, in order
	Events   uint64    // discrete-event engine events handled, summed over all runs (not written)
}

// Setting is one parameter value of a run.
type Setting struct {
	Name, Value string // the parameter's flag name and its value as printed
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

// Chart is one chart of the report: lines (or bars) per series on shared
// axes.
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

// Point is one (x, y) value.
type Point struct {
	X, Y float64 // in the chart's axis units
}

// Shade marks an x range, e.g. an outage.
type Shade struct {
	From, To float64 // X range in axis units, From <= To
	Label    string  // e.g. "down"
}

// cell formats one cell; floats with the column's precision. NaN and ±Inf
// are errors: a result must never print them.
func (c Column) cell(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "", fmt.Errorf("sim: column %s has the non-finite value %v", c.Key, x)
		}
		s := strconv.FormatFloat(x, 'f', c.Prec, 64)
		if strings.TrimLeft(s, "-0.") == "" { // no negative zero
			s = strings.TrimPrefix(s, "-")
		}
		return s, nil
	}
	return "", fmt.Errorf("sim: column %s has a value of type %T", c.Key, v)
}

// Strings returns every cell as printed (floats with their column's
// precision).
func (t *Table) Strings() ([][]string, error) {
	out := make([][]string, len(t.Rows))
	for i, row := range t.Rows {
		if len(row) != len(t.Columns) {
			return nil, fmt.Errorf("sim: row %d has %d cells for %d columns", i, len(row), len(t.Columns))
		}
		out[i] = make([]string, len(row))
		for j, v := range row {
			s, err := t.Columns[j].cell(v)
			if err != nil {
				return nil, err
			}
			out[i][j] = s
		}
	}
	return out, nil
}

// WriteText prints the title, the settings, the table with aligned columns
// (text left, numbers right), the notes and the log, each block after a
// blank line.
func (r *Result) WriteText(w io.Writer) error {
	cells, err := r.Table.Strings()
	if err != nil {
		return err
	}
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "%s — %s\n", r.Scenario, r.Title)
	if len(r.Settings) > 0 {
		parts := make([]string, len(r.Settings))
		for i, s := range r.Settings {
			parts[i] = s.Name + "=" + s.Value
		}
		fmt.Fprintf(b, "  %s\n", strings.Join(parts, " "))
	}
	b.WriteByte('\n')
	cols := r.Table.Columns
	width := make([]int, len(cols))
	numeric := make([]bool, len(cols))
	for j, c := range cols {
		width[j] = utf8.RuneCountInString(c.Title)
		numeric[j] = true
	}
	for i, row := range cells {
		for j, s := range row {
			width[j] = max(width[j], utf8.RuneCountInString(s))
			if _, ok := r.Table.Rows[i][j].(string); ok {
				numeric[j] = false
			}
		}
	}
	line := func(row []string) {
		for j, s := range row {
			if j > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[j]-utf8.RuneCountInString(s))
			if numeric[j] {
				b.WriteString(pad + s)
			} else if j == len(row)-1 {
				b.WriteString(s)
			} else {
				b.WriteString(s + pad)
			}
		}
		b.WriteByte('\n')
	}
	head := make([]string, len(cols))
	for j, c := range cols {
		head[j] = c.Title
	}
	line(head)
	for _, row := range cells {
		line(row)
	}
	for _, lines := range [][]string{r.Notes, r.Log} {
		if len(lines) > 0 {
			b.WriteByte('\n')
		}
		for _, n := range lines {
			fmt.Fprintf(b, "%s\n", n)
		}
	}
	return b.Flush()
}

// WriteCSV writes a header of column keys and one record per row.
func (r *Result) WriteCSV(w io.Writer) error {
	cells, err := r.Table.Strings()
	if err != nil {
		return err
	}
	cw := csv.NewWriter(w)
	head := make([]string, len(r.Table.Columns))
	for j, c := range r.Table.Columns {
		head[j] = c.Key
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	if err := cw.WriteAll(cells); err != nil {
		return err
	}
	return cw.Error()
}

// WriteJSON writes one JSON object: {"scenario", "title", "settings",
// "rows": [{column key: value, ...}, ...], "notes", "log"}, keys in column order,
// numbers with their column's precision, newline-terminated.
func (r *Result) WriteJSON(w io.Writer) error {
	cells, err := r.Table.Strings()
	if err != nil {
		return err
	}
	var b strings.Builder
	str := func(s string) {
		q, _ := json.Marshal(s)
		b.Write(q)
	}
	b.WriteString(`{"scenario":`)
	str(r.Scenario)
	b.WriteString(`,"title":`)
	str(r.Title)
	b.WriteString(`,"settings":{`)
	for i, s := range r.Settings {
		if i > 0 {
			b.WriteByte(',')
		}
		str(s.Name)
		b.WriteByte(':')
		str(s.Value)
	}
	b.WriteString(`},"rows":[`)
	for i, row := range cells {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('{')
		for j, s := range row {
			if j > 0 {
				b.WriteByte(',')
			}
			str(r.Table.Columns[j].Key)
			b.WriteByte(':')
			if _, isStr := r.Table.Rows[i][j].(string); isStr {
				str(s)
			} else {
				b.WriteString(s)
			}
		}
		b.WriteByte('}')
	}
	for _, list := range []struct {
		key   string
		lines []string
	}{{"notes", r.Notes}, {"log", r.Log}} {
		b.WriteString(`],"` + list.key + `":[`)
		for i, n := range list.lines {
			if i > 0 {
				b.WriteByte(',')
			}
			str(n)
		}
	}
	b.WriteString("]}\n")
	_, err = io.WriteString(w, b.String())
	return err
}
