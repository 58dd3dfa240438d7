package timeline

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CSV import: one row per window, from an access-log aggregation or a
// metrics export. The first row names the columns (any order, names
// case-insensitive); every other row is a window, in order of start.
//
//	window_start      the window's start, RFC 3339 (2026-11-03T14:00:00.200Z); or
//	window_start_ms   the window's start in whole ms from the recording's start
//	arrivals          attempts that arrived in the window (required)
//	originals         of those, first attempts
//	status_NNN        answers with status NNN (status_503), or of a class (status_5xx)
//	refusals          attempts refused in front of the service (a load shedder's 503)
//	timeout, reset, refused
//	                  attempts with no answer: timed out, connection reset, connection refused
//	abandoned         attempts whose sender went away first
//	p50_ms, p90_ms, p99_ms
//	                  latency percentiles of the answers in ms (p90_ms optional)
//
// Exactly one of window_start and window_start_ms is required, and
// arrivals. An empty cell is 0 (a count) or unknown (a percentile or
// originals). Without any status_ column, the arrivals that were not
// refused, errors or abandoned count as answered 2xx; with one, every row
// must add up (arrivals = status + refusals + errors + abandoned). Rows
// follow the rules of the JSON lines format; a row may not span lines, and
// the last row must end with a newline (a file cut short fails to read).
var csvColumns = []string{"window_start", "window_start_ms", "arrivals", "originals", "refusals",
	"timeout", "reset", "refused", "abandoned", "p50_ms", "p90_ms", "p99_ms"}

// ReadCSV reads a CSV export (the columns above) into a timeline with
// windows of width; width 0 takes the smallest gap between consecutive
// rows' starts. An error about the content is an [*Error] naming the line,
// the column and the rule.
func ReadCSV(r io.Reader, width time.Duration) (*Timeline, error) {
	if width != 0 {
		if err := checkWidth(width); err != nil {
			return nil, &Error{Window: -1, Field: "width", Rule: err.Error()}
		}
	}
	c := &csvReader{lr: newLineReader(r), width: width}
	if err := c.readHeader(); err != nil {
		return nil, err
	}
	c.tl = &Timeline{Header: Header{Width: width}}
	for {
		rec, err := c.readRow()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		w, err := c.window(rec)
		if err != nil {
			return nil, err
		}
		if err := c.add(w); err != nil {
			return nil, err
		}
	}
	if len(c.tl.Windows) == 0 {
		return nil, &Error{Line: c.lr.line + 1, Window: -1, Rule: "no rows: want one row per window after the header"}
	}
	if width == 0 {
		if err := c.takeWidth(); err != nil {
			return nil, err
		}
	}
	return c.tl, nil
}

// csvReader holds what reading a CSV export learns as it goes: the header's
// columns, the first row's start, and the windows read so far.
type csvReader struct {
	lr         *lineReader
	width      time.Duration // as given; 0 until takeWidth
	head       []string      // the header row as written
	col        map[string]int
	statusCols []string  // status_ columns, sorted
	abs        bool      // window_start (a time) rather than window_start_ms
	origin     time.Time // the first row's window_start
	tl         *Timeline
	lines      []int // the line of each window
}

// bad is a content error at the current line.
func (c *csvReader) bad(field, rule string) error { return c.lr.bad(field, rule) }

// readRow reads the next row, skipping blank lines; io.EOF at the end.
func (c *csvReader) readRow() ([]string, error) {
	for {
		line, err := c.lr.next()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue // blank lines carry nothing
		}
		cr := csv.NewReader(bytes.NewReader(line))
		cr.FieldsPerRecord = -1
		rec, err := cr.Read()
		if err != nil {
			return nil, c.bad("", fmt.Sprintf("malformed CSV (a row must fit on one line): %v", err))
		}
		return rec, nil
	}
}

// readHeader reads the header row and checks its columns: each known and
// named once, exactly one start column, and arrivals.
func (c *csvReader) readHeader() error {
	head, err := c.readRow()
	if err == io.EOF {
		return &Error{Line: 1, Window: -1, Rule: "empty file: want a header row naming the columns, such as window_start_ms,arrivals,timeout,p50_ms,p99_ms"}
	}
	if err != nil {
		return err
	}
	c.head, c.col = head, map[string]int{}
	for i, name := range head {
		n := strings.ToLower(strings.TrimSpace(name))
		if _, dup := c.col[n]; dup {
			return c.bad(n, "column named twice")
		}
		switch {
		case slices.Contains(csvColumns, n):
		case strings.HasPrefix(n, "status_") && validStatus(n[len("status_"):]):
			c.statusCols = append(c.statusCols, n)
		default:
			return c.bad(name, "unknown column (want "+strings.Join(csvColumns, ", ")+", or status_NNN / status_Nxx)")
		}
		c.col[n] = i
	}
	_, abs := c.col["window_start"]
	_, rel := c.col["window_start_ms"]
	switch {
	case abs == rel:
		return c.bad("window_start", "exactly one of the columns window_start (RFC 3339) and window_start_ms is required")
	case !has(c.col, "arrivals"):
		return c.bad("arrivals", "the column is required")
	}
	c.abs = abs
	slices.Sort(c.statusCols)
	return nil
}

