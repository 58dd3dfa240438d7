package labkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/internal/report/browser"
)

var (
	chartRE = regexp.MustCompile(`<svg class="chart" data-title="([^"]*)"`)
	barRE   = regexp.MustCompile(`<rect class="bar" data-x="([^"]*)" data-y="([^"]*)"`)
	xAxisRE = regexp.MustCompile(`(?s)<g class="axis x">.*?</g>`)
	yAxisRE = regexp.MustCompile(`(?s)<g class="axis y">.*?</g>`)
)

// checkReportMarkup checks a report (as written, or as a browser parsed it)
// against the results it was made from: one chart per strategy, in order,
// each holding exactly the gateway's timeline as stacked bars, the outage
// shaded, the peak marked; every chart with the same axes; a summary table
// plus one per strategy.
func checkReportMarkup(t *testing.T, html string, results []*Result) {
	t.Helper()
	titles := chartRE.FindAllStringSubmatch(html, -1)
	if len(titles) != len(results) {
		t.Fatalf("%d charts for %d strategies", len(titles), len(results))
	}
	charts := strings.Split(html, `<svg class="chart"`)[1:]
	var xAxis, yAxis string
	for i, r := range results {
		if titles[i][1] != r.Strategy.Name {
			t.Errorf("chart %d is %q, want %q", i, titles[i][1], r.Strategy.Name)
		}
		c, _, _ := strings.Cut(charts[i], "</svg>")
		accepted, rejected := 0, 0
		series := strings.Split(c, `<g class="series"`)[1:]
		if len(series) != 2 || !strings.HasPrefix(series[0], ` data-name="accepted"`) || !strings.HasPrefix(series[1], ` data-name="rejected"`) {
			t.Fatalf("%s: series are not accepted then rejected", r.Strategy.Name)
		}
		for k, sr := range series {
			bars := barRE.FindAllStringSubmatch(sr, -1)
			if len(bars) != len(r.Gateway.Timeline) {
				t.Errorf("%s: %d bars in series %d, timeline has %d windows", r.Strategy.Name, len(bars), k, len(r.Gateway.Timeline))
			}
			for _, b := range bars {
				var y int
				fmt.Sscan(b[2], &y)
				if k == 0 {
					accepted += y
				} else {
					rejected += y
				}
			}
		}
		if accepted != r.Gateway.Accepted || rejected != r.Gateway.Rejected {
			t.Errorf("%s: bars hold %d accepted and %d rejected, the gateway counted %d and %d",
				r.Strategy.Name, accepted, rejected, r.Gateway.Accepted, r.Gateway.Rejected)
		}
		if !strings.Contains(c, `class="shade" data-label="gateway down"`) {
			t.Errorf("%s: no outage shade", r.Strategy.Name)
		}
		if want := fmt.Sprintf(`class="mark" data-label="peak %d in [`, r.Gateway.Peak); !strings.Contains(c, want) {
			t.Errorf("%s: no peak mark %q", r.Strategy.Name, want)
		}
		xa, ya := xAxisRE.FindString(c), yAxisRE.FindString(c)
		if i == 0 {
			xAxis, yAxis = xa, ya
		} else if xa != xAxis || ya != yAxis {
			t.Errorf("%s: axes differ from %s's: the charts must share them", r.Strategy.Name, results[0].Strategy.Name)
		}
	}
	if n := strings.Count(html, `<table class="summary"`); n != 1+len(results) {
		t.Errorf("%d summary tables, want %d", n, 1+len(results))
	}
}

func runForReport(t *testing.T) []*Result {
	t.Helper()
	s := FourCallerOutage()
	s.Faults, s.RoundTrip = Outage(300*time.Millisecond, 10*time.Millisecond), 0
	var results []*Result
	for _, name := range []string{"immediate", "expo", "expo-full+budget"} {
		results = append(results, mustRun(t, s, mustStrategy(t, name, StrategyOptions{})))
	}
	return results
}

