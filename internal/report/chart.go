package report

import (
	"cmp"
	"math"
	"slices"
)

// Chart geometry, in SVG user units (the SVG is drawn at this size, shrunk
// to fit narrower columns).
const (
	chartWidth  = 640.0
	wideWidth   = 1296.0 // a Wide chart: the page's width less its padding
	markRow     = 16.0   // a row of the band above a bar chart's plot that holds mark labels
	plotHeight  = 220.0
	padTop      = 8.0
	padRight    = 20.0
	legendRow   = 18.0
	shadeRow    = 15.0
	fontTick    = 11.0
	fontLegend  = 12.0
	fontLabel   = 12.0
	fontMark    = 11.5
	maxDotCount = 30 // lines with at most this many drawn points also get a dot per point
)

// layout is everything computed about a chart before drawing it.
type layout struct {
	c             *Chart
	id            string // unique in the page, for the clip path and title
	width, height float64
	left, right   float64 // plot area
	top, bottom   float64
	x, y          axis
	barWidth      float64
	empty         bool // no series has a point
	legend        []legendItem
	seriesColor   []string
	seriesVariant []int
	seriesDash    []string  // dash pattern per series
	drawn         [][]Point // Lines: the points drawn per series
	band          float64   // height of the shade-label band above the plot
	shadeLabels   []shadeLabel
	markBand      float64 // Bars: height of the mark-label band, between the shade band and the plot
	markLabels    []markLabel
	endLabels     []endLabel
}

// markLabel places the label of c.Marks[mark] in row of the mark band.
type markLabel struct {
	mark   int
	x      float64
	anchor string
	row    int
}

// endLabel is the name of c.Series[series] at the right end of its line:
// the line ends at (x0, y0), the label's baseline is at y.
type endLabel struct {
	series int
	x0, y0 float64
	y      float64
	// inside: the line ends before the right edge, so the label sits
	// next to its last point, inside the plot, with no leader (a leader
	// to the edge would read as data where the series has none).
	inside bool
	x      float64 // inside: the label's anchor
	anchor string  // inside: "start" or "end"
}

type legendItem struct {
	series int // index in Chart.Series
	x, y   float64
	name   string
	color  string
	dash   string
	fade   bool
}

// shadeLabel places the label of c.Shades[shade] in row of the band.
type shadeLabel struct {
	shade  int
	x      float64
	anchor string
	row    int
}

// extent is a running min/max.
type extent struct {
	lo, hi float64
	ok     bool
}

func (e *extent) add(v float64) {
	if !e.ok {
		e.lo, e.hi, e.ok = v, v, true
		return
	}
	e.lo, e.hi = math.Min(e.lo, v), math.Max(e.hi, v)
}

// autoBarWidth is the smallest gap between distinct X values of all series,
// or 1 when there are fewer than two.
func autoBarWidth(c *Chart) float64 {
	var xs []float64
	for _, s := range c.Series {
		for _, p := range s.Points {
			xs = append(xs, p.X)
		}
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)
	w := math.Inf(1)
	for i := 1; i < len(xs); i++ {
		w = math.Min(w, xs[i]-xs[i-1])
	}
	if math.IsInf(w, 1) {
		return 1
	}
	return w
}

func (r *renderer) layoutChart(c *Chart) *layout {
	r.charts++
	l := &layout{c: c, id: "c" + itoa(r.charts), width: chartWidth, empty: true}
	if c.Wide {
		l.width = wideWidth
	}
	l.assignStyles(r.slots(c))
	xe, ye, markTop := l.extents()
	l.xRange(xe)
	l.yRange(ye, markTop)
	legendBottom := l.layoutLegend()
	l.margins()
	l.xTicks()
	rowRight := l.layoutShadeLabels()
	l.layoutBarMarks(rowRight)
	l.top = legendBottom + 8 + l.band + l.markBand
	l.bottom = l.top + plotHeight
	l.y.lo, l.y.hi = l.bottom, l.top
	if l.endLabelsFit() {
		l.placeEndLabels()
	}
	l.height = l.bottom + 24
	if c.XLabel != "" {
		l.height += 18
	}
	l.height += 4
	return l
}

