package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/report/browser"
)

// renderedChart is what a browser made of one chart of a report.
type renderedChart struct {
	title  string
	kind   string
	series []string
	lines  int
	shades int
}

var (
	tagRe  = regexp.MustCompile(`<(svg|g|polyline|rect)\b[^>]*>`)
	attrRe = regexp.MustCompile(`([a-z-]+)="([^"]*)"`)
)

// chartsInDOM collects the charts of a DOM serialized by Chromium, using
// the report's stable hooks (svg.chart, g.series, polyline.line, rect.shade).
func chartsInDOM(dom string) []renderedChart {
	var out []renderedChart
	for _, tag := range tagRe.FindAllStringSubmatch(dom, -1) {
		attrs := map[string]string{}
		for _, a := range attrRe.FindAllStringSubmatch(tag[0], -1) {
			attrs[a[1]] = a[2]
		}
		classes := strings.Fields(attrs["class"])
		switch {
		case tag[1] == "svg" && slices.Contains(classes, "chart"):
			out = append(out, renderedChart{title: attrs["data-title"], kind: attrs["data-kind"]})
		case len(out) == 0:
		case tag[1] == "g" && slices.Contains(classes, "series"):
			out[len(out)-1].series = append(out[len(out)-1].series, attrs["data-name"])
		case tag[1] == "polyline" && slices.Contains(classes, "line"):
			out[len(out)-1].lines++
		case tag[1] == "rect" && slices.Contains(classes, "shade"):
			out[len(out)-1].shades++
		}
	}
	return out
}

// TestSimReportInBrowser renders two scenario reports in a real headless
// Chromium and checks the charts it drew: calls vs N with one line per
// backoff strategy for brooker2015, goodput over time with the spike
// shaded for collapse.
func TestSimReportInBrowser(t *testing.T) {
	chromium := browser.Require(t)
	dir := t.TempDir()
	cases := []struct {
		args   []string
		charts map[string]renderedChart
	}{
		{
			[]string{"brooker2015", "--n-to", "40", "--runs", "3"},
			map[string]renderedChart{
				"calls vs clients":           {kind: "lines", series: []string{"none", "expo", "full", "equal", "decorrelated"}, lines: 5},
				"completion time vs clients": {kind: "lines", series: []string{"none", "expo", "full", "equal", "decorrelated"}, lines: 5},
			},
		},
		{
			[]string{"collapse", "--runs", "2"},
			map[string]renderedChart{
				"goodput per second (mean of runs)":               {kind: "lines", series: []string{"no-backoff", "full-jitter", "budget"}, lines: 3, shades: 1},
				"attempts in flight at the server (mean of runs)": {kind: "lines", series: []string{"no-backoff", "full-jitter", "budget"}, lines: 3, shades: 1},
			},
		},
	}
	for _, c := range cases {
		path := filepath.Join(dir, c.args[0]+".html")
		code, out, errs := runCLI(t, append([]string{"sim"}, append(c.args, "--quiet", "--report", path)...)...)
		if code != exitOK || out == "" {
			t.Fatalf("%v: exit %d: %s", c.args, code, errs)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		dom, err := browser.DumpDOM(ctx, chromium, path)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", c.args[0], err)
		}
		got := chartsInDOM(dom)
		if len(got) != len(c.charts) {
			t.Fatalf("%s: %d charts rendered, want %d: %+v", c.args[0], len(got), len(c.charts), got)
		}
		for _, g := range got {
			want, ok := c.charts[g.title]
			if !ok {
				t.Errorf("%s: unexpected chart %q", c.args[0], g.title)
				continue
			}
			if g.kind != want.kind || !slices.Equal(g.series, want.series) || g.lines != want.lines || g.shades != want.shades {
				t.Errorf("%s: chart %q rendered as %+v, want %+v", c.args[0], g.title, g, want)
			}
		}
		if !strings.Contains(dom, `<table class="summary">`) || !strings.Contains(dom, "<h1>stagger sim "+c.args[0]+"</h1>") {
			t.Errorf("%s: the page lacks its title or summary table", c.args[0])
		}
	}
}

// TestSimReportTable: the report's table holds the printed rows.
func TestSimReportTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "layers.html")
	code, out, errs := runCLI(t, "sim", "layers", "--clicks", "10", "--quiet", "--report", path)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	html, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, cell := range []string{"27.000", "243.000", "adapter only"} {
		if !strings.Contains(out, cell) || !strings.Contains(string(html), cell) {
			t.Errorf("cell %q missing from stdout or report", cell)
		}
	}
}

// TestSimBudgetsReportInBrowser: the budgets report's lines, several of
// which lie on top of each other, each get a colour and a dash pattern of
// their own and their name at the line's end, in the DOM Chromium built.
func TestSimBudgetsReportInBrowser(t *testing.T) {
	chromium := browser.Require(t)
	path := filepath.Join(t.TempDir(), "budgets.html")
	code, _, errs := runCLI(t, "sim", "budgets", "--clients", "10", "--duration", "2s", "--steps", "4", "--quiet", "--report", path)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dom, err := browser.DumpDOM(ctx, chromium, path)
	if err != nil {
		t.Fatal(err)
	}
	charts := strings.Split(dom, `<svg class="chart"`)[1:]
	if len(charts) == 0 {
		t.Fatal("no chart rendered")
	}
	lineRE := regexp.MustCompile(`<g class="series" data-name="([^"]*)"[^>]*>\s*<polyline class="line" stroke="(#[0-9A-Fa-f]{6})"(?: stroke-dasharray="([^"]*)")?`)
	endRE := regexp.MustCompile(`<g class="end-label" data-name="([^"]*)">`)
	for i, c := range charts {
		c, _, _ = strings.Cut(c, "</svg>")
		lines := lineRE.FindAllStringSubmatch(c, -1)
		if len(lines) < 5 {
			t.Fatalf("chart %d: %d lines, want the budgets' strategies", i, len(lines))
		}
		colors, dash := map[string]string{}, map[string]string{}
		for _, l := range lines {
			// Eight colours: past them a colour repeats, never a pattern.
			if o, dup := colors[l[2]]; dup && len(lines) <= 8 {
				t.Errorf("chart %d: %s and %s share colour %s", i, l[1], o, l[2])
			}
			if o, dup := dash[l[3]]; dup {
				t.Errorf("chart %d: %s and %s share dash pattern %q", i, l[1], o, l[3])
			}
			colors[l[2]], dash[l[3]] = l[1], l[1]
		}
		var ends []string
		for _, e := range endRE.FindAllStringSubmatch(c, -1) {
			ends = append(ends, e[1])
		}
		for _, l := range lines {
			if !slices.Contains(ends, l[1]) {
				t.Errorf("chart %d: %s has no label at its end (end labels %v)", i, l[1], ends)
			}
		}
	}
}
