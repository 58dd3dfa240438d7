package report_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/internal/report"
)

func render(t *testing.T, p report.Page) string {
	t.Helper()
	var b bytes.Buffer
	if err := report.Write(&b, p); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return b.String()
}

// chartsOf splits the document into the markup of each svg.chart.
func chartsOf(doc string) []string {
	parts := strings.Split(doc, `<svg class="chart"`)[1:]
	for i, p := range parts {
		parts[i], _, _ = strings.Cut(p, "</svg>")
	}
	return parts
}

var (
	axisRE = map[string]*regexp.Regexp{
		"x": regexp.MustCompile(`<g class="axis x">(.*?)</g>`),
		"y": regexp.MustCompile(`<g class="axis y">(.*?)</g>`),
	}
	tickRE = regexp.MustCompile(`<text class="tick"[^>]*>([^<]*)</text>`)
	fillRE = regexp.MustCompile(`<g class="series" data-name="([^"]*)" data-points="\d+" fill="(#[0-9A-F]{6})"`)
)

// tickLabels returns the tick labels of one axis ("x" or "y") of a chart.
func tickLabels(svg, which string) []string {
	m := axisRE[which].FindStringSubmatch(svg)
	if m == nil {
		return nil
	}
	var out []string
	for _, t := range tickRE.FindAllStringSubmatch(m[1], -1) {
		out = append(out, t[1])
	}
	return out
}

func TestWriteStructure(t *testing.T) {
	doc := render(t, samplePage())
	charts := parseCharts(t, doc)
	if len(charts) != 3 {
		t.Fatalf("%d charts, want 3", len(charts))
	}
	for i, want := range []struct {
		title, kind string
		series      int
		bars, lines int
		shades      int
		marks       int
	}{
		{"Retry immediately", "bars", 2, 20, 0, 1, 1},
		{"Exponential + full jitter", "bars", 2, 20, 0, 1, 1},
		{"Calls vs N (simulated)", "lines", 3, 0, 3, 0, 0},
	} {
		c := charts[i]
		if c.title != want.title || c.kind != want.kind || len(c.series) != want.series || c.bars != want.bars ||
			c.lines != want.lines || c.shades != want.shades || c.marks != want.marks {
			t.Errorf("chart %d = %+v, want %+v", i, c, want)
		}
	}
	for _, hook := range []string{
		`<table class="summary">`, `<g class="legend-item" data-name="accepted">`,
		`<rect class="shade" data-label="gateway down"`, `<g class="mark" data-label="peak 18">`,
		`<rect class="bar" data-x="200" data-y="18"`, `<section class="section" id="section-2">`,
	} {
		if !strings.Contains(doc, hook) {
			t.Errorf("markup lacks %s", hook)
		}
	}
	if n := strings.Count(doc, `<table class="summary">`); n != 1 {
		t.Errorf("%d summary tables, want 1 (only the first section has a Table)", n)
	}
}

func TestSelfContained(t *testing.T) {
	doc := render(t, samplePage())
	for _, bad := range []string{"<script", "<link", "<img", "@import", "url(http", "src=", "http://", "https://"} {
		// The SVG namespace URI is an identifier, not a fetch.
		d := strings.ReplaceAll(doc, `xmlns="http://www.w3.org/2000/svg"`, "")
		if strings.Contains(d, bad) {
			t.Errorf("document contains %q: it must be self-contained", bad)
		}
	}
	if !strings.HasPrefix(doc, "<!DOCTYPE html>") || !strings.HasSuffix(doc, "</html>\n") {
		t.Errorf("document is not one complete HTML page")
	}
	if !strings.Contains(doc, `content="default-src 'none'; style-src 'unsafe-inline'"`) {
		t.Errorf("no Content-Security-Policy forbidding scripts and fetches")
	}
}

func TestDeterministic(t *testing.T) {
	a, b := render(t, samplePage()), render(t, samplePage())
	if a != b {
		t.Fatal("two renders of the same page differ")
	}
}

