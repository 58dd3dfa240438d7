package report_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/staggerhq/stagger/internal/report"
	"github.com/staggerhq/stagger/internal/report/browser"
)

// domChart is what the browser test reads back about one chart.
type domChart struct {
	title  string
	kind   string
	series []string
	bars   int
	lines  int
	shades int
	marks  int
}

// parseCharts walks an HTML DOM serialized by Chromium (HTML syntax, read
// leniently by encoding/xml) and collects the svg.chart elements.
func parseCharts(t *testing.T, dom string) []domChart {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(dom))
	d.Strict = false
	d.AutoClose = xml.HTMLAutoClose
	d.Entity = xml.HTMLEntity
	var charts []domChart
	depth, chartDepth := 0, -1
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("parse DOM: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			depth++
			attr := func(name string) string {
				for _, a := range e.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			classes := strings.Fields(attr("class"))
			has := func(c string) bool {
				for _, x := range classes {
					if x == c {
						return true
					}
				}
				return false
			}
			switch {
			case e.Name.Local == "svg" && has("chart"):
				charts = append(charts, domChart{title: attr("data-title"), kind: attr("data-kind")})
				chartDepth = depth
			case chartDepth < 0:
			case e.Name.Local == "g" && has("series"):
				charts[len(charts)-1].series = append(charts[len(charts)-1].series, attr("data-name"))
			case e.Name.Local == "rect" && has("bar"):
				charts[len(charts)-1].bars++
			case e.Name.Local == "polyline" && has("line"):
				charts[len(charts)-1].lines++
			case e.Name.Local == "rect" && has("shade"):
				charts[len(charts)-1].shades++
			case e.Name.Local == "g" && has("mark"):
				charts[len(charts)-1].marks++
			}
		case xml.EndElement:
			if depth == chartDepth {
				chartDepth = -1
			}
			depth--
		}
	}
	return charts
}

func browserContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestBrowserRendersCharts(t *testing.T) {
	chromium := browser.Require(t)
	path := filepath.Join(t.TempDir(), "report.html")
	page := samplePage()
	if err := report.WriteFile(path, page); err != nil {
		t.Fatal(err)
	}
	dom, err := browser.DumpDOM(browserContext(t), chromium, path)
	if err != nil {
		t.Fatal(err)
	}
	charts := parseCharts(t, dom)
	if len(charts) != 3 {
		t.Fatalf("rendered DOM has %d svg.chart elements, want 3", len(charts))
	}
	want := []domChart{
		{title: "Retry immediately", kind: "bars", series: []string{"accepted", "rejected"}, bars: 20, shades: 1, marks: 1},
		{title: "Exponential + full jitter", kind: "bars", series: []string{"accepted", "rejected"}, bars: 20, shades: 1, marks: 1},
		{title: "Calls vs N (simulated)", kind: "lines", series: []string{"retry immediately", "exponential + full jitter", "decorrelated jitter"}, lines: 3},
	}
	for i, w := range want {
		g := charts[i]
		if g.title != w.title || g.kind != w.kind || strings.Join(g.series, "|") != strings.Join(w.series, "|") ||
			g.bars != w.bars || g.lines != w.lines || g.shades != w.shades || g.marks != w.marks {
			t.Errorf("chart %d in the browser DOM = %+v, want %+v", i, g, w)
		}
	}
	// The page title, with <, & and quotes, survives the browser's parser
	// as text: nothing became markup.
	if !strings.Contains(dom, "<h1>Retry lab: \"immediate\" vs &lt;jitter&gt; &amp; friends</h1>") {
		t.Errorf("escaped title not found as text in the DOM")
	}
	if strings.Contains(dom, "<jitter>") {
		t.Errorf("title text was parsed as a <jitter> element")
	}
}

func TestBrowserScreenshot(t *testing.T) {
	chromium := browser.Require(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "report.html")
	if err := report.WriteFile(path, samplePage()); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "report.png")
	const w, h = 1366, 1400
	if err := browser.Screenshot(browserContext(t), chromium, path, shot, w, h); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	if keep := os.Getenv("STAGGER_REPORT_SCREENSHOT"); keep != "" {
		// For looking at the result: STAGGER_REPORT_SCREENSHOT=/tmp/x.png
		if err := os.WriteFile(keep, data, 0o644); err != nil {
			t.Fatal(err)
		}
		html, _ := os.ReadFile(path)
		_ = os.WriteFile(strings.TrimSuffix(keep, ".png")+".html", html, 0o644)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), w, h)
	}
	colors, blue, orange := countColors(img)
	if colors < 20 {
		t.Errorf("screenshot has %d distinct colours: the page did not render", colors)
	}
	// The bars are drawn in the palette's first two colours (accepted,
	// rejected): solid areas of exactly those colours must be on screen.
	if blue < 200 || orange < 200 {
		t.Errorf("screenshot has %d px of the accepted blue and %d px of the rejected orange, want >= 200 each", blue, orange)
	}
}

func countColors(img image.Image) (distinct, blue, orange int) {
	seen := map[[3]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			c := [3]uint32{r >> 8, g >> 8, bl >> 8}
			seen[c] = true
			switch c {
			case [3]uint32{0x00, 0x72, 0xB2}:
				blue++
			case [3]uint32{0xE6, 0x9F, 0x00}:
				orange++
			}
		}
	}
	return len(seen), blue, orange
}