// cell is the row's trimmed cell of the column; "" when there is no such
// column.
func (c *csvReader) cell(rec []string, name string) string {
	if i, ok := c.col[name]; ok {
		return strings.TrimSpace(rec[i])
	}
	return ""
}

// count reads a count cell; empty is 0.
func (c *csvReader) count(rec []string, name string) (int64, error) {
	v := c.cell(rec, name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > MaxCount {
		return 0, c.bad(name, fmt.Sprintf("want a whole number in [0, 2^53], got %q", v))
	}
	return n, nil
}

// window reads one row into a window, checking the row on its own.
func (c *csvReader) window(rec []string) (Window, error) {
	if len(rec) != len(c.head) {
		return Window{}, c.bad("", fmt.Sprintf("%d cells, the header names %d columns", len(rec), len(c.head)))
	}
	var w Window
	var err error
	if c.abs {
		w.Start, err = c.absStart(rec)
	} else {
		w.Start, err = c.relStart(rec)
	}
	if err != nil {
		return Window{}, err
	}
	if err := c.counts(rec, &w); err != nil {
		return Window{}, err
	}
	if err := c.statuses(rec, &w); err != nil {
		return Window{}, err
	}
	cell := func(name string) string { return c.cell(rec, name) }
	if err := csvLatency(&w, cell, c.bad); err != nil {
		return Window{}, err
	}
	return w, nil
}

// absStart reads window_start, an RFC 3339 time, as an offset from the
// first row's.
func (c *csvReader) absStart(rec []string) (time.Duration, error) {
	v := c.cell(rec, "window_start")
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, c.bad("window_start", fmt.Sprintf("want an RFC 3339 time such as 2026-11-03T14:00:00Z, got %q", v))
	}
	if c.origin.IsZero() {
		c.origin = t
		c.tl.Origin = t
	}
	start := t.Sub(c.origin)
	if start < 0 || start > MaxSpan {
		return 0, c.bad("window_start", fmt.Sprintf("must not come before the first row's (%s) nor more than %v after it", c.origin.Format(time.RFC3339Nano), MaxSpan))
	}
	return start, nil
}