func TestEscaping(t *testing.T) {
	evil := `<script>alert("x&y")</script> 'q'`
	p := report.Page{
		Title: evil, Subtitle: evil, Notes: []string{evil},
		Sections: []report.Section{{
			Title: evil, Notes: []string{evil},
			Table: &report.Table{Columns: []string{evil}, Rows: [][]string{{evil}}},
			Charts: []report.Chart{{
				Title: evil, XLabel: evil, YLabel: evil, Kind: report.Bars,
				Series: []report.Series{{Name: evil, Points: []report.Point{{X: 1, Y: 2}}}},
				Shades: []report.Shade{{From: 0, To: 1, Label: evil}},
				Marks:  []report.Mark{{X: 1, Y: 2, Label: evil}},
			}},
		}, {Title: "second"}},
	}
	doc := render(t, p)
	if strings.Contains(doc, "<script") || strings.Contains(doc, `"x&y"`) || strings.Contains(doc, "'q'") {
		t.Fatalf("unescaped text in the document")
	}
	esc := `&lt;script&gt;alert(&#34;x&amp;y&#34;)&lt;/script&gt; &#39;q&#39;`
	// title, h1, subtitle, page note, toc, h2, section note, th, td,
	// figcaption, svg title, data-title, 2 axis labels, legend data-name and
	// text, series data-name, shade data-label and text, mark data-label and
	// text.
	if n, want := strings.Count(doc, esc), 21; n != want {
		t.Errorf("escaped text appears %d times, want %d", n, want)
	}
	c := parseCharts(t, doc)
	if len(c) != 1 || c[0].title != evil || len(c[0].series) != 1 || c[0].series[0] != evil {
		t.Errorf("attributes do not round-trip through an HTML parser: %+v", c)
	}
}

func TestSharedAxes(t *testing.T) {
	a := report.Chart{Title: "a", Kind: report.Bars, XMin: 0, XMax: 12000, YMax: 20, BarWidth: 200,
		Series: []report.Series{{Name: "accepted", Points: []report.Point{{X: 0, Y: 3}, {X: 200, Y: 18}}}}}
	b := report.Chart{Title: "b", Kind: report.Bars, XMin: 0, XMax: 12000, YMax: 20, BarWidth: 200,
		Series: []report.Series{{Name: "accepted", Points: []report.Point{{X: 4000, Y: 1}, {X: 11800, Y: 2}}}}}
	svgs := chartsOf(render(t, report.Page{Sections: []report.Section{{Charts: []report.Chart{a, b}}}}))
	for _, ax := range []string{"x", "y"} {
		la, lb := tickLabels(svgs[0], ax), tickLabels(svgs[1], ax)
		if len(la) < 3 || strings.Join(la, "|") != strings.Join(lb, "|") {
			t.Errorf("%s ticks of charts sharing an axis differ: %q vs %q", ax, la, lb)
		}
	}
	if got, want := strings.Join(tickLabels(svgs[0], "y"), " "), "0 5 10 15 20"; got != want {
		t.Errorf("y ticks = %q, want %q", got, want)
	}
	if got := tickLabels(svgs[0], "x"); got[0] != "0" || got[len(got)-1] != "12k" {
		t.Errorf("x ticks = %q, want 0 … 12k", got)
	}
	// The same data on automatic axes gives different axes: the shared
	// result above is not an accident.
	a.XMin, a.XMax, a.YMax = 0, 0, 0
	b.XMin, b.XMax, b.YMax = 0, 0, 0
	svgs = chartsOf(render(t, report.Page{Sections: []report.Section{{Charts: []report.Chart{a, b}}}}))
	if strings.Join(tickLabels(svgs[0], "x"), "|") == strings.Join(tickLabels(svgs[1], "x"), "|") {
		t.Errorf("auto X axes of different data are identical")
	}
}

func TestAutoYAxisIsRound(t *testing.T) {
	c := report.Chart{Title: "c", Kind: report.Bars, BarWidth: 1,
		Series: []report.Series{
			{Name: "accepted", Points: []report.Point{{X: 0, Y: 1}, {X: 1, Y: 1}}},
			{Name: "rejected", Points: []report.Point{{X: 0, Y: 17}, {X: 1, Y: 3}}},
		}}
	svg := chartsOf(render(t, report.Page{Sections: []report.Section{{Charts: []report.Chart{c}}}}))[0]
	// The stack at X=0 is 18 high: the axis ends at the next round tick.
	if got, want := strings.Join(tickLabels(svg, "y"), " "), "0 5 10 15 20"; got != want {
		t.Errorf("y ticks = %q, want %q", got, want)
	}
}