// assignStyles gives each series its colour and palette variant (slots,
// in order of first appearance on the page) and notes whether any series
// has a point.
func (l *layout) assignStyles(slots []int) {
	for i, s := range l.c.Series {
		col, v := slotStyle(slots[i])
		l.seriesColor = append(l.seriesColor, col)
		l.seriesVariant = append(l.seriesVariant, v)
		if len(s.Points) > 0 {
			l.empty = false
		}
	}
	l.assignDashes()
}

// extents measures the data: X and Y of every point (stacked for bars),
// shade and mark; markTop is the highest mark or point.
func (l *layout) extents() (xe, ye extent, markTop float64) {
	c := l.c
	if c.Kind == Bars {
		l.barExtents(&xe, &ye)
	} else {
		l.drawn = make([][]Point, len(c.Series))
		for i, s := range c.Series {
			l.drawn[i] = linePoints(s.Points, MaxLinePoints)
			for _, p := range s.Points {
				xe.add(p.X)
				ye.add(p.Y)
			}
		}
	}
	for _, sh := range c.Shades {
		xe.add(sh.From)
		xe.add(sh.To)
	}
	for _, m := range c.Marks {
		xe.add(m.X)
		if c.Kind == Bars {
			xe.add(m.X + l.barWidth)
		}
	}
	markTop = ye.hi
	for _, m := range c.Marks {
		ye.add(m.Y)
		markTop = math.Max(markTop, m.Y)
	}
	return xe, ye, markTop
}

// barExtents measures a bar chart: bars of one X stack, positive up and
// negative down.
func (l *layout) barExtents(xe, ye *extent) {
	l.barWidth = l.c.BarWidth
	if l.barWidth == 0 {
		l.barWidth = autoBarWidth(l.c)
	}
	pos, neg := map[float64]float64{}, map[float64]float64{}
	for _, s := range l.c.Series {
		for _, p := range s.Points {
			xe.add(p.X)
			xe.add(p.X + l.barWidth)
			if p.Y >= 0 {
				pos[p.X] += p.Y
				ye.add(pos[p.X])
			} else {
				neg[p.X] += p.Y
				ye.add(neg[p.X])
			}
		}
	}
}

// xRange sets the X range: the chart's own, or the data's.
func (l *layout) xRange(xe extent) {
	c := l.c
	l.x.log = c.LogX
	switch {
	case c.XMin != c.XMax:
		l.x.min, l.x.max = c.XMin, c.XMax
	case !xe.ok && c.LogX:
		l.x.min, l.x.max = 1, 10
	case !xe.ok:
		l.x.min, l.x.max = 0, 1
	case c.LogX:
		l.x.min, l.x.max = logExtent(xe.lo, xe.hi)
	case xe.lo == xe.hi:
		l.x.min, l.x.max = xe.lo-1, xe.hi+1
	default:
		l.x.min, l.x.max = xe.lo, xe.hi
	}
}

// yTicks is the target number of Y ticks: fixed, so that charts with the
// same range get the same ticks.
const yTicks = 5

// yRange sets the Y range and ticks.
func (l *layout) yRange(ye extent, markTop float64) {
	c := l.c
	l.y.log = c.LogY
	if c.LogY {
		lo, hi := 1.0, 10.0
		if ye.ok {
			lo, hi = logExtent(ye.lo, ye.hi)
		}
		if c.YMax > 0 {
			hi = c.YMax
			if lo >= hi {
				lo, _ = logExtent(hi/10, hi)
			}
		}
		l.y.min, l.y.max = lo, hi
		l.y.ticks = logTicks(lo, hi, 8)
		return
	}
	lo, hi := 0.0, 0.0
	if ye.ok {
		lo, hi = math.Min(0, ye.lo), math.Max(0, ye.hi)
	}
	if c.Kind == Lines && len(c.Marks) > 0 && markTop > 0 && markTop >= 0.9*hi {
		hi = math.Max(hi, markTop*1.12) // room for the label above the mark
	}
	var step float64
	if c.YMax > 0 {
		hi = c.YMax
		step = niceStep(hi-lo, yTicks)
		lo = math.Floor(lo/step+1e-9) * step
		step = niceStep(hi-lo, yTicks)
	} else {
		if hi <= lo {
			hi = lo + 1
		}
		step = niceStep(hi-lo, yTicks)
		lo = math.Floor(lo/step+1e-9) * step
		hi = math.Ceil(hi/step-1e-9) * step
	}
	l.y.min, l.y.max = cleanZero(lo), cleanZero(hi)
	l.y.ticks = ticksWithStep(l.y.min, l.y.max, step)
}

