package report

import (
	"math"
	"strconv"
	"strings"
)

// axis maps data values on one axis to pixels.
type axis struct {
	min, max float64 // data range (min < max; both > 0 on a log axis)
	log      bool
	lo, hi   float64 // pixels of min and max (hi < lo on the Y axis)
	ticks    []tick
}

type tick struct {
	v     float64
	label string
}

// px maps a data value to a pixel coordinate.
func (a *axis) px(v float64) float64 {
	var t float64
	if a.log {
		t = (math.Log10(v) - math.Log10(a.min)) / (math.Log10(a.max) - math.Log10(a.min))
	} else {
		t = (v - a.min) / (a.max - a.min)
	}
	return a.lo + t*(a.hi-a.lo)
}

// contains reports whether v lies on the axis (with a little slack for
// rounding).
func (a *axis) contains(v float64) bool {
	eps := (a.max - a.min) * 1e-9
	return v >= a.min-eps && v <= a.max+eps
}

// niceStep returns a round step (1, 2 or 5 times a power of ten) close to
// span/n.
func niceStep(span float64, n int) float64 {
	if span <= 0 || n < 1 {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / mag; {
	case f <= 1:
		return mag
	case f <= 2:
		return 2 * mag
	case f <= 5:
		return 5 * mag
	default:
		return 10 * mag
	}
}

func cleanZero(v float64) float64 {
	if v == 0 {
		return 0 // turns -0 into 0
	}
	return v
}

// linearTicks returns the multiples of a round step in [lo, hi], aiming at
// about n ticks, labelled consistently.
func linearTicks(lo, hi float64, n int) []tick {
	return ticksWithStep(lo, hi, niceStep(hi-lo, n))
}

// ticksWithStep returns the multiples of step in [lo, hi] (at most 1001).
func ticksWithStep(lo, hi, step float64) []tick {
	first := math.Ceil(lo/step - 1e-9)
	last := math.Min(math.Floor(hi/step+1e-9), first+1000)
	var vals []float64
	for k := first; k <= last; k++ {
		vals = append(vals, cleanZero(k*step))
	}
	return labelLinear(vals, step)
}

// siUnit returns the unit (1, 1e3, 1e6, 1e9) and suffix to write v with;
// thousands get a "k" from kFrom up.
func siUnit(v, kFrom float64) (float64, string) {
	switch {
	case v >= 1e9:
		return 1e9, "G"
	case v >= 1e6:
		return 1e6, "M"
	case v >= kFrom:
		return 1e3, "k"
	}
	return 1, ""
}

// labelLinear formats tick values with a shared unit (k, M, G from 10,000
// up) and as many decimals as the step needs.
func labelLinear(vals []float64, step float64) []tick {
	maxAbs := 0.0
	for _, v := range vals {
		maxAbs = math.Max(maxAbs, math.Abs(v))
	}
	unit, suffix := siUnit(maxAbs, 1e4)
	dec := 0
	if s := step / unit; s < 1 {
		dec = int(math.Ceil(-math.Log10(s) - 1e-9))
	}
	ticks := make([]tick, len(vals))
	for i, v := range vals {
		ticks[i] = tick{v: v, label: formatNumber(v/unit, dec, suffix)}
	}
	return ticks
}

// formatNumber formats v with at most dec decimals (trailing zeros trimmed),
// thousands separators, a true minus sign and a unit suffix (not on zero).
func formatNumber(v float64, dec int, suffix string) string {
	s := strconv.FormatFloat(math.Abs(v), 'f', dec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "0" {
		return "0"
	}
	intPart, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	if v < 0 {
		b.WriteString("−")
	}
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	b.WriteString(suffix)
	return b.String()
}

// logExtent widens [lo, hi] (both > 0) outward to powers of ten.
func logExtent(lo, hi float64) (float64, float64) {
	elo := math.Floor(math.Log10(lo) + 1e-9)
	ehi := math.Ceil(math.Log10(hi) - 1e-9)
	if ehi <= elo {
		ehi = elo + 1
	}
	return math.Pow(10, elo), math.Pow(10, ehi)
}

// logTicks returns powers of ten in [lo, hi] (every k-th one when there are
// more than n), adding 2× and 5× when fewer than three decades fit.
func logTicks(lo, hi float64, n int) []tick {
	elo := int(math.Ceil(math.Log10(lo) - 1e-9))
	ehi := int(math.Floor(math.Log10(hi) + 1e-9))
	every := 1
	for (ehi-elo)/every+1 > n && every < 100 {
		every++
	}
	var ticks []tick
	mults := []float64{1}
	if ehi-elo < 2 {
		mults = []float64{1, 2, 5}
	}
	for e := elo - 1; e <= ehi; e++ {
		if (e-elo)%every != 0 {
			continue
		}
		for _, m := range mults {
			v := m * math.Pow(10, float64(e))
			if v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
				ticks = append(ticks, tick{v: v, label: formatCompact(v)})
			}
		}
	}
	return ticks
}

// formatCompact formats a positive value briefly: 1, 20, 500, 1k, 20k, 1M.
func formatCompact(v float64) string {
	unit, suffix := siUnit(v, 1e3)
	return strconv.FormatFloat(v/unit, 'g', 6, 64) + suffix
}

// textWidth estimates the width in pixels of s in a sans-serif font of the
// given size, on the wide side: good enough to lay out legends and labels
// without a font.
func textWidth(s string, size float64) float64 {
	w := 0.0
	for _, r := range s {
		switch {
		case r == ' ' || r == '.' || r == ',' || r == 'i' || r == 'l' || r == 'j' || r == 'I' || r == '\'' || r == '|':
			w += 0.3
		case r >= '0' && r <= '9':
			w += 0.56
		case r == 'm' || r == 'w' || r == 'M' || r == 'W':
			w += 0.85
		case r >= 'A' && r <= 'Z':
			w += 0.68
		default:
			w += 0.56
		}
	}
	// 10% over the estimate: a label measured short is cut at the edge.
	return w * size * 1.1
}