func TestColorsFollowNamesAcrossCharts(t *testing.T) {
	ar := []report.Series{{Name: "accepted", Points: []report.Point{{X: 0, Y: 1}}}, {Name: "rejected", Points: []report.Point{{X: 0, Y: 1}}}}
	ra := []report.Series{ar[1], ar[0]} // other order
	only := []report.Series{ar[1]}
	var strategies []report.Series
	for i := range 10 {
		strategies = append(strategies, report.Series{Name: fmt.Sprint("s", i), Points: []report.Point{{X: 0, Y: 1}}})
	}
	p := report.Page{Sections: []report.Section{{Charts: []report.Chart{
		{Title: "1", Kind: report.Bars, Series: ar},
		{Title: "2", Kind: report.Bars, Series: ra},
		{Title: "3", Kind: report.Bars, Series: only},
		{Title: "4", Kind: report.Bars, Series: strategies},
	}}}}
	svgs := chartsOf(render(t, p))
	color := func(svg string) map[string]string {
		m := map[string]string{}
		for _, f := range fillRE.FindAllStringSubmatch(svg, -1) {
			m[f[1]] = f[2]
		}
		return m
	}
	c1, c2, c3, c4 := color(svgs[0]), color(svgs[1]), color(svgs[2]), color(svgs[3])
	if c1["accepted"] == c1["rejected"] {
		t.Errorf("accepted and rejected share colour %s", c1["accepted"])
	}
	if c1["accepted"] != c2["accepted"] || c1["rejected"] != c2["rejected"] || c1["rejected"] != c3["rejected"] {
		t.Errorf("colours of a name differ between charts: %v %v %v", c1, c2, c3)
	}
	// Ten strategies in one chart: the eight colours, then variants; the
	// first six avoid the colours accepted/rejected hold on the page.
	for _, name := range []string{"s0", "s1", "s2", "s3", "s4", "s5"} {
		if c4[name] == c1["accepted"] || c4[name] == c1["rejected"] {
			t.Errorf("%s reuses a colour held by accepted/rejected while others are free", name)
		}
	}
	if !strings.Contains(svgs[3], `fill-opacity="0.45"`) {
		t.Errorf("series beyond the palette are not drawn as a variant")
	}
}

func TestEmptySeriesRenderNoData(t *testing.T) {
	p := report.Page{Sections: []report.Section{{Charts: []report.Chart{
		{Title: "empty bars", Kind: report.Bars, Series: []report.Series{{Name: "accepted"}}},
		{Title: "no series", Kind: report.Lines},
		{Title: "fixed range", Kind: report.Lines, XMin: 0, XMax: 60, YMax: 100, Series: []report.Series{{Name: "x"}}},
		{Title: "one empty of two", Kind: report.Lines, Series: []report.Series{{Name: "a", Points: []report.Point{{X: 1, Y: 1}}}, {Name: "b"}}},
	}}}}
	svgs := chartsOf(render(t, p))
	for i, svg := range svgs[:3] {
		if !strings.Contains(svg, `<text class="nodata"`) {
			t.Errorf("chart %d without points has no \"no data\" note", i)
		}
		if len(tickLabels(svg, "x")) < 2 || len(tickLabels(svg, "y")) < 2 {
			t.Errorf("chart %d without points has no axes", i)
		}
	}
	if got := strings.Join(tickLabels(svgs[2], "y"), " "); got != "0 20 40 60 80 100" {
		t.Errorf("fixed range without data: y ticks %q", got)
	}
	if strings.Contains(svgs[3], "nodata") || !strings.Contains(svgs[3], "b (no data)") {
		t.Errorf("a chart with one empty series should say so in the legend only")
	}
}

func TestLinesDownsampledAndBounded(t *testing.T) {
	c := bigLines(5, 10000)
	doc := render(t, report.Page{Sections: []report.Section{{Charts: []report.Chart{c}}}})
	polys := regexp.MustCompile(`<polyline class="line"[^>]* points="([^"]*)"`).FindAllStringSubmatch(doc, -1)
	if len(polys) != 5 {
		t.Fatalf("%d polylines, want 5", len(polys))
	}
	for _, p := range polys {
		if n := len(strings.Fields(p[1])); n > report.MaxLinePoints || n < report.MaxLinePoints/2 {
			t.Errorf("polyline has %d points, want %d/2..%d", n, report.MaxLinePoints, report.MaxLinePoints)
		}
	}
	if !strings.Contains(doc, `data-points="10000"`) {
		t.Errorf("series do not report the number of points supplied")
	}
	if len(doc) > 400<<10 {
		t.Errorf("5 × 10,000 points rendered to %d bytes, want < 400 KiB", len(doc))
	}
}