// layoutLegend places the legend items in rows wrapped to the chart width
// and returns the legend's bottom.
func (l *layout) layoutLegend() float64 {
	x, y := 12.0, padTop
	rows := 0
	for i, s := range l.c.Series {
		name := s.Name
		if name == "" {
			name = "series " + itoa(i+1)
		}
		if len(s.Points) == 0 && !l.empty {
			name += " (no data)"
		}
		w := 16 + 6 + textWidth(name, fontLegend) + 18
		if rows == 0 {
			rows = 1
		} else if x+w > l.width-padRight+18 {
			x, y = 12, y+legendRow
			rows++
		}
		l.legend = append(l.legend, legendItem{
			series: i, x: x, y: y, name: name, color: l.seriesColor[i],
			dash: l.dash(i), fade: l.seriesVariant[i]%2 == 1,
		})
		x += w
	}
	if rows == 0 {
		return padTop
	}
	return padTop + float64(rows)*legendRow + 4
}

// margins sets the plot's left and right edges: room for the widest Y tick
// label (at least "0,000", so that charts of different heights line their
// plots up), the Y axis label, and the end labels.
func (l *layout) margins() {
	widest := textWidth("0,000", fontTick)
	for _, t := range l.y.ticks {
		widest = math.Max(widest, textWidth(t.label, fontTick))
	}
	l.left = 10 + widest + 8
	if l.c.YLabel != "" {
		l.left += 20
	}
	l.right = l.width - padRight
	if l.endLabelsFit() {
		l.right = l.width - l.endLabelWidth() - 22
	}
	l.x.lo, l.x.hi = l.left, l.right
}

// endLabelWidth is the room the end labels take right of the plot: the
// widest name of a series whose line reaches the right edge (the others
// are labelled at their own end, inside the plot).
func (l *layout) endLabelWidth() float64 {
	widest := 0.0
	for i, it := range l.legend {
		if l.reachesEdge(i) {
			widest = math.Max(widest, textWidth(it.name, fontLegend))
		}
	}
	return widest
}

// endGap is the least vertical distance between two end labels.
const endGap = 14.0

// endLabelsFit reports whether the chart asks for end labels and those at
// the right edge fit the plot's height one above the other; when they do
// not, the legend alone names the lines.
func (l *layout) endLabelsFit() bool {
	if !l.c.EndLabels || l.c.Kind != Lines {
		return false
	}
	n := 0
	for i := range l.drawn {
		if l.reachesEdge(i) {
			n++
		}
	}
	return float64(n-1)*endGap <= plotHeight-10
}

// reachesEdge reports whether series i's line ends at the right edge of
// the X range (within 2% of it).
func (l *layout) reachesEdge(i int) bool {
	pts := l.drawn[i]
	if len(pts) == 0 {
		return false
	}
	return pts[len(pts)-1].X >= l.x.max-0.02*(l.x.max-l.x.min)
}

// xTicks chooses as many X ticks as fit without labels touching.
func (l *layout) xTicks() {
	if l.c.LogX {
		for n := 10; n >= 2; n-- {
			l.x.ticks = logTicks(l.x.min, l.x.max, n)
			if ticksFit(&l.x, l.x.ticks) {
				break
			}
		}
		return
	}
	for n := int((l.right - l.left) / 70); n >= 2; n-- {
		l.x.ticks = linearTicks(l.x.min, l.x.max, n)
		if ticksFit(&l.x, l.x.ticks) {
			break
		}
	}
}

