// Package report renders the HTML/SVG report shared by the lab, the
// simulator and the fault proxy.
//
// A [Page] holds sections; a [Section] holds notes, an optional summary
// [Table] and charts. [Write] renders the page as one self-contained HTML
// document: inline CSS and inline SVG, no scripts, no fonts, images or links
// to anything outside the file (a Content-Security-Policy meta tag forbids
// them), readable on a laptop screen and printable. [WriteFile] writes it
// atomically.
//
// # Charts
//
// A [Bars] chart stacks, for each X, the points of every series with that X
// (the first series at the bottom; negative values stack downwards from
// zero). A bar covers the X range [X, X+BarWidth): X is the left edge, for
// example the start of a 200 ms window, so a [Shade] from 0 to 1000 covers
// exactly the windows starting at 0, 200, … 800. On a Bars chart a [Mark]'s X
// is read the same way and the mark is drawn at the middle of that bar.
//
// A [Lines] chart draws one polyline per series through its points sorted by
// X. A series of more than [MaxLinePoints] points is downsampled for
// drawing: the first and the last point are kept, and the points between
// are cut into (MaxLinePoints-2)/2 consecutive buckets, each keeping its
// lowest and its highest point (in X order), so every peak and trough
// survives exactly; the series' data-points attribute still gives the
// number of points supplied. Lines of at most 30 points also get a dot per
// point. Bars are never downsampled: a Bars chart with more than [MaxBars]
// bars is an error (aggregate into wider bars).
//
// Axis ranges are automatic unless given: XMin == XMax means auto (the data,
// shades and marks), YMax == 0 means auto (a round value at or above the
// highest stack, point or mark, leaving room for a Lines mark's label). A
// bar chart's mark labels sit in a band above the plot, joined to their
// mark by a dotted leader, so they never cover a bar. A linear Y
// axis always includes zero. Ticks are
// round numbers (1, 2 or 5 times a power of ten) and depend only on the axis
// range and the chart size, so charts given the same XMin, XMax and YMax get
// identical axes. Values outside a fixed range are clipped. LogX and LogY
// (an addition to the original contract; Lines only) use a base-10 scale.
//
// Every series gets a colour from a fixed colour-blind-friendly palette
// (Okabe & Ito, eight colours). A series name keeps the colour it got where
// it first appeared on the page, so "accepted", "rejected" or a strategy
// has the same colour in every chart; new names take colours no other name
// on the page holds yet, in order, and only once all eight are held do
// names share a colour (never within one chart). A chart with more than
// eight series draws the rest as dashed lines or as lighter, outlined bars.
// Shade labels sit in a band above the plot, so they never cover data or
// mark labels. A series may also name its [Color]: a report whose series
// mean fixed things (accepted, down, busy) gives each its own. A Dashed
// Lines chart gives each series its own dash pattern too, and EndLabels
// names each line at its right end, so that a reader does not need the
// legend. A Wide chart spans the page.
//
// # Validation
//
// NaN and ±Inf anywhere (points, ranges, shades, marks), a negative
// BarWidth or YMax, XMin > XMax, a shade whose From is after its To, two
// series of one chart with the same name, an unknown Kind, a log axis with a
// value ≤ 0 (or on a Bars chart), more than MaxBars bars in one chart, or a
// table row whose length differs from the columns' are errors naming the
// section, chart, series and field. Write checks the
// whole page before writing a byte. A chart whose series have no points is
// rendered with its axes and a "no data" note.
//
// # Test hooks
//
// The markup keeps stable hooks for tests (and for anyone scraping a
// report):
//
//   - each chart: <svg class="chart" data-title="…" data-kind="bars|lines">
//     inside <figure class="figure">;
//   - each series: <g class="series" data-name="…" data-points="n"> inside
//     its chart (in the order given; legend entries are
//     <g class="legend-item" data-name="…">);
//   - each bar: <rect class="bar" data-x="…" data-y="…"> inside its series,
//     one per point of a Bars series (data-y is the point's own value, not
//     the top of its stack);
//   - each line: <polyline class="line"> inside its series;
//   - each shade: <rect class="shade" data-label="…"> and its label
//     <text class="shade-label">;
//   - each mark: <g class="mark" data-label="…">;
//   - the "no data" note: <text class="nodata">;
//   - axis tick labels: <text class="tick"> inside <g class="axis x"> and
//     <g class="axis y">;
//   - each section: <section class="section"> with a summary
//     <table class="summary"> when it has a Table.
package report
