package report

import (
	"cmp"
	"slices"
)

// linePoints returns the points of a Lines series to draw: sorted by X
// (stably, so equal X keep their order) and, when there are more than limit,
// downsampled. The input is not modified.
func linePoints(pts []Point, limit int) []Point {
	sorted := slices.Clone(pts)
	slices.SortStableFunc(sorted, func(a, b Point) int { return cmp.Compare(a.X, b.X) })
	return downsample(sorted, limit)
}

// downsample keeps at most limit (>= 4) points of pts (sorted by X): the
// first and the last point, and, of the points between, cut into
// (limit-2)/2 consecutive buckets of nearly equal size, each bucket's lowest
// and highest point in X order. Every extreme of the series therefore
// survives exactly. pts itself is returned when it is short enough.
func downsample(pts []Point, limit int) []Point {
	limit = max(limit, 4)
	n := len(pts)
	if n <= limit {
		return pts
	}
	buckets := (limit - 2) / 2
	inner := pts[1 : n-1]
	m := len(inner)
	out := make([]Point, 0, limit)
	out = append(out, pts[0])
	for b := range buckets {
		lo, hi := b*m/buckets, (b+1)*m/buckets
		if lo >= hi {
			continue
		}
		imin, imax := lo, lo
		for i := lo + 1; i < hi; i++ {
			if inner[i].Y < inner[imin].Y {
				imin = i
			}
			if inner[i].Y > inner[imax].Y {
				imax = i
			}
		}
		first, second := min(imin, imax), max(imin, imax)
		out = append(out, inner[first])
		if second != first {
			out = append(out, inner[second])
		}
	}
	return append(out, pts[n-1])
}