// layoutShadeLabels puts the shade labels in a band above the plot, clear
// of the data and the marks; labels that would touch move to another row
// of the band. It returns the right end of the last label of each row.
func (l *layout) layoutShadeLabels() []float64 {
	var rowRight []float64
	for i, sh := range l.c.Shades {
		x0, x1, ok := l.shadeSpan(sh)
		if !ok || sh.Label == "" {
			continue
		}
		w := textWidth(sh.Label, fontTick)
		lab := shadeLabel{shade: i, x: x0 + 5, anchor: "start"}
		left := x0 + 5
		if left+w > l.right {
			lab.x, lab.anchor, left = x1-5, "end", x1-5-w
			if left < l.left {
				lab.x, lab.anchor, left = (x0+x1)/2, "middle", (x0+x1)/2-w/2
			}
		}
		lab.row, rowRight = pickRow(rowRight, left, w, 8)
		l.shadeLabels = append(l.shadeLabels, lab)
	}
	l.band = float64(len(rowRight)) * shadeRow
	return rowRight
}

// layoutBarMarks puts the mark labels of a bar chart in a band of their
// own, under the shade labels and above the plot, joined to their mark by
// a leader: inside the plot they would cover bars.
func (l *layout) layoutBarMarks(rowRight []float64) {
	if l.c.Kind != Bars {
		return
	}
	rowRight = rowRight[:0]
	for i, m := range l.c.Marks {
		x := m.X + l.barWidth/2
		if m.Label == "" || !l.x.contains(x) {
			continue
		}
		px := l.x.px(x)
		w := textWidth(m.Label, fontMark)
		lab := markLabel{mark: i, x: px, anchor: "middle"}
		left := px - w/2
		switch {
		case px+w/2 > l.right:
			lab.x, lab.anchor, left = px+4, "end", px+4-w
		case px-w/2 < l.left:
			lab.x, lab.anchor, left = px-4, "start", px-4
		}
		lab.row, rowRight = pickRow(rowRight, left, w, 10)
		l.markLabels = append(l.markLabels, lab)
	}
	if len(rowRight) > 0 {
		l.markBand = float64(len(rowRight))*markRow + 6 // and a gap above a mark at the top
	}
}

// pickRow puts a label spanning [left, left+w) in the first row of a band
// whose last label ends at least gap before it, or in a new row; rowRight
// holds the right end of the last label of each row. It returns the row and
// the updated rowRight.
func pickRow(rowRight []float64, left, w, gap float64) (int, []float64) {
	row := len(rowRight)
	for r, right := range rowRight {
		if left >= right+gap {
			row = r
			break
		}
	}
	if row == len(rowRight) {
		rowRight = append(rowRight, 0)
	}
	rowRight[row] = left + w
	return row, rowRight
}

// dash returns the dash pattern of series i (see assignDashes).
func (l *layout) dash(i int) string { return l.seriesDash[i] }

// assignDashes gives series i its own pattern on a Dashed Lines chart,
// otherwise that of its palette variant; a series whose colour and pattern
// another series of the chart already has (explicit colours can repeat)
// gets the first pattern of lineDashes that its colour does not have yet,
// so no two series look alike.
func (l *layout) assignDashes() {
	l.seriesDash = make([]string, len(l.c.Series))
	used := map[[2]string]bool{}
	for i := range l.c.Series {
		d := dashes[l.seriesVariant[i]]
		if l.c.Dashed && l.c.Kind == Lines {
			d = lineDashes[i%len(lineDashes)]
		}
		for k := 0; used[[2]string{l.seriesColor[i], d}] && k < len(lineDashes); k++ {
			d = lineDashes[k]
		}
		used[[2]string{l.seriesColor[i], d}] = true
		l.seriesDash[i] = d
	}
}

// lineDashes are the patterns of a Dashed chart's series, in order.
// Twelve, so that a chart with more lines than the palette's eight colours
// still gives every line a pattern of its own.
var lineDashes = [...]string{"", "9 4", "2 3", "12 3 2 3", "5 5", "14 3 3 3 3 3", "1 4", "20 4",
	"6 2 1 2 1 2", "16 4 4 4", "3 6", "10 2 2 2 2 2 2 2"}

