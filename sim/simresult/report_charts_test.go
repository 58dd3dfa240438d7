package simresult

import "testing"

func linePts(ys ...float64) []Point {
	pts := make([]Point, len(ys))
	for i, y := range ys {
		pts[i] = Point{X: float64(i), Y: y}
	}
	return pts
}

// Series that peak orders of magnitude apart become one chart each, on
// the X range of the whole chart; series of one scale stay together.
func TestSmallMultiples(t *testing.T) {
	c := Chart{Title: "load", Series: []Series{
		{Name: "immediate", Points: linePts(40000, 40000, 0)},
		{Name: "expo-full", Points: append(linePts(100, 5, 3, 2), Point{X: 20, Y: 1})},
	}, Shades: []Shade{{From: 0, To: 5}}}
	got := smallMultiples([]Chart{c})
	if len(got) != 2 || len(got[0].Series) != 1 || got[1].Series[0].Name != "expo-full" {
		t.Fatalf("got %+v, want one chart per series", got)
	}
	for _, m := range got {
		if m.xMin != 0 || m.xMax != 20 {
			t.Errorf("%s: X range [%v, %v], want the chart's [0, 20]", m.Title, m.xMin, m.xMax)
		}
	}
	c.Series[0].Points = linePts(200, 200, 0)
	if got := smallMultiples([]Chart{c}); len(got) != 1 || len(got[0].Series) != 2 {
		t.Fatalf("peaks 2× apart: %+v, want the chart as it is", got)
	}
}

// Lines within 1.5% of the chart's span at every X are drawn as one,
// named after both; a line that parts from them stays its own.
func TestMergeCoincident(t *testing.T) {
	c := Chart{Series: []Series{
		{Name: "credits", Points: linePts(1, 1.10, 1.12)},
		{Name: "grpc", Points: linePts(1, 1.11, 1.12)},
		{Name: "3-retries", Points: linePts(1, 2, 4)},
		{Name: "ratio", Points: linePts(1, 1.10, 1.40)},
	}}
	got := mergeCoincident(c).Series
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	if len(names) != 3 || names[0] != "credits ≈ grpc" || names[1] != "3-retries" || names[2] != "ratio" {
		t.Fatalf("series %q, want [credits ≈ grpc, 3-retries, ratio]", names)
	}
}