func TestLinesSortedByX(t *testing.T) {
	c := report.Chart{Title: "u", Kind: report.Lines, XMin: 0, XMax: 3, YMax: 10,
		Series: []report.Series{{Name: "u", Points: []report.Point{{X: 3, Y: 1}, {X: 0, Y: 2}, {X: 1, Y: 3}}}}}
	svg := chartsOf(render(t, report.Page{Sections: []report.Section{{Charts: []report.Chart{c}}}}))[0]
	m := regexp.MustCompile(`points="([^"]*)"`).FindStringSubmatch(svg)
	var last float64 = math.Inf(-1)
	for _, xy := range strings.Fields(m[1]) {
		var x, y float64
		fmt.Sscanf(xy, "%g,%g", &x, &y)
		if x <= last {
			t.Fatalf("polyline points not in X order: %s", m[1])
		}
		last = x
	}
}

func TestMarkOnBarIsCentred(t *testing.T) {
	c := report.Chart{Title: "m", Kind: report.Bars, XMin: 0, XMax: 1000, YMax: 20, BarWidth: 200,
		Series: []report.Series{{Name: "n", Points: []report.Point{{X: 200, Y: 18}}}},
		Marks:  []report.Mark{{X: 200, Y: 18, Label: "peak 18"}}}
	svg := chartsOf(render(t, report.Page{Sections: []report.Section{{Charts: []report.Chart{c}}}}))[0]
	var bx, bw, cx float64
	b := regexp.MustCompile(`<rect class="bar"[^>]* x="([\d.]+)"[^>]* width="([\d.]+)"`).FindStringSubmatch(svg)
	m := regexp.MustCompile(`<g class="mark"[^>]*><circle r="[\d.]+" cx="([\d.]+)"`).FindStringSubmatch(svg)
	if b == nil || m == nil {
		t.Fatalf("bar or mark missing:\n%s", svg)
	}
	fmt.Sscan(b[1], &bx)
	fmt.Sscan(b[2], &bw)
	fmt.Sscan(m[1], &cx)
	if math.Abs(bx+bw/2-cx) > 0.2 {
		t.Errorf("mark at x=%v, bar centre at %v", cx, bx+bw/2)
	}
}

