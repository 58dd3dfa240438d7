package report

import (
	"bufio"
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func labels(ts []tick) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.label)
	}
	return strings.Join(s, " ")
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct {
		span float64
		n    int
		want float64
	}{
		{18, 5, 5}, {20, 5, 5}, {10, 5, 2}, {2000, 8, 500}, {1, 5, 0.2}, {7, 7, 1}, {1e6, 5, 200000}, {0.03, 3, 0.01},
	} {
		if got := niceStep(c.span, c.n); math.Abs(got-c.want) > c.want*1e-12 {
			t.Errorf("niceStep(%v, %d) = %v, want %v", c.span, c.n, got, c.want)
		}
	}
}

func TestTickLabels(t *testing.T) {
	for _, c := range []struct {
		lo, hi, step float64
		want         string
	}{
		{0, 20, 5, "0 5 10 15 20"},
		{0, 2000, 500, "0 500 1,000 1,500 2,000"},
		{0, 12000, 2000, "0 2k 4k 6k 8k 10k 12k"},
		{0, 2e6, 5e5, "0 0.5M 1M 1.5M 2M"},
		{-10, 10, 5, "−10 −5 0 5 10"},
		{0, 1, 0.2, "0 0.2 0.4 0.6 0.8 1"},
		{0.1, 0.3, 0.05, "0.1 0.15 0.2 0.25 0.3"},
	} {
		if got := labels(ticksWithStep(c.lo, c.hi, c.step)); got != c.want {
			t.Errorf("ticks [%v, %v] step %v = %q, want %q", c.lo, c.hi, c.step, got, c.want)
		}
	}
}

func TestLogTicks(t *testing.T) {
	if got, want := labels(logTicks(1, 1e6, 10)), "1 10 100 1k 10k 100k 1M"; got != want {
		t.Errorf("log ticks 1..1e6 = %q, want %q", got, want)
	}
	if got, want := labels(logTicks(1, 1e8, 5)), "1 100 10k 1M 100M"; got != want {
		t.Errorf("log ticks 1..1e8 (5) = %q, want %q", got, want)
	}
	if got, want := labels(logTicks(1, 10, 10)), "1 2 5 10"; got != want {
		t.Errorf("log ticks 1..10 = %q, want %q", got, want)
	}
	lo, hi := logExtent(3, 4500)
	if lo != 1 || hi != 10000 {
		t.Errorf("logExtent(3, 4500) = %v, %v; want 1, 10000", lo, hi)
	}
}

func TestDownsampleKeepsExtremes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	pts := make([]Point, 10000)
	for i := range pts {
		pts[i] = Point{X: float64(i), Y: rng.NormFloat64()}
	}
	pts[4321].Y = 99   // a single-point spike must survive
	pts[8765].Y = -99  // and a single-point dip
	pts[0].Y = 0.5     // the ends must survive
	pts[9999].Y = -0.5 //
	got := downsample(pts, MaxLinePoints)
	if len(got) > MaxLinePoints {
		t.Fatalf("downsample kept %d points, want <= %d", len(got), MaxLinePoints)
	}
	if len(got) < MaxLinePoints/2 {
		t.Fatalf("downsample kept only %d points", len(got))
	}
	if got[0] != pts[0] || got[len(got)-1] != pts[len(pts)-1] {
		t.Errorf("first/last point not kept: %v … %v", got[0], got[len(got)-1])
	}
	if !slices.Contains(got, pts[4321]) || !slices.Contains(got, pts[8765]) {
		t.Errorf("spike or dip lost in downsampling")
	}
	if !slices.IsSortedFunc(got, func(a, b Point) int { return cmp.Compare(a.X, b.X) }) {
		t.Errorf("downsampled points are not in X order")
	}
	short := pts[:MaxLinePoints]
	if got := downsample(short, MaxLinePoints); len(got) != len(short) {
		t.Errorf("a series of exactly MaxLinePoints points was downsampled to %d", len(got))
	}
}

func TestLinePointsSortsWithoutModifying(t *testing.T) {
	in := []Point{{3, 1}, {1, 2}, {2, 3}}
	got := linePoints(in, MaxLinePoints)
	if want := []Point{{1, 2}, {2, 3}, {3, 1}}; !slices.Equal(got, want) {
		t.Errorf("linePoints = %v, want %v", got, want)
	}
	if in[0] != (Point{3, 1}) {
		t.Errorf("linePoints modified its input: %v", in)
	}
}

func TestIsNumeric(t *testing.T) {
	for s, want := range map[string]bool{
		"18": true, "1,234": true, "−3": true, "-3.5": true, "12.5%": true, "708 ms": true, "1.5k": true, "3×": true,
		"": false, "none": false, "v1": false, "retry immediately": false, "n/a": false, "1-2": false,
	} {
		if got := isNumeric(s); got != want {
			t.Errorf("isNumeric(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestTextEscaping(t *testing.T) {
	var b strings.Builder
	w := bufio.NewWriter(&b)
	r := newRenderer(w)
	r.text("a<b>&\"c\"'d'\x00\xff é")
	w.Flush()
	if got, want := b.String(), "a&lt;b&gt;&amp;&#34;c&#34;&#39;d&#39;\uFFFD\uFFFD é"; got != want {
		t.Errorf("text escaped to %q, want %q", got, want)
	}
}

func TestPixelFormat(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", -0.04: "0", 12: "12", 12.34: "12.3", -4.5: "-4.5", -0.06: "-0.1", 639.99: "640", 1e20: "100000000000000000000.0",
	} {
		var b strings.Builder
		w := bufio.NewWriter(&b)
		newRenderer(w).px(v)
		w.Flush()
		if b.String() != want {
			t.Errorf("px(%v) = %q, want %q", v, b.String(), want)
		}
	}
}