// placeEndLabels puts each line's name at its right end, moving labels
// apart (at least one line of text) from the top down, then back up from
// the bottom when they run off the plot.
func (l *layout) placeEndLabels() {
	const gap = endGap
	var labs, inside []endLabel
	for i, pts := range l.drawn {
		if len(pts) == 0 {
			continue
		}
		p := pts[len(pts)-1]
		x0, y0 := l.x.px(math.Min(math.Max(p.X, l.x.min), l.x.max)), l.y.px(math.Min(math.Max(p.Y, l.y.min), l.y.max))
		if l.reachesEdge(i) {
			labs = append(labs, endLabel{series: i, x0: x0, y0: y0, y: y0 + 4})
			continue
		}
		e := endLabel{series: i, x0: x0, y0: y0, inside: true, x: x0 + 6, anchor: "start"}
		if w := textWidth(l.legend[i].name, fontLegend); x0+6+w > l.right {
			e.x, e.anchor = x0-6, "end"
		}
		e.y = math.Min(math.Max(y0-6, l.top+12), l.bottom-4)
		inside = append(inside, e)
	}
	defer func() { l.endLabels = append(labs, inside...) }()
	slices.SortStableFunc(labs, func(a, b endLabel) int { return cmp.Compare(a.y, b.y) })
	for i := range labs {
		labs[i].y = math.Max(labs[i].y, l.top+10)
		if i > 0 {
			labs[i].y = math.Max(labs[i].y, labs[i-1].y+gap)
		}
	}
	for i := len(labs) - 1; i >= 0; i-- {
		limit := l.bottom + 4
		if i < len(labs)-1 {
			limit = labs[i+1].y - gap
		}
		labs[i].y = math.Min(labs[i].y, limit)
	}
}