// relStart reads window_start_ms, required in every row.
func (c *csvReader) relStart(rec []string) (time.Duration, error) {
	ms, err := c.count(rec, "window_start_ms")
	if err != nil {
		return 0, err
	}
	if c.cell(rec, "window_start_ms") == "" {
		return 0, c.bad("window_start_ms", "required in every row")
	}
	if ms > MaxSpan.Milliseconds() {
		return 0, c.bad("window_start_ms", fmt.Sprintf("must be in [0, %d], got %d", MaxSpan.Milliseconds(), ms))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// counts reads arrivals (required), the error counts and originals
// (unknown when empty).
func (c *csvReader) counts(rec []string, w *Window) (err error) {
	if c.cell(rec, "arrivals") == "" {
		return c.bad("arrivals", "required in every row")
	}
	for _, f := range []struct {
		name string
		p    *int64
	}{{"arrivals", &w.Arrivals}, {"refusals", &w.Refusals}, {"timeout", &w.Timeouts}, {"reset", &w.Resets},
		{"refused", &w.Refused}, {"abandoned", &w.Abandoned}} {
		if *f.p, err = c.count(rec, f.name); err != nil {
			return err
		}
	}
	w.Originals = -1
	if c.cell(rec, "originals") != "" {
		if w.Originals, err = c.count(rec, "originals"); err != nil {
			return err
		}
	}
	return nil
}

// statuses reads the status_ columns; without any, the arrivals left after
// refusals, errors and abandoned count as answered 2xx.
func (c *csvReader) statuses(rec []string, w *Window) error {
	for _, col := range c.statusCols {
		n, err := c.count(rec, col)
		if err != nil {
			return err
		}
		if n > 0 {
			w.Status = append(w.Status, StatusCount{Status: col[len("status_"):], N: n})
		}
	}
	if len(c.statusCols) > 0 {
		return nil
	}
	rest := w.Arrivals - w.Refusals - w.Timeouts - w.Resets - w.Refused - w.Abandoned
	if rest < 0 {
		return c.bad("arrivals", fmt.Sprintf("must be at least refusals + errors + abandoned = %d, got %d", w.Arrivals-rest, w.Arrivals))
	}
	if rest > 0 {
		w.Status = []StatusCount{{Status: "2xx", N: rest}}
	}
	return nil
}

// add appends the window after checking it against the one before: in
// order, on a whole millisecond, and, with a width given, the window rules.
func (c *csvReader) add(w Window) error {
	tl := c.tl
	if len(tl.Windows) == MaxWindows {
		return c.bad("", fmt.Sprintf("more than %d windows", MaxWindows))
	}
	if n := len(tl.Windows); n > 0 && w.Start <= tl.Windows[n-1].Start {
		return c.bad(startCol(c.abs), fmt.Sprintf("rows must be in order of start: %v comes after %v", w.Start, tl.Windows[n-1].Start))
	}
	if w.Start%time.Millisecond != 0 {
		return c.bad(startCol(c.abs), fmt.Sprintf("must fall on a whole millisecond, got %v after the first row", w.Start))
	}
	if c.width != 0 {
		var prev *Window
		if n := len(tl.Windows); n > 0 {
			prev = &tl.Windows[n-1]
		}
		if field, rule := w.check(prev, c.width); rule != "" {
			return c.bad(csvField(field, c.abs), rule)
		}
	}
	tl.Windows = append(tl.Windows, w)
	c.lines = append(c.lines, c.lr.line)
	return nil
}

// takeWidth sets the width to the smallest gap between rows' starts, then
// checks the windows against it, naming a failing row by its line.
func (c *csvReader) takeWidth() error {
	tl := c.tl
	if len(tl.Windows) < 2 {
		return &Error{Window: -1, Field: "width", Rule: "one row does not tell the window's width: give it"}
	}
	gap := time.Duration(math.MaxInt64)
	for i := 1; i < len(tl.Windows); i++ {
		gap = min(gap, tl.Windows[i].Start-tl.Windows[i-1].Start)
	}
	tl.Width = gap
	if err := tl.Validate(); err != nil {
		if e, ok := err.(*Error); ok && e.Window >= 0 {
			e.Line, e.Window, e.Field = c.lines[e.Window], -1, csvField(e.Field, c.abs)
		}
		return err
	}
	return nil
}

func has(m map[string]int, k string) bool { _, ok := m[k]; return ok }

func startCol(abs bool) string {
	if abs {
		return "window_start"
	}
	return "window_start_ms"
}

// csvField names a Window.check field by its CSV column.
func csvField(field string, abs bool) string {
	switch {
	case field == "start_ms":
		return startCol(abs)
	case strings.HasPrefix(field, "errors."):
		return field[len("errors."):]
	case strings.HasPrefix(field, "status["):
		return "status_" + strings.Trim(field[len("status["):], `"]`)
	}
	return field
}

func csvLatency(w *Window, cell func(string) string, bad func(string, string) error) error {
	p50, p90, p99 := cell("p50_ms"), cell("p90_ms"), cell("p99_ms")
	if p50 == "" && p90 == "" && p99 == "" {
		return nil
	}
	if p50 == "" || p99 == "" {
		return bad("p50_ms", "p50_ms and p99_ms go together (p90_ms is optional)")
	}
	for _, p := range []struct {
		name, v string
		d       *time.Duration
	}{{"p50_ms", p50, &w.Latency.P50}, {"p90_ms", p90, &w.Latency.P90}, {"p99_ms", p99, &w.Latency.P99}} {
		if p.v == "" {
			continue
		}
		f, err := strconv.ParseFloat(p.v, 64)
		var ok bool
		if err == nil {
			*p.d, ok = msDuration(f)
		}
		if !ok {
			return bad(p.name, fmt.Sprintf("must be a finite number of ms in [0, %d], got %q", MaxLatency.Milliseconds(), p.v))
		}
	}
	if p90 == "" {
		w.Latency.P90 = InterpolateP90(w.Latency.P50, w.Latency.P99)
	}
	w.HasLatency = true
	if l := w.Latency; l.P50 > l.P90 || l.P90 > l.P99 {
		return bad("p90_ms", fmt.Sprintf("percentiles must not decrease: p50 %v, p90 %v, p99 %v", l.P50, l.P90, l.P99))
	}
	return nil
}
