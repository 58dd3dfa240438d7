package report_test

import (
	"bytes"
	"fmt"
	"log"
	"regexp"

	"github.com/staggerhq/stagger/internal/report"
)

// Write renders a page; tests (and anyone scraping a report) find the
// charts, series and bars by their stable class and data attributes.
func ExampleWrite() {
	window := 200.0 // ms
	page := report.Page{
		Title:    "Retry lab",
		Subtitle: "stagger lab -callers 4",
		Sections: []report.Section{{
			Title: "Retry immediately",
			Table: &report.Table{
				Columns: []string{"strategy", "attempts", "peak / window"},
				Rows:    [][]string{{"retry immediately", "64", "18"}},
			},
			Charts: []report.Chart{{
				Title:  "Attempts per 200 ms window",
				Kind:   report.Bars,
				XLabel: "time (ms)", YLabel: "attempts",
				BarWidth: window,
				Series: []report.Series{
					{Name: "accepted", Points: []report.Point{{X: 0, Y: 0}, {X: 200, Y: 0}, {X: 400, Y: 1}}},
					{Name: "rejected", Points: []report.Point{{X: 0, Y: 4}, {X: 200, Y: 18}, {X: 400, Y: 3}}},
				},
				Shades: []report.Shade{{From: 0, To: 400, Label: "gateway down"}},
				Marks:  []report.Mark{{X: 200, Y: 18, Label: "peak 18"}},
			}},
		}},
	}
	var html bytes.Buffer
	if err := report.Write(&html, page); err != nil {
		log.Fatal(err)
	}
	hooks := regexp.MustCompile(`<(svg class="chart" data-title="[^"]*"|g class="series" data-name="[^"]*"|rect class="bar" data-x="[^"]*" data-y="[^"]*"|rect class="shade" data-label="[^"]*"|g class="mark" data-label="[^"]*"|table class="summary")`)
	for _, m := range hooks.FindAllStringSubmatch(html.String(), -1) {
		fmt.Println(m[1])
	}
	// Output:
	// table class="summary"
	// svg class="chart" data-title="Attempts per 200 ms window"
	// rect class="shade" data-label="gateway down"
	// g class="series" data-name="accepted"
	// rect class="bar" data-x="0" data-y="0"
	// rect class="bar" data-x="200" data-y="0"
	// rect class="bar" data-x="400" data-y="1"
	// g class="series" data-name="rejected"
	// rect class="bar" data-x="0" data-y="4"
	// rect class="bar" data-x="200" data-y="18"
	// rect class="bar" data-x="400" data-y="3"
	// g class="mark" data-label="peak 18"
}

// WriteFile writes the report atomically: bad input (here a NaN) is
// reported with the chart, series and field, and no file is left behind.
func ExampleWriteFile() {
	nan := 0.0
	nan /= nan
	page := report.Page{Sections: []report.Section{{Title: "sim", Charts: []report.Chart{{
		Title: "in flight", Kind: report.Lines,
		Series: []report.Series{{Name: "full jitter", Points: []report.Point{{X: 0, Y: 1}, {X: 1, Y: nan}}}},
	}}}}}
	err := report.WriteFile("/nonexistent-dir/report.html", page)
	fmt.Println(err)
	// Output:
	// report: section 1 "sim": chart 1 "in flight": series "full jitter": Points[1].Y is NaN: values must be finite
}
