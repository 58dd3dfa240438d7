// Package timeline is a recorded per-window account of what a dependency
// did: for each window of a fixed width, the attempts that arrived, the
// answers by status code or class, the attempts refused in front of it, the
// attempts that got no answer (by kind: timeout, reset, connection
// refused), the attempts their senders abandoned, and the latency
// percentiles of the answers.
//
// `stagger proxy --record FILE` writes one (see [Create]); [ReadCSV] takes
// the same from an access-log aggregation or a metrics export; the
// simulator replays one (the dependency follows the recorded capacity, error
// rate and latency while a policy under test decides the retries).
//
// # File format
//
// JSON lines (one JSON object per line, each ending in "\n", at most
// [MaxLine] bytes):
//
//	{"stagger_timeline":1,"window_ms":200,"origin":"2026-11-03T14:00:00Z","source":"stagger proxy"}
//	{"start_ms":0,"arrivals":12,"originals":4,"status":{"200":3},"refusals":9,"p50_ms":24.1,"p90_ms":25,"p99_ms":31.5}
//	{"start_ms":200,"arrivals":7,"status":{"200":5,"5xx":1},"errors":{"timeout":1},"p50_ms":24,"p90_ms":26,"p99_ms":40}
//	{"end":{"windows":2,"arrivals":19}}
//
// The first line is the header: the format's version (1), the window width
// in whole milliseconds, and optionally the wall-clock time of start_ms 0
// (RFC 3339) and what wrote the file. Then one line per window, in order of
// start_ms; a window with no traffic may be left out. The last line closes
// the file with the number of windows and of arrivals: a file cut short
// anywhere fails to read instead of reading as a shorter outage.
//
// A window's fields:
//
//	start_ms    window start, whole ms from the recording's start; >= 0, and at least
//	            window_ms after the previous window's start (no overlap)
//	arrivals    attempts that arrived in [start_ms, start_ms + window_ms)
//	originals   of those, first attempts (optional: known when senders number their attempts)
//	status      answers by status: a code ("503") or a class ("5xx"), each a count
//	refusals    attempts refused in front of the service without reaching it
//	            (a load shedder, a fault proxy's outage or cap); answered 503
//	errors      attempts with no answer, by kind: "timeout", "reset", "refused"
//	abandoned   attempts whose sender went away before the answer
//	p50_ms, p90_ms, p99_ms
//	            latency percentiles of the answers, in ms (optional; when one is
//	            given p50_ms and p99_ms must be, and p50 <= p90 <= p99)
//
// Every count is a whole number >= 0, and arrivals = the sum of status +
// refusals + the errors + abandoned. Unknown fields, duplicate windows,
// windows out of order or overlapping, negative, fractional or non-finite
// numbers, and text where a number belongs are errors of type [*Error]
// naming the line, the field and the rule.
package timeline

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Version is the file format's version, written in the header.
const Version = 1

// Bounds of a timeline.
const (
	// MaxLine is the longest line a reader accepts, in bytes ("\n" included).
	MaxLine = 64 << 10
	// MaxWindows is the most windows one timeline holds (a month of 1 s
	// windows, or six days of 200 ms ones).
	MaxWindows = 1 << 22
	// MaxWidth is the widest window.
	MaxWidth = time.Hour
	// MaxSpan bounds a window's start: 30 days.
	MaxSpan = 30 * 24 * time.Hour
	// MaxCount bounds every count of one window (2^53: exact in a float64).
	MaxCount = 1 << 53
	// MaxLatency bounds a latency percentile.
	MaxLatency = 24 * time.Hour
	// MaxSource bounds the header's source text.
	MaxSource = 200
)

// ErrInvalid is wrapped by every error about a timeline's content.
var ErrInvalid = errors.New("timeline: invalid")

// Error is a rule a file or a [Timeline] broke: where (the line, 0 when not
// reading a file; the window index otherwise), which field, and the rule.
type Error struct {
	Line   int    // 1-based line of the file; 0 when the error is not about a line
	Window int    // 0-based window index when checking a Timeline value; -1 otherwise
	Field  string // e.g. "arrivals", "status[\"503\"]", "window_ms"; "" for the line as a whole
	Rule   string // what is wrong, with the value found
}

