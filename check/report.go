package check

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/staggerhq/stagger/internal/report"
)

// Page returns the result as an HTML report page (the lab's and the
// simulator's report): a summary table, the verdicts when given, and per
// window the attempts received, the amplification and the goodput of
// every policy, the fault shaded.
func (r *Result) page(vs []Verdict) report.Page {
	pg := report.Page{
		Title:    "stagger check: " + r.name(),
		Subtitle: fmt.Sprintf("%s time, seed %d, windows of %v, %v", r.Clock, r.Seed, r.Window, r.Duration),
	}
	if len(r.Experiment.Faults) > 0 {
		pg.Notes = append(pg.Notes, "faults: "+strings.Join(r.Experiment.Faults, "; "))
	}
	pg.Notes = append(pg.Notes, r.Skipped...)
	sum := &report.Table{Columns: []string{"policy", "requests", "attempts", "amplification", "peak", "goodput/s", "recovery", "give-ups", "unfinished", "p50", "p99"}}
	for _, p := range r.Policies {
		rec := "never"
		if p.Recovered {
			rec = p.Recovery.Round(100 * time.Microsecond).String()
		}
		sum.Rows = append(sum.Rows, []string{p.Name, fmt.Sprint(p.Requests), fmt.Sprint(p.Attempts),
			fmt.Sprintf("%.3f", p.Amplification), fmt.Sprint(p.Peak), fmt.Sprintf("%.1f", p.Goodput), rec,
			giveUps(p.GaveUp), fmt.Sprint(p.Unfinished), p.Latency.P50.Round(100 * time.Microsecond).String(), p.Latency.P99.Round(100 * time.Microsecond).String()})
	}
	main := report.Section{Title: "What the dependency received", Table: sum}
	var shades []report.Shade
	if r.FaultEnd > r.FaultStart {
		shades = []report.Shade{{From: ms(r.FaultStart), To: ms(r.FaultEnd), Label: "fault"}}
	}
	load := report.Chart{Title: "attempts received per window", Kind: report.Lines, XLabel: "time (ms)", YLabel: "attempts", Shades: shades, Wide: true}
	amp := report.Chart{Title: "amplification per window (attempts per request started)", Kind: report.Lines, XLabel: "time (ms)", YLabel: "attempts/request", Shades: shades}
	good := report.Chart{Title: "goodput per window (requests succeeded)", Kind: report.Lines, XLabel: "time (ms)", YLabel: "successes", Shades: shades}
	for _, p := range r.Policies {
		ls, as, gs := report.Series{Name: p.Name}, report.Series{Name: p.Name}, report.Series{Name: p.Name}
		for _, w := range p.Windows {
			x := ms(w.Start)
			ls.Points = append(ls.Points, report.Point{X: x, Y: float64(w.Attempts)})
			as.Points = append(as.Points, report.Point{X: x, Y: w.Amplification()})
			gs.Points = append(gs.Points, report.Point{X: x, Y: float64(w.Successes)})
		}
		load.Series, amp.Series, good.Series = append(load.Series, ls), append(amp.Series, as), append(good.Series, gs)
	}
	main.Charts = []report.Chart{load, amp, good}
	if len(r.Recorded) > 0 {
		rv := report.Chart{Title: "attempts per window: as recorded, and as each policy replays the recording", Kind: report.Lines,
			XLabel: "time since the recording started (ms)", YLabel: "attempts", Wide: true}
		rec := report.Series{Name: "recorded", Color: report.Grey}
		for _, w := range r.Recorded {
			rec.Points = append(rec.Points, report.Point{X: ms(w.Start), Y: float64(w.Attempts)})
		}
		rv.Series = append(rv.Series, rec)
		for _, p := range r.Policies {
			s := report.Series{Name: p.Name + " (replayed)"}
			for _, w := range p.Windows {
				s.Points = append(s.Points, report.Point{X: ms(w.Start), Y: float64(w.Attempts)})
			}
			rv.Series = append(rv.Series, s)
		}
		main.Charts = append([]report.Chart{rv}, main.Charts...)
	}
	pg.Sections = append(pg.Sections, main)
	if len(vs) > 0 {
		t := &report.Table{Columns: []string{"policy", "measure", "limit", "value", "window", "verdict"}}
		for _, v := range vs {
			verdict := "fail"
			if v.OK {
				verdict = "pass"
			}
			t.Rows = append(t.Rows, []string{v.Policy, v.Measure, v.Limit, v.Value, v.Window, verdict})
		}
		pg.Sections = append(pg.Sections, report.Section{Title: "Thresholds", Table: t})
	}
	return pg
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func giveUps(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// WriteHTML writes the result as a self-contained HTML report, with the
// verdicts when given.
func (r *Result) WriteHTML(w io.Writer, vs []Verdict) error { return report.Write(w, r.page(vs)) }

// WriteReport writes the HTML report to path atomically (a temporary file
// renamed into place), so a failed write leaves nothing half-written.
func (r *Result) WriteReport(path string, vs []Verdict) error {
	return report.WriteFile(path, r.page(vs))
}
