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
	lr := newLineReader(r)
	bad := func(field, rule string) error { return &Error{Line: lr.line, Window: -1, Field: field, Rule: rule} }
	readRow := func() ([]string, error) {
		for {
			line, err := lr.next()
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
				return nil, bad("", fmt.Sprintf("malformed CSV (a row must fit on one line): %v", err))
			}
			return rec, nil
		}
	}
	head, err := readRow()
	if err == io.EOF {
		return nil, &Error{Line: 1, Window: -1, Rule: "empty file: want a header row naming the columns, such as window_start_ms,arrivals,timeout,p50_ms,p99_ms"}
	}
	if err != nil {
		return nil, err
	}
	col := map[string]int{}
	var statusCols []string
	for i, name := range head {
		n := strings.ToLower(strings.TrimSpace(name))
		if _, dup := col[n]; dup {
			return nil, bad(n, "column named twice")
		}
		switch {
		case slices.Contains(csvColumns, n):
		case strings.HasPrefix(n, "status_") && validStatus(n[len("status_"):]):
			statusCols = append(statusCols, n)
		default:
			return nil, bad(name, "unknown column (want "+strings.Join(csvColumns, ", ")+", or status_NNN / status_Nxx)")
		}
		col[n] = i
	}
	_, abs := col["window_start"]
	_, rel := col["window_start_ms"]
	switch {
	case abs == rel:
		return nil, bad("window_start", "exactly one of the columns window_start (RFC 3339) and window_start_ms is required")
	case !has(col, "arrivals"):
		return nil, bad("arrivals", "the column is required")
	}
	slices.Sort(statusCols)
	tl := &Timeline{Header: Header{Width: width}}
	var origin time.Time
	var lines []int // the line of each window
	for {
		rec, err := readRow()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(rec) != len(head) {
			return nil, bad("", fmt.Sprintf("%d cells, the header names %d columns", len(rec), len(head)))
		}
		cell := func(name string) string {
			if i, ok := col[name]; ok {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		count := func(name string) (int64, error) {
			v := cell(name)
			if v == "" {
				return 0, nil
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || n > MaxCount {
				return 0, bad(name, fmt.Sprintf("want a whole number in [0, 2^53], got %q", v))
			}
			return n, nil
		}
		var w Window
		if abs {
			v := cell("window_start")
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return nil, bad("window_start", fmt.Sprintf("want an RFC 3339 time such as 2026-11-03T14:00:00Z, got %q", v))
			}
			if origin.IsZero() {
				origin = t
				tl.Origin = t
			}
			w.Start = t.Sub(origin)
			if w.Start < 0 || w.Start > MaxSpan {
				return nil, bad("window_start", fmt.Sprintf("must not come before the first row's (%s) nor more than %v after it", origin.Format(time.RFC3339Nano), MaxSpan))
			}
		} else {
			ms, err := count("window_start_ms")
			if err != nil {
				return nil, err
			}
			if cell("window_start_ms") == "" {
				return nil, bad("window_start_ms", "required in every row")
			}
			if ms > MaxSpan.Milliseconds() {
				return nil, bad("window_start_ms", fmt.Sprintf("must be in [0, %d], got %d", MaxSpan.Milliseconds(), ms))
			}
			w.Start = time.Duration(ms) * time.Millisecond
		}
		if cell("arrivals") == "" {
			return nil, bad("arrivals", "required in every row")
		}
		for _, f := range []struct {
			name string
			p    *int64
		}{{"arrivals", &w.Arrivals}, {"refusals", &w.Refusals}, {"timeout", &w.Timeouts}, {"reset", &w.Resets},
			{"refused", &w.Refused}, {"abandoned", &w.Abandoned}} {
			if *f.p, err = count(f.name); err != nil {
				return nil, err
			}
		}
		w.Originals = -1
		if cell("originals") != "" {
			if w.Originals, err = count("originals"); err != nil {
				return nil, err
			}
		}
		for _, c := range statusCols {
			n, err := count(c)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				w.Status = append(w.Status, StatusCount{Status: c[len("status_"):], N: n})
			}
		}
		if len(statusCols) == 0 {
			rest := w.Arrivals - w.Refusals - w.Timeouts - w.Resets - w.Refused - w.Abandoned
			if rest < 0 {
				return nil, bad("arrivals", fmt.Sprintf("must be at least refusals + errors + abandoned = %d, got %d", w.Arrivals-rest, w.Arrivals))
			}
			if rest > 0 {
				w.Status = []StatusCount{{Status: "2xx", N: rest}}
			}
		}
		if err := csvLatency(&w, cell, bad); err != nil {
			return nil, err
		}
		if len(tl.Windows) == MaxWindows {
			return nil, bad("", fmt.Sprintf("more than %d windows", MaxWindows))
		}
		if n := len(tl.Windows); n > 0 && w.Start <= tl.Windows[n-1].Start {
			return nil, bad(startCol(abs), fmt.Sprintf("rows must be in order of start: %v comes after %v", w.Start, tl.Windows[n-1].Start))
		}
		if w.Start%time.Millisecond != 0 {
			return nil, bad(startCol(abs), fmt.Sprintf("must fall on a whole millisecond, got %v after the first row", w.Start))
		}
		if width != 0 {
			var prev *Window
			if n := len(tl.Windows); n > 0 {
				prev = &tl.Windows[n-1]
			}
			if field, rule := w.check(prev, width); rule != "" {
				return nil, bad(csvField(field, abs), rule)
			}
		}
		tl.Windows = append(tl.Windows, w)
		lines = append(lines, lr.line)
	}
	if len(tl.Windows) == 0 {
		return nil, &Error{Line: lr.line + 1, Window: -1, Rule: "no rows: want one row per window after the header"}
	}
	if width == 0 {
		if len(tl.Windows) < 2 {
			return nil, &Error{Window: -1, Field: "width", Rule: "one row does not tell the window's width: give it"}
		}
		gap := time.Duration(math.MaxInt64)
		for i := 1; i < len(tl.Windows); i++ {
			gap = min(gap, tl.Windows[i].Start-tl.Windows[i-1].Start)
		}
		tl.Width = gap
		if err := tl.Validate(); err != nil {
			if e, ok := err.(*Error); ok && e.Window >= 0 {
				e.Line, e.Window, e.Field = lines[e.Window], -1, csvField(e.Field, abs)
			}
			return nil, err
		}
	}
	return tl, nil
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