func (e *Error) Error() string {
	s := "timeline: "
	switch {
	case e.Line > 0:
		s += "line " + strconv.Itoa(e.Line) + ": "
	case e.Window >= 0:
		s += "window " + strconv.Itoa(e.Window) + ": "
	}
	if e.Field != "" {
		s += e.Field + ": "
	}
	return s + e.Rule
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// Header is what a timeline says about all of its windows.
type Header struct {
	// Width is the width of every window; whole milliseconds in (0, MaxWidth].
	Width time.Duration
	// Origin is the wall-clock time of offset 0 (the zero Time when unknown).
	Origin time.Time
	// Source says what wrote it (at most MaxSource bytes; "" when unknown).
	Source string
}

// validate checks the header's fields.
func (h *Header) validate() *Error {
	if err := checkWidth(h.Width); err != nil {
		return &Error{Window: -1, Field: "window_ms", Rule: err.Error()}
	}
	if len(h.Source) > MaxSource {
		return &Error{Window: -1, Field: "source", Rule: fmt.Sprintf("at most %d bytes, got %d", MaxSource, len(h.Source))}
	}
	return nil
}

// Timeline is a recorded per-window account of what a dependency did.
type Timeline struct {
	Header
	// Windows in order of Start, none overlapping; windows with no traffic
	// may be absent.
	Windows []Window
}

// Window is what the dependency did with the attempts that arrived in
// [Start, Start+Width).
type Window struct {
	// Start is the window's start from the timeline's origin; whole ms.
	Start time.Duration
	// Arrivals counts the attempts that arrived:
	// Arrivals == Answered() + Refusals + Timeouts + Resets + Refused + Abandoned.
	Arrivals int64
	// Originals counts the first attempts among them; -1 when unknown.
	Originals int64
	// Status counts the answers by code or class, ascending by Status.
	Status []StatusCount
	// Refusals counts attempts refused in front of the service (a load
	// shedder's or a fault proxy's 503) without reaching it.
	Refusals int64
	// Attempts that got no answer: timed out, reset, connection refused.
	Timeouts, Resets, Refused int64
	// Abandoned counts attempts whose sender went away before the answer.
	Abandoned int64
	// Latency holds the answers' latency percentiles when HasLatency.
	Latency    Latency
	HasLatency bool
}

// StatusCount counts the answers with one status: a code ("503") or a
// class ("5xx").
type StatusCount struct {
	Status string
	N      int64
}

// Latency holds latency percentiles; P50 <= P90 <= P99.
type Latency struct {
	P50, P90, P99 time.Duration
}

// Answered returns the answers of every status.
func (w *Window) Answered() int64 {
	var n int64
	for _, s := range w.Status {
		n += s.N
	}
	return n
}

// Class returns the answers whose status is in class c (1 to 5): the codes
// c00–c99 and the class "cxx".
func (w *Window) Class(c int) int64 {
	var n int64
	for _, s := range w.Status {
		if int(s.Status[0]-'0') == c {
			n += s.N
		}
	}
	return n
}

// Code returns the answers counted under exactly this status ("503",
// "5xx").
func (w *Window) Code(status string) int64 {
	for _, s := range w.Status {
		if s.Status == status {
			return s.N
		}
	}
	return 0
}

// Failed returns the attempts that failed at the dependency: answers 5xx or
// 429, refusals and attempts with no answer (abandoned ones are not
// counted: their sender gave up, the dependency may have served them).
func (w *Window) Failed() int64 {
	return w.Class(5) + w.Code("429") + w.Refusals + w.Timeouts + w.Resets + w.Refused
}

// Served returns the answers that were not failures (1xx–4xx except 429).
func (w *Window) Served() int64 { return w.Answered() - w.Class(5) - w.Code("429") }

// End returns the end of the last window (0 for none).
func (tl *Timeline) End() time.Duration {
	if len(tl.Windows) == 0 {
		return 0
	}
	return tl.Windows[len(tl.Windows)-1].Start + tl.Width
}

// Arrivals returns the arrivals over every window.
func (tl *Timeline) Arrivals() int64 {
	var n int64
	for i := range tl.Windows {
		n += tl.Windows[i].Arrivals
	}
	return n
}

// At returns the index of the window holding offset t, or -1 when no
// window covers it.
func (tl *Timeline) At(t time.Duration) int {
	i, found := slices.BinarySearchFunc(tl.Windows, t, func(w Window, t time.Duration) int {
		switch {
		case w.Start > t:
			return 1
		case w.Start+tl.Width <= t:
			return -1
		}
		return 0
	})
	if !found {
		return -1
	}
	return i
}

// Validate checks every rule of the file format on a Timeline value; the
// error names the window and the field.
func (tl *Timeline) Validate() error {
	if err := tl.Header.validate(); err != nil {
		return err
	}
	if len(tl.Windows) > MaxWindows {
		return &Error{Window: -1, Field: "windows", Rule: fmt.Sprintf("at most %d windows, got %d", MaxWindows, len(tl.Windows))}
	}
	for i := range tl.Windows {
		var prev *Window
		if i > 0 {
			prev = &tl.Windows[i-1]
		}
		if field, rule := tl.Windows[i].check(prev, tl.Width); rule != "" {
			return &Error{Window: i, Field: field, Rule: rule}
		}
	}
	return nil
}

func checkWidth(d time.Duration) error {
	switch {
	case d <= 0 || d > MaxWidth:
		return fmt.Errorf("must be in (0, %v], got %v", MaxWidth, d)
	case d%time.Millisecond != 0:
		return fmt.Errorf("must be whole milliseconds, got %v", d)
	}
	return nil
}

// check returns the first rule w breaks (field and rule; "" rule when
// none), given the window before it.
func (w *Window) check(prev *Window, width time.Duration) (field, rule string) {
	switch {
	case w.Start < 0 || w.Start > MaxSpan:
		return "start_ms", fmt.Sprintf("must be in [0, %d], got %d", MaxSpan.Milliseconds(), w.Start.Milliseconds())
	case w.Start%time.Millisecond != 0:
		return "start_ms", fmt.Sprintf("must be whole milliseconds, got %v", w.Start)
	case prev != nil && w.Start < prev.Start+width:
		if w.Start <= prev.Start {
			return "start_ms", fmt.Sprintf("windows must be in order of start: %d comes after %d", w.Start.Milliseconds(), prev.Start.Milliseconds())
		}
		return "start_ms", fmt.Sprintf("overlaps the previous window [%d, %d) ms", prev.Start.Milliseconds(), (prev.Start + width).Milliseconds())
	}
	counts := []struct {
		name string
		v    int64
	}{{"arrivals", w.Arrivals}, {"refusals", w.Refusals}, {"errors.timeout", w.Timeouts},
		{"errors.reset", w.Resets}, {"errors.refused", w.Refused}, {"abandoned", w.Abandoned}}
	for _, c := range counts {
		if c.v < 0 || c.v > MaxCount {
			return c.name, fmt.Sprintf("must be a whole number in [0, 2^53], got %d", c.v)
		}
	}
	if w.Originals < -1 || w.Originals > w.Arrivals {
		return "originals", fmt.Sprintf("must be in [0, arrivals = %d] (-1: unknown), got %d", w.Arrivals, w.Originals)
	}
	sum := w.Refusals + w.Timeouts + w.Resets + w.Refused + w.Abandoned
	for i, s := range w.Status {
		f := fmt.Sprintf("status[%q]", s.Status)
		if !validStatus(s.Status) {
			return f, "want a status code 100–599 or a class 1xx–5xx"
		}
		if i > 0 && w.Status[i-1].Status >= s.Status {
			return f, "statuses must be distinct and in ascending order"
		}
		if s.N < 0 || s.N > MaxCount {
			return f, fmt.Sprintf("must be a whole number in [0, 2^53], got %d", s.N)
		}
		sum += s.N
	}
	if sum != w.Arrivals {
		return "arrivals", fmt.Sprintf("must equal status + refusals + errors + abandoned = %d, got %d", sum, w.Arrivals)
	}
	if w.HasLatency {
		l := w.Latency
		for _, p := range []struct {
			name string
			v    time.Duration
		}{{"p50_ms", l.P50}, {"p90_ms", l.P90}, {"p99_ms", l.P99}} {
			if p.v < 0 || p.v > MaxLatency {
				return p.name, fmt.Sprintf("must be in [0, %d] ms, got %v", MaxLatency.Milliseconds(), p.v)
			}
		}
		if l.P50 > l.P90 || l.P90 > l.P99 {
			return "p90_ms", fmt.Sprintf("percentiles must not decrease: p50 %v, p90 %v, p99 %v", l.P50, l.P90, l.P99)
		}
	}
	return "", ""
}

// validStatus reports whether s is "100"–"599" or "1xx"–"5xx".
func validStatus(s string) bool {
	if len(s) != 3 || s[0] < '1' || s[0] > '5' {
		return false
	}
	if s[1:] == "xx" {
		return true
	}
	return s[1] >= '0' && s[1] <= '9' && s[2] >= '0' && s[2] <= '9'
}

// Quantile returns the latency at quantile u in [0, 1] of the distribution
// the percentiles describe: piecewise linear through (0.5, P50),
// (0.9, P90) and (0.99, P99), P50 below the median (the faster half is
// not recorded, so it is taken as the median) and P99 above the 99th
// percentile (the tail beyond it is not recorded either).
func (l Latency) Quantile(u float64) time.Duration {
	lerp := func(u0, u1 float64, a, b time.Duration) time.Duration {
		return a + time.Duration(math.Round((u-u0)/(u1-u0)*float64(b-a)))
	}
	switch {
	case u <= 0.5:
		return l.P50
	case u <= 0.9:
		return lerp(0.5, 0.9, l.P50, l.P90)
	case u <= 0.99:
		return lerp(0.9, 0.99, l.P90, l.P99)
	}
	return l.P99
}

// InterpolateP90 returns the 90th percentile between p50 and p99 when only
// those two are known: linear in the quantile, p50 + (p99 − p50)·0.4/0.49.
func InterpolateP90(p50, p99 time.Duration) time.Duration {
	return p50 + time.Duration(float64(p99-p50)*0.4/0.49)
}
