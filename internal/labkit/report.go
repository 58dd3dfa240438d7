package labkit

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/staggerhq/stagger/internal/report"
)

// WriteReport writes the lab's HTML report of results — one scenario, one
// result per strategy — to w: a self-contained page (inline SVG, no scripts,
// no network) with a side-by-side table and, per strategy, the attempts the
// gateway received per window over time (accepted and rejected stacked), the
// outage shaded, the peak marked, and the strategy's summary table. The
// charts come one under the other after the side-by-side table, with the
// same axes unless o says otherwise, so the strategies compare at a
// glance. subtitle is printed under the title (for example the command
// line and the date).
func WriteReport(w io.Writer, subtitle string, results []*Result, o ReportOptions) error {
	p, err := reportPage(subtitle, results, o)
	if err != nil {
		return err
	}
	return report.Write(w, p)
}

// WriteReportFile is WriteReport to path, atomically: a failed run leaves
// neither a half-written file nor a temporary one.
func WriteReportFile(path, subtitle string, results []*Result, o ReportOptions) error {
	p, err := reportPage(subtitle, results, o)
	if err != nil {
		return err
	}
	return report.WriteFile(path, p)
}

// ReportOptions change how the report draws its charts. The zero value is
// the default: shared axes.
type ReportOptions struct {
	// PerChartAxes gives each strategy's chart a Y axis of its own, up to
	// its own peak, so that a peak of 8 beside one of 244, or a tail of
	// single attempts, can be read; the X axis stays shared. The page says
	// which axes it uses. With shared axes (the default) bar heights
	// compare across charts.
	PerChartAxes bool
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summaryColumns and summaryRow make the side-by-side table.
var summaryColumns = []string{"strategy", "attempts", "accepted", "peak", "last acceptance",
	"attempts / request", "gave up", "distinct waits", "counts agree"}

func lastAccept(r *Result) string {
	if r.Gateway.Accepted == 0 {
		return "-"
	}
	return fmt.Sprintf("%d ms", wholeMS(r.Gateway.LastAccepted))
}

func gaveUp(r *Result) string {
	var gave []string
	for reason, n := range r.GaveUp() {
		gave = append(gave, fmt.Sprintf("%d %s", n, reason))
	}
	if len(gave) == 0 {
		return "0"
	}
	slices.Sort(gave)
	return strings.Join(gave, ", ")
}

func agreement(r *Result) string {
	if r.Agree() {
		return "yes"
	}
	return fmt.Sprintf("NO (%d mismatches)", len(r.Mismatches))
}

func summaryRow(r *Result) []string {
	return []string{
		r.Strategy.Name,
		fmt.Sprint(r.Gateway.Total),
		fmt.Sprint(r.Gateway.Accepted),
		fmt.Sprint(r.Gateway.Peak),
		lastAccept(r),
		fmt.Sprintf("%.1f", r.Gateway.AttemptsPerRequest()),
		gaveUp(r),
		fmt.Sprint(r.DistinctWaits()),
		agreement(r),
	}
}

// detailTable is one strategy's numbers, one per row.
func detailTable(r *Result) *report.Table {
	w := r.Scenario.window()
	rows := [][]string{
		{"attempts received by the gateway", fmt.Sprint(r.Gateway.Total)},
		{"accepted", fmt.Sprint(r.Gateway.Accepted)},
		{"rejected", fmt.Sprint(r.Gateway.Rejected)},
		{fmt.Sprintf("peak in one %v window", w), fmt.Sprintf("%d (from %d ms)", r.Gateway.Peak, wholeMS(r.Gateway.PeakAt))},
		{"time to last acceptance", lastAccept(r)},
		{"attempts per logical request", fmt.Sprintf("%.1f", r.Gateway.AttemptsPerRequest())},
		{"most attempts by one request", fmt.Sprint(r.Gateway.MaxAttempts)},
		{"callers accepted", fmt.Sprintf("%d/%d", r.CallersAccepted(), len(r.Callers))},
		{"callers that gave up", gaveUp(r)},
		{"waits before retries (distinct)", fmt.Sprintf("%d (%d)", len(r.Waits()), r.DistinctWaits())},
		{"gateway latency", fmt.Sprintf("%.1f ms", msf(r.Latency))},
	}
	if r.Scenario.RoundTrip > 0 {
		rows = append(rows, []string{"overhead per cycle, measured before the run", fmt.Sprintf("%.1f ms", msf(r.Overhead))})
	}
	rows = append(rows, []string{"overhead per cycle, observed in the run", fmt.Sprintf("%.1f ms", msf(r.ObservedOverhead()))})
	rows = append(rows, []string{"caller and gateway counts agree", agreement(r)})
	return &report.Table{Columns: []string{"measure", "value"}, Rows: rows}
}

func reportPage(subtitle string, results []*Result, o ReportOptions) (report.Page, error) {
	if len(results) == 0 {
		return report.Page{}, fmt.Errorf("%w: a report needs at least one result", ErrInvalid)
	}
	s := results[0].Scenario
	w := s.window()
	// Shared axes: from the start to the end of the latest window of any
	// strategy, up to the highest peak (which is at least every bar).
	var xMax float64
	var yMax int
	for _, r := range results {
		if n := len(r.Gateway.Timeline); n > 0 {
			xMax = max(xMax, msf(r.Gateway.Timeline[n-1].Start+w))
		}
		yMax = max(yMax, r.Gateway.Peak)
	}
	xMax = max(xMax, msf(s.Faults.End()), msf(w))
	yTop := roundUp(float64(yMax))
	var shades []report.Shade
	for _, d := range s.Faults.Down {
		shades = append(shades, report.Shade{From: msf(d.From), To: msf(d.To), Label: "gateway down"})
	}
	for _, f := range s.Faults.Flap {
		shades = append(shades, report.Shade{From: msf(f.From), To: msf(f.To), Label: "flapping"})
	}
	for _, sl := range s.Faults.Slow {
		shades = append(shades, report.Shade{From: msf(sl.From), To: msf(sl.To), Label: "slowing down"})
	}

	axes := fmt.Sprintf("All charts share their axes (Y up to %g, the highest peak being %d): bar heights compare across strategies "+
		"(stagger lab --report-axes per-chart gives each chart its own Y axis).", yTop, yMax)
	if o.PerChartAxes {
		axes = "Each chart has its own Y axis, up to its own peak (read the tick labels before comparing heights); the X axis is shared."
	}

	table := &report.Table{Columns: summaryColumns}
	for _, r := range results {
		table.Rows = append(table.Rows, summaryRow(r))
	}
	page := report.Page{
		Title:    "stagger lab — what the gateway received",
		Subtitle: subtitle,
		Notes: []string{
			describe(s),
			fmt.Sprintf("Each chart counts the attempts that reached the gateway in consecutive %v windows, accepted and rejected stacked; "+
				"the shaded span is the outage and the mark is the peak: the most attempts inside any %v window, sliding. "+
				"%s", w, w, axes),
		},
		Sections: []report.Section{{Title: "Side by side", Table: table}},
	}
	for _, r := range results {
		acc := report.Series{Name: "accepted"}
		rej := report.Series{Name: "rejected"}
		for _, b := range r.Gateway.Timeline {
			acc.Points = append(acc.Points, report.Point{X: msf(b.Start), Y: float64(b.Accepted)})
			rej.Points = append(rej.Points, report.Point{X: msf(b.Start), Y: float64(b.Rejected)})
		}
		chartYMax := yTop
		if o.PerChartAxes {
			chartYMax = 0 // auto: up to this chart's own peak
		}
		chart := report.Chart{
			Title:    r.Strategy.Name,
			Kind:     report.Bars,
			XLabel:   "time since start (ms)",
			YLabel:   fmt.Sprintf("attempts per %v", w),
			XMin:     0,
			XMax:     xMax,
			YMax:     chartYMax,
			BarWidth: msf(w),
			Series:   []report.Series{acc, rej},
			Shades:   shades,
		}
		if r.Gateway.Total > 0 {
			chart.Marks = []report.Mark{{
				X: msf(r.Gateway.PeakAt), Y: float64(r.Gateway.Peak),
				Label: fmt.Sprintf("peak %d in [%d, %d) ms", r.Gateway.Peak, wholeMS(r.Gateway.PeakAt), wholeMS(r.Gateway.PeakAt+w)),
			}}
		}
		page.Sections[0].Charts = append(page.Sections[0].Charts, chart)
		page.Sections = append(page.Sections, report.Section{
			Title: fmt.Sprintf("%s (%s)", r.Strategy.Title, r.Strategy.Name),
			Notes: []string{fmt.Sprintf("%s: %d callers, %d attempts total, %d accepted, peak %d.",
				r.Strategy.Title, s.Callers, r.Gateway.Total, r.Gateway.Accepted, r.Gateway.Peak)},
			Table: detailTable(r),
		})
	}
	return page, nil
}

// describe says what the scenario was, in one sentence.
func describe(s Scenario) string {
	var b strings.Builder
	attempts := s.MaxAttempts
	if attempts == 0 {
		attempts = DefaultCallerAttempts
	}
	fmt.Fprintf(&b, "%d callers starting over %v, each retrying one request until accepted (at most %d attempts); ",
		s.Callers, s.Ramp, attempts)
	switch len(s.Faults.Down) {
	case 0:
		b.WriteString("the gateway is never down")
	default:
		parts := make([]string, len(s.Faults.Down))
		for i, d := range s.Faults.Down {
			parts[i] = fmt.Sprintf("%v–%v", d.From, d.To)
		}
		b.WriteString("the gateway is down " + strings.Join(parts, ", "))
	}
	if s.RoundTrip > 0 {
		fmt.Fprintf(&b, " and answers after a latency calibrated per run so that callers see a %v round trip", s.RoundTrip)
	} else {
		fmt.Fprintf(&b, " and answers after %v", s.Faults.Latency)
	}
	if s.Faults.Capacity > 0 {
		fmt.Fprintf(&b, ", refusing attempts beyond %d in flight", s.Faults.Capacity)
	}
	fmt.Fprintf(&b, "; jitter seed %d.", s.Seed)
	return b.String()
}

// roundUp returns the smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 and 8
// times a power of ten that is at least v (0 for v <= 0): a shared axis
// ends on a round number not far above the highest peak.
func roundUp(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