func TestReportMarkup(t *testing.T) {
	var results []*Result
	synctest.Test(t, func(t *testing.T) {
		s := inMemory(FourCallerOutage())
		for _, name := range []string{"immediate", "expo-full", "decorrelated+bulkhead"} {
			results = append(results, mustRun(t, s, mustStrategy(t, name, StrategyOptions{})))
		}
	})
	var buf bytes.Buffer
	if err := WriteReport(&buf, "stagger lab — test", results, ReportOptions{}); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	checkReportMarkup(t, html, results)
	// Nothing loads from outside the file (the SVG namespace is a name,
	// not a link).
	outside := strings.ReplaceAll(strings.ToLower(html), `xmlns="http://www.w3.org/2000/svg"`, "")
	for _, forbidden := range []string{"<script", "http://", "https://", "<link", "src="} {
		if strings.Contains(outside, forbidden) {
			t.Errorf("report contains %q: it must be self-contained", forbidden)
		}
	}
	if err := WriteReport(&buf, "", nil, ReportOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("WriteReport(no results) = %v", err)
	}
	// A file that cannot be written leaves nothing behind.
	dir := t.TempDir()
	if err := WriteReportFile(filepath.Join(dir, "no", "such", "dir.html"), "", results, ReportOptions{}); err == nil {
		t.Error("WriteReportFile into a missing directory succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %v behind", entries)
	}
}

// TestReportInBrowser renders the report of a real lab run (loopback HTTP,
// real time) in headless Chromium and checks the DOM the browser built: one
// chart per strategy, each with the gateway's counts. Skipped with a message
// where Chromium is absent; required under CI=true.
func TestReportInBrowser(t *testing.T) {
	chromium := browser.Require(t)
	results := runForReport(t)
	path := filepath.Join(t.TempDir(), "lab.html")
	if err := WriteReportFile(path, "stagger lab — browser test", results, ReportOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dom, err := browser.DumpDOM(ctx, chromium, path)
	if err != nil {
		t.Fatal(err)
	}
	checkReportMarkup(t, dom, results)
	if !strings.Contains(dom, "stagger lab — what the gateway received") {
		t.Error("title missing from the rendered page")
	}
}

// PerChartAxes: each chart's Y axis reaches its own peak (so the small one
// is readable), the X axes stay shared, and the page says which it uses.
func TestReportPerChartAxes(t *testing.T) {
	var results []*Result
	synctest.Test(t, func(t *testing.T) {
		s := inMemory(FourCallerOutage())
		s.Callers = 20
		for _, name := range []string{"immediate", "expo-full+bulkhead"} {
			results = append(results, mustRun(t, s, mustStrategy(t, name, StrategyOptions{})))
		}
	})
	if results[0].Gateway.Peak < 4*results[1].Gateway.Peak {
		t.Fatalf("peaks %d and %d: the test needs one far above the other", results[0].Gateway.Peak, results[1].Gateway.Peak)
	}
	topTick := func(c string) int {
		ticks := regexp.MustCompile(`class="tick" text-anchor="end"[^>]*>([\d,]+)<`).FindAllStringSubmatch(yAxisRE.FindString(c), -1)
		n, _ := strconv.Atoi(strings.ReplaceAll(ticks[len(ticks)-1][1], ",", ""))
		return n
	}
	for _, per := range []bool{false, true} {
		var buf bytes.Buffer
		if err := WriteReport(&buf, "", results, ReportOptions{PerChartAxes: per}); err != nil {
			t.Fatal(err)
		}
		html := buf.String()
		charts := strings.Split(html, `<svg class="chart"`)[1:]
		big, small := topTick(charts[0]), topTick(charts[1])
		xTicks := func(c string) string {
			return fmt.Sprint(regexp.MustCompile(`class="tick"[^>]*>([^<]*)<`).FindAllStringSubmatch(xAxisRE.FindString(c), -1))
		}
		if xTicks(charts[0]) != xTicks(charts[1]) {
			t.Errorf("per-chart %v: the X axes differ", per)
		}
		switch {
		case !per && (big != small || !strings.Contains(html, "All charts share their axes")):
			t.Errorf("shared: top ticks %d and %d, or the note is missing", big, small)
		case per && (small >= big || small > 2*results[1].Gateway.Peak || !strings.Contains(html, "Each chart has its own Y axis")):
			t.Errorf("per-chart: top ticks %d and %d (peaks %d, %d), or the note is missing", big, small, results[0].Gateway.Peak, results[1].Gateway.Peak)
		}
	}
}

func TestRoundUp(t *testing.T) {
	for _, c := range [][2]float64{{0, 0}, {1, 1}, {7, 8}, {9, 10}, {18, 20}, {233, 250}, {244, 250}, {251, 300}, {137, 150}, {1000, 1000}} {
		if got := roundUp(c[0]); got != c[1] {
			t.Errorf("roundUp(%v) = %v, want %v", c[0], got, c[1])
		}
	}
}