// ticksFit reports whether the tick labels on a horizontal axis leave a gap
// of at least 12 px between neighbours.
func ticksFit(a *axis, ticks []tick) bool {
	for i := 1; i < len(ticks); i++ {
		gap := a.px(ticks[i].v) - a.px(ticks[i-1].v)
		if gap < (textWidth(ticks[i].label, fontTick)+textWidth(ticks[i-1].label, fontTick))/2+12 {
			return false
		}
	}
	return true
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

// chart renders one chart as a figure with a caption and an inline SVG.
func (r *renderer) chart(c *Chart) {
	l := r.layoutChart(c)
	if c.Wide {
		r.raw(`<figure class="figure wide">`)
	} else {
		r.raw(`<figure class="figure">`)
	}
	if c.Title != "" {
		r.raw("<figcaption>")
		r.text(c.Title)
		r.raw("</figcaption>")
	}
	r.raw("\n", `<svg class="chart`)
	if c.Wide {
		r.raw(" wide")
	}
	r.raw(`" data-title="`)
	r.text(c.Title)
	r.raw(`" data-kind="`, c.Kind.String(), `" xmlns="http://www.w3.org/2000/svg" width="`)
	r.px(l.width)
	r.raw(`" height="`)
	r.px(l.height)
	r.raw(`" viewBox="0 0 `)
	r.px(l.width)
	r.raw(" ")
	r.px(l.height)
	r.raw(`" role="img" aria-labelledby="`, l.id, `-t">`, "\n")
	r.raw(`<title id="`, l.id, `-t">`)
	r.text(c.Title)
	r.raw("</title>\n")
	r.raw(`<defs><clipPath id="`, l.id, `-clip"><rect x="`)
	r.px(l.left)
	r.raw(`" y="`)
	r.px(l.top)
	r.raw(`" width="`)
	r.px(l.right - l.left)
	r.raw(`" height="`)
	r.px(l.bottom - l.top)
	r.raw("\"/></clipPath></defs>\n")

	r.legend(l)
	r.shades(l)
	r.axes(l)
	r.raw(`<g class="plot" clip-path="url(#`, l.id, "-clip)\">\n")
	if c.Kind == Bars {
		r.bars(l)
	} else {
		r.lines(l)
	}
	r.raw("</g>\n")
	if l.y.min < 0 && l.y.max > 0 && !l.y.log {
		r.line("zero", l.left, l.y.px(0), l.right, l.y.px(0))
	}
	r.shadeLabels(l)
	r.marks(l)
	r.endLabels(l)
	if l.empty {
		r.raw(`<text class="nodata" text-anchor="middle" x="`)
		r.px((l.left + l.right) / 2)
		r.raw(`" y="`)
		r.px((l.top+l.bottom)/2 + 5)
		r.raw(`">no data</text>`, "\n")
	}
	r.raw("</svg></figure>\n")
}

// line writes a <line> from (x1, y1) to (x2, y2).
func (r *renderer) line(class string, x1, y1, x2, y2 float64) {
	r.raw(`<line class="`, class, `" x1="`)
	r.px(x1)
	r.raw(`" x2="`)
	r.px(x2)
	r.raw(`" y1="`)
	r.px(y1)
	r.raw(`" y2="`)
	r.px(y2)
	r.raw(`"/>`)
}

// textAt opens a <text> element at (x, y); the caller writes the content
// and closes it.
func (r *renderer) textAt(class, anchor string, x, y float64) {
	r.raw(`<text`)
	if class != "" {
		r.raw(` class="`, class, `"`)
	}
	if anchor != "" {
		r.raw(` text-anchor="`, anchor, `"`)
	}
	r.raw(` x="`)
	r.px(x)
	r.raw(`" y="`)
	r.px(y)
	r.raw(`">`)
}

func (r *renderer) legend(l *layout) {
	if len(l.legend) == 0 {
		return
	}
	r.raw(`<g class="legend">`, "\n")
	for _, it := range l.legend {
		r.raw(`<g class="legend-item" data-name="`)
		r.text(l.c.Series[it.series].Name)
		r.raw(`">`)
		cy := it.y + legendRow/2
		if l.c.Kind == Bars {
			r.raw(`<rect x="`)
			r.px(it.x + 2)
			r.raw(`" y="`)
			r.px(cy - 6)
			r.raw(`" width="12" height="12" rx="2" fill="`, it.color, `"`)
			if it.fade {
				r.raw(` fill-opacity="0.45" stroke="`, it.color, `"`)
			}
			r.raw(`/>`)
		} else {
			r.raw(`<line x1="`)
			r.px(it.x)
			r.raw(`" x2="`)
			r.px(it.x + 16)
			r.raw(`" y1="`)
			r.px(cy)
			r.raw(`" y2="`)
			r.px(cy)
			r.raw(`" stroke="`, it.color, `" stroke-width="2.5"`)
			if it.dash != "" {
				r.raw(` stroke-dasharray="`, it.dash, `"`)
			}
			r.raw(`/>`)
		}
		r.textAt("", "", it.x+22, cy+4)
		r.text(it.name)
		r.raw("</text></g>\n")
	}
	r.raw("</g>\n")
}

// shadeSpan returns the pixel span of a shade clamped to the plot, or
// ok=false when it lies outside the X range.
func (l *layout) shadeSpan(sh Shade) (x0, x1 float64, ok bool) {
	if sh.To < l.x.min || sh.From > l.x.max {
		return 0, 0, false
	}
	return l.x.px(math.Max(sh.From, l.x.min)), l.x.px(math.Min(sh.To, l.x.max)), true
}

func (r *renderer) shades(l *layout) {
	for _, sh := range l.c.Shades {
		x0, x1, ok := l.shadeSpan(sh)
		if !ok {
			continue
		}
		r.raw(`<rect class="shade" data-label="`)
		r.text(sh.Label)
		top := l.top - l.markBand
		if sh.Label != "" {
			top -= l.band
		}
		r.raw(`" x="`)
		r.px(x0)
		r.raw(`" y="`)
		r.px(top)
		r.raw(`" width="`)
		r.px(x1 - x0)
		r.raw(`" height="`)
		r.px(l.bottom - top)
		r.raw(`"/>`)
		for _, v := range []float64{sh.From, sh.To} {
			if v > l.x.min && v < l.x.max {
				r.line("shade-edge", l.x.px(v), top, l.x.px(v), l.bottom)
			}
		}
		r.raw("\n")
	}
}

func (r *renderer) shadeLabels(l *layout) {
	for _, lab := range l.shadeLabels {
		r.textAt("shade-label", lab.anchor, lab.x, l.top-l.markBand-l.band+11+float64(lab.row)*shadeRow)
		r.text(l.c.Shades[lab.shade].Label)
		r.raw("</text>\n")
	}
}

func (r *renderer) axes(l *layout) {
	r.raw(`<g class="axis y">`)
	for _, t := range l.y.ticks {
		py := l.y.px(t.v)
		if t.v != l.y.min || l.y.log {
			r.line("grid", l.left, py, l.right, py)
		}
		r.textAt("tick", "end", l.left-8, py+4)
		r.text(t.label)
		r.raw("</text>")
	}
	if l.c.YLabel != "" {
		cy := (l.top + l.bottom) / 2
		r.raw(`<text class="axis-label" text-anchor="middle" transform="translate(14 `)
		r.px(cy)
		r.raw(`) rotate(-90)">`)
		r.text(l.c.YLabel)
		r.raw("</text>")
	}
	r.raw("</g>\n")

	r.raw(`<g class="axis x">`)
	r.line("axis-line", l.left, l.bottom, l.right, l.bottom)
	for _, t := range l.x.ticks {
		px := l.x.px(t.v)
		r.line("tick-mark", px, l.bottom, px, l.bottom+4)
		anchor := "middle"
		w := textWidth(t.label, fontTick)
		switch {
		case px+w/2 > l.width-2:
			anchor = "end"
		case px-w/2 < 2:
			anchor = "start"
		}
		r.textAt("tick", anchor, px, l.bottom+17)
		r.text(t.label)
		r.raw("</text>")
	}
	if l.c.XLabel != "" {
		r.textAt("axis-label", "middle", (l.left+l.right)/2, l.bottom+37)
		r.text(l.c.XLabel)
		r.raw("</text>")
	}
	r.raw("</g>\n")
}

func (r *renderer) bars(l *layout) {
	pos, neg := map[float64]float64{}, map[float64]float64{}
	for i, s := range l.c.Series {
		r.raw(`<g class="series" data-name="`)
		r.text(s.Name)
		r.raw(`" data-points="`)
		r.int(len(s.Points))
		r.raw(`" fill="`, l.seriesColor[i], `"`)
		if l.seriesVariant[i]%2 == 1 {
			r.raw(` fill-opacity="0.45" stroke="`, l.seriesColor[i], `" stroke-width="0.75"`)
		}
		r.raw(">\n")
		for _, p := range s.Points {
			var from, to float64
			if p.Y >= 0 {
				from = pos[p.X]
				to = from + p.Y
				pos[p.X] = to
			} else {
				from = neg[p.X]
				to = from + p.Y
				neg[p.X] = to
			}
			x0, x1 := l.x.px(p.X), l.x.px(p.X+l.barWidth)
			if w := x1 - x0; w >= 4 {
				inset := math.Min(w*0.12, 3)
				x0, x1 = x0+inset/2, x1-inset/2
			}
			y0, y1 := l.y.px(from), l.y.px(to)
			r.raw(`<rect class="bar" data-x="`)
			r.val(p.X)
			r.raw(`" data-y="`)
			r.val(p.Y)
			r.raw(`" x="`)
			r.px(x0)
			r.raw(`" y="`)
			r.px(math.Min(y0, y1))
			r.raw(`" width="`)
			r.px(x1 - x0)
			r.raw(`" height="`)
			r.px(math.Abs(y1 - y0))
			r.raw("\"/>\n")
		}
		r.raw("</g>\n")
	}
}

func (r *renderer) lines(l *layout) {
	for i, s := range l.c.Series {
		pts := l.drawn[i]
		color := l.seriesColor[i]
		r.raw(`<g class="series" data-name="`)
		r.text(s.Name)
		r.raw(`" data-points="`)
		r.int(len(s.Points))
		r.raw(`">`, "\n")
		if len(pts) > 0 {
			r.raw(`<polyline class="line" stroke="`, color, `"`)
			if d := l.dash(i); d != "" {
				r.raw(` stroke-dasharray="`, d, `"`)
			}
			r.raw(` points="`)
			for j, p := range pts {
				if j > 0 {
					r.raw(" ")
				}
				r.px(l.x.px(p.X))
				r.raw(",")
				r.px(l.y.px(p.Y))
			}
			r.raw("\"/>\n")
		}
		if len(pts) <= maxDotCount {
			for _, p := range pts {
				r.raw(`<circle class="dot" r="3" fill="`, color, `" cx="`)
				r.px(l.x.px(p.X))
				r.raw(`" cy="`)
				r.px(l.y.px(p.Y))
				r.raw(`"/>`)
			}
			if len(pts) > 0 {
				r.raw("\n")
			}
		}
		r.raw("</g>\n")
	}
}

func (r *renderer) marks(l *layout) {
	if l.c.Kind == Bars {
		r.barMarks(l)
		return
	}
	for _, m := range l.c.Marks {
		x := m.X
		if !l.x.contains(x) || !l.y.contains(m.Y) {
			continue
		}
		px, py := l.x.px(x), l.y.px(m.Y)
		r.markDot(m.Label, px, py)
		if m.Label != "" {
			w := textWidth(m.Label, fontMark)
			anchor, tx := "middle", px
			switch {
			case px+w/2 > l.right:
				anchor, tx = "end", px+4
			case px-w/2 < l.left:
				anchor, tx = "start", px-4
			}
			ty := py - 9
			if ty-12 < l.top {
				ty = py + 18
			}
			r.textAt("halo", anchor, tx, ty)
			r.text(m.Label)
			r.raw("</text>")
		}
		r.raw("</g>\n")
	}
}

// markDot opens a mark's group and draws its dot at (px, py); the caller
// adds the label and closes the group.
func (r *renderer) markDot(label string, px, py float64) {
	r.raw(`<g class="mark" data-label="`)
	r.text(label)
	r.raw(`"><circle r="3.5" cx="`)
	r.px(px)
	r.raw(`" cy="`)
	r.px(py)
	r.raw(`"/>`)
}

// barMarks draws the marks of a bar chart: a dot on the bar and its label
// in the mark band above the plot, joined by a dotted leader that runs
// through the space above the bar.
func (r *renderer) barMarks(l *layout) {
	labels := map[int]markLabel{}
	for _, lab := range l.markLabels {
		labels[lab.mark] = lab
	}
	for i, m := range l.c.Marks {
		x := m.X + l.barWidth/2
		if !l.x.contains(x) {
			continue
		}
		px, py := l.x.px(x), l.y.px(math.Min(math.Max(m.Y, l.y.min), l.y.max))
		r.markDot(m.Label, px, py)
		if lab, ok := labels[i]; ok {
			base := l.top - l.markBand + 12 + float64(lab.row)*markRow
			if py-5 > base+3 {
				r.raw(`<line class="leader" x1="`)
				r.px(px)
				r.raw(`" x2="`)
				r.px(px)
				r.raw(`" y1="`)
				r.px(base + 3)
				r.raw(`" y2="`)
				r.px(py - 5)
				r.raw(`"/>`)
			}
			r.textAt("halo", lab.anchor, lab.x, base)
			r.text(m.Label)
			r.raw("</text>")
		}
		r.raw("</g>\n")
	}
}

// endLabels writes the names at the right ends of the lines.
func (r *renderer) endLabels(l *layout) {
	if len(l.endLabels) == 0 {
		return
	}
	r.raw(`<g class="end-labels">`, "\n")
	for _, e := range l.endLabels {
		color := l.seriesColor[e.series]
		tx := l.right + 8
		r.raw(`<g class="end-label" data-name="`)
		r.text(l.c.Series[e.series].Name)
		r.raw(`">`)
		if e.inside {
			r.raw(`<text class="halo end-name" text-anchor="`, e.anchor, `" style="fill:`, color, `" x="`)
			r.px(e.x)
			r.raw(`" y="`)
			r.px(e.y)
			r.raw(`">`)
			r.text(l.legend[e.series].name)
			r.raw("</text></g>\n")
			continue
		}
		r.raw(`<polyline class="leader" stroke="`, color, `" points="`)
		r.px(e.x0 + 3)
		r.raw(",")
		r.px(e.y0)
		r.raw(" ")
		r.px(tx - 2)
		r.raw(",")
		r.px(e.y - 4)
		r.raw(`"/>`)
		r.raw(`<text class="halo end-name" style="fill:`, color, `" x="`)
		r.px(tx)
		r.raw(`" y="`)
		r.px(e.y)
		r.raw(`">`)
		r.text(l.legend[e.series].name)
		r.raw("</text></g>\n")
	}
	r.raw("</g>\n")
}