func TestValidation(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	ok := func() report.Chart {
		return report.Chart{Title: "retry <now>", Kind: report.Bars,
			Series: []report.Series{{Name: "accepted", Points: []report.Point{{X: 0, Y: 1}, {X: 200, Y: 2}}}}}
	}
	cases := []struct {
		name  string
		edit  func(*report.Chart)
		table *report.Table
		want  []string // all must appear in the error
	}{
		{"NaN Y", func(c *report.Chart) { c.Series[0].Points[1].Y = nan }, nil, []string{`chart 1 "retry <now>"`, `series "accepted"`, "Points[1].Y is NaN"}},
		{"Inf X", func(c *report.Chart) { c.Series[0].Points[0].X = inf }, nil, []string{`series "accepted"`, "Points[0].X is +Inf"}},
		{"-Inf Y", func(c *report.Chart) { c.Series[0].Points[0].Y = -inf }, nil, []string{"Points[0].Y is -Inf"}},
		{"NaN shade", func(c *report.Chart) { c.Shades = []report.Shade{{From: nan, To: 1, Label: "down"}} }, nil, []string{`Shades[0] "down".From is NaN`}},
		{"Inf shade To", func(c *report.Chart) { c.Shades = []report.Shade{{From: 0, To: inf}} }, nil, []string{`Shades[0] "".To is +Inf`}},
		{"shade reversed", func(c *report.Chart) { c.Shades = []report.Shade{{From: 5, To: 1, Label: "down"}} }, nil, []string{`Shades[0] "down"`, "From 5 > To 1"}},
		{"NaN mark", func(c *report.Chart) { c.Marks = []report.Mark{{X: 1, Y: nan, Label: "peak"}} }, nil, []string{`Marks[0] "peak".Y is NaN`}},
		{"negative BarWidth", func(c *report.Chart) { c.BarWidth = -200 }, nil, []string{"BarWidth is -200", ">= 0"}},
		{"NaN BarWidth", func(c *report.Chart) { c.BarWidth = nan }, nil, []string{"BarWidth is NaN"}},
		{"XMin > XMax", func(c *report.Chart) { c.XMin, c.XMax = 10, 5 }, nil, []string{"XMin 10 > XMax 5"}},
		{"Inf XMax", func(c *report.Chart) { c.XMax = inf }, nil, []string{"XMax is +Inf"}},
		{"NaN YMax", func(c *report.Chart) { c.YMax = nan }, nil, []string{"YMax is NaN"}},
		{"negative YMax", func(c *report.Chart) { c.YMax = -1 }, nil, []string{"YMax is -1"}},
		{"bad kind", func(c *report.Chart) { c.Kind = 7 }, nil, []string{"unknown Kind 7"}},
		{"duplicate series", func(c *report.Chart) { c.Series = append(c.Series, c.Series[0]) }, nil, []string{`series "accepted" appears twice`}},
		{"log on bars", func(c *report.Chart) { c.LogY = true }, nil, []string{"LogX/LogY", "Lines"}},
		{"log zero", func(c *report.Chart) { c.Kind, c.LogX = report.Lines, true }, nil, []string{`series "accepted"`, "Points[0].X is 0", "log axis"}},
		{"too many bars", func(c *report.Chart) {
			c.Series[0].Points = make([]report.Point, report.MaxBars+1)
		}, nil, []string{"20001 bars", "MaxBars"}},
		{"table row", nil, &report.Table{Columns: []string{"a", "b"}, Rows: [][]string{{"1", "2"}, {"3"}}}, []string{`section 1 "lab"`, "Table.Rows[1] has 1 cells, want 2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok()
			if tc.edit != nil {
				tc.edit(&c)
			}
			p := report.Page{Title: "t", Sections: []report.Section{{Title: "lab", Charts: []report.Chart{c}, Table: tc.table}}}
			var b bytes.Buffer
			err := report.Write(&b, p)
			if err == nil {
				t.Fatal("Write accepted bad input")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if b.Len() != 0 {
				t.Errorf("Write wrote %d bytes before failing", b.Len())
			}
		})
	}
	// And the unedited chart is fine: the cases fail for their edit.
	if err := report.Write(&bytes.Buffer{}, report.Page{Sections: []report.Section{{Charts: []report.Chart{ok()}}}}); err != nil {
		t.Fatalf("valid chart rejected: %v", err)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestWriteReportsWriterError(t *testing.T) {
	boom := errors.New("disk full")
	if err := report.Write(failWriter{boom}, samplePage()); !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want the writer's error", err)
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.html")
	if err := report.WriteFile(path, samplePage()); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := render(t, samplePage()); string(got) != want {
		t.Errorf("WriteFile wrote %d bytes that differ from Write's %d", len(got), len(want))
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	assertOnly(t, dir, "report.html")
}

func TestWriteFileFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.html")
	if err := os.WriteFile(path, []byte("previous report"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := samplePage()
	bad.Sections[0].Charts[0].Series[0].Points[3].Y = math.NaN()
	if err := report.WriteFile(path, bad); err == nil || !strings.Contains(err.Error(), "Points[3].Y is NaN") {
		t.Fatalf("WriteFile with NaN = %v", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "previous report" {
		t.Errorf("failed WriteFile changed the existing file: %q", got)
	}
	assertOnly(t, dir, "report.html")

	// A failure after the temporary file exists (the rename onto a
	// directory fails) removes it.
	target := filepath.Join(dir, "taken")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteFile(target, samplePage()); err == nil {
		t.Fatal("WriteFile onto a non-empty directory succeeded")
	}
	assertOnly(t, dir, "report.html", "taken")

	// A missing directory is an error, and creates nothing.
	if err := report.WriteFile(filepath.Join(dir, "no", "such", "report.html"), samplePage()); err == nil {
		t.Fatal("WriteFile into a missing directory succeeded")
	}
	assertOnly(t, dir, "report.html", "taken")
}

// assertOnly fails unless dir holds exactly the named entries (no
// temporary files).
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("directory holds %q, want only %q", got, names)
	}
}
