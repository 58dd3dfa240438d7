package report_test

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/internal/report"
	"github.com/staggerhq/stagger/internal/report/browser"
)

var (
	barRE      = regexp.MustCompile(`<rect class="bar" data-x="[^"]*" data-y="[^"]*" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)"`)
	markTextRE = regexp.MustCompile(`<g class="mark" data-label="[^"]*"><circle r="[\d.]+" cx="([\d.]+)" cy="([\d.]+)"/>(?:<line class="leader"[^>]*/>)?<text class="halo" text-anchor="\w+" x="([\d.]+)" y="([\d.]+)">`)
	clipRE     = regexp.MustCompile(`<clipPath id="[^"]*"><rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"`)
	endNameRE  = regexp.MustCompile(`<g class="end-label" data-name="([^"]*)"><polyline class="leader" stroke="(#[0-9A-F]{6})"[^>]*/><text class="halo end-name" style="fill:(#[0-9A-F]{6})" x="([\d.]+)" y="([\d.]+)">`)
	dashRE     = regexp.MustCompile(`<g class="series" data-name="([^"]*)"[^>]*>\n<polyline class="line" stroke="#[0-9A-F]{6}"(?: stroke-dasharray="([^"]*)")?`)
)

func num(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A bar chart's mark label sits above every bar, even when the mark is at
// the top of a given YMax and its neighbours are as tall (the label used to
// flip down into the bars).
func TestBarMarkLabelClearsBars(t *testing.T) {
	var pts []report.Point
	for i := range 20 {
		pts = append(pts, report.Point{X: float64(i * 200), Y: 240 - float64(i%3)})
	}
	for _, mx := range []float64{0, 1800, 3800} { // left edge, middle, right edge
		c := report.Chart{Kind: report.Bars, BarWidth: 200, YMax: 240,
			Series: []report.Series{{Name: "rejected", Points: pts}},
			Shades: []report.Shade{{From: 0, To: 2000, Label: "gateway down"}},
			Marks:  []report.Mark{{X: mx, Y: 240, Label: "peak 240 in [1800, 2000) ms, a long label"}}}
		svg := chartsOf(render(t, report.Page{Sections: []report.Section{{Charts: []report.Chart{c}}}}))[0]
		m := markTextRE.FindStringSubmatch(svg)
		if m == nil {
			t.Fatalf("mark %v: no mark label:\n%s", mx, svg)
		}
		clip := clipRE.FindStringSubmatch(svg)
		plotTop, plotLeft, plotRight := num(t, clip[2]), num(t, clip[1]), num(t, clip[1])+num(t, clip[3])
		labelY := num(t, m[4])
		if labelY+3 > plotTop {
			t.Errorf("mark %v: label baseline %v is not above the plot (top %v)", mx, labelY, plotTop)
		}
		if cy := num(t, m[2]); cy < plotTop-0.5 || labelY+3 > cy-3.5 {
			t.Errorf("mark %v: dot at y %v, label at %v: the label must sit above the dot", mx, cy, labelY)
		}
		top := plotTop + 1000
		for _, b := range barRE.FindAllStringSubmatch(svg, -1) {
			top = min(top, num(t, b[2]))
		}
		if labelY+3 > top {
			t.Errorf("mark %v: label at %v reaches the bars (top %v)", mx, labelY, top)
		}
		if x := num(t, m[3]); x < plotLeft-5 || x > plotRight+5 {
			t.Errorf("mark %v: label anchored at x %v outside the plot [%v, %v]", mx, x, plotLeft, plotRight)
		}
	}
}

// EndLabels names each line at its end in its colour, and lines that end
// at the same value get labels spread apart inside the plot.
func TestEndLabels(t *testing.T) {
	var series []report.Series
	for _, n := range []string{"no-retries", "token-bucket", "credits", "breaker", "3-retries"} {
		y := 1.0
		if n == "3-retries" {
			y = 4
		}
		series = append(series, report.Series{Name: n, Points: []report.Point{{X: 0, Y: 1}, {X: 1, Y: y}}})
	}
	c := report.Chart{Kind: report.Lines, EndLabels: true, Dashed: true, Series: series}
	svg := chartsOf(render(t, report.Page{Sections: []report.Section{{Charts: []report.Chart{c}}}}))[0]
	labels := endNameRE.FindAllStringSubmatch(svg, -1)
	if len(labels) != len(series) {
		t.Fatalf("%d end labels, want %d:\n%s", len(labels), len(series), svg)
	}
	clip := clipRE.FindStringSubmatch(svg)
	top, right := num(t, clip[2]), num(t, clip[1])+num(t, clip[3])
	bottom := top + num(t, clip[4])
	var ys []float64
	for _, l := range labels {
		if l[2] != l[3] {
			t.Errorf("%s: label colour %s, line colour %s", l[1], l[3], l[2])
		}
		if x := num(t, l[4]); x < right {
			t.Errorf("%s: label at x %v is inside the plot (right edge %v)", l[1], x, right)
		}
		y := num(t, l[5])
		if y < top || y > bottom+5 {
			t.Errorf("%s: label at y %v outside the plot [%v, %v]", l[1], y, top, bottom)
		}
		ys = append(ys, y)
	}
	slices.Sort(ys)
	for i := 1; i < len(ys); i++ {
		if ys[i]-ys[i-1] < 13.9 {
			t.Errorf("end labels %v and %v overlap", ys[i-1], ys[i])
		}
	}
	// Dashed: a pattern of its own per series.
	seen := map[string]string{}
	for _, d := range dashRE.FindAllStringSubmatch(svg, -1) {
		if other, dup := seen[d[2]]; dup {
			t.Errorf("%s and %s share the dash pattern %q", d[1], other, d[2])
		}
		seen[d[2]] = d[1]
	}
	if len(seen) != len(series) {
		t.Errorf("%d dash patterns, want %d", len(seen), len(series))
	}
}

// A Color is kept wherever the series appears and is not taken by a name
// without one; bad and duplicate colours are errors.
func TestExplicitColors(t *testing.T) {
	pt := []report.Point{{X: 0, Y: 1}}
	p := report.Page{Sections: []report.Section{{Charts: []report.Chart{
		{Kind: report.Bars, Series: []report.Series{{Name: "a", Points: pt}, {Name: "down", Points: pt, Color: report.Blue}}},
		{Kind: report.Bars, Series: []report.Series{{Name: "down", Points: pt, Color: report.Blue}, {Name: "b", Points: pt}}},
	}}}}
	svgs := chartsOf(render(t, p))
	colors := map[string]string{}
	for _, svg := range svgs {
		for _, f := range fillRE.FindAllStringSubmatch(svg, -1) {
			colors[f[1]] = f[2]
		}
	}
	if colors["down"] != "#0072B2" || colors["a"] == "#0072B2" || colors["b"] == "#0072B2" || colors["a"] == colors["b"] {
		t.Errorf("colours %v: want down blue and a, b other distinct colours", colors)
	}
	for _, bad := range []report.Series{{Name: "x", Color: 42}, {Name: "y", Color: report.Blue}} {
		c := report.Chart{Kind: report.Bars, Series: []report.Series{{Name: "z", Color: report.Blue}, bad}}
		err := report.Write(&bytes.Buffer{}, report.Page{Sections: []report.Section{{Charts: []report.Chart{c}}}})
		if err == nil || !strings.Contains(err.Error(), "Color") {
			t.Errorf("series %+v: error %v, want one naming Color", bad, err)
		}
	}
}

// A Wide chart spans the page: in Chromium its bars reach past the middle
// of a 1400 px window, where a normal chart ends.
func TestBrowserWideChart(t *testing.T) {
	var pts []report.Point
	for i := range 50 {
		pts = append(pts, report.Point{X: float64(i * 200), Y: 5})
	}
	p := report.Page{Sections: []report.Section{{Charts: []report.Chart{{
		Title: "wide", Kind: report.Bars, Wide: true, BarWidth: 200,
		Series: []report.Series{{Name: "accepted", Points: pts, Color: report.Blue}},
	}}}}}
	html := render(t, p)
	if !strings.Contains(html, `<figure class="figure wide">`) || !strings.Contains(html, `<svg class="chart wide"`) || !strings.Contains(html, `width="1296"`) {
		t.Fatalf("wide markup missing")
	}
	chromium := browser.Require(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "wide.html")
	if err := report.WriteFile(path, p); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "wide.png")
	if err := browser.Screenshot(browserContext(t), chromium, path, shot, 1400, 700); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	maxX := -1
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if r, g, bl, _ := img.At(x, y).RGBA(); r>>8 == 0x00 && g>>8 == 0x72 && bl>>8 == 0xB2 {
				maxX = max(maxX, x)
			}
		}
	}
	if maxX < 1200 {
		t.Errorf("the wide chart's bars end at x=%d of 1400, want past 1200", maxX)
	}
}
