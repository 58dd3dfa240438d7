package report

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Page is one report: a title, notes and sections.
type Page struct {
	Title    string    // heading and HTML <title>; "" renders as "stagger report"
	Subtitle string    // e.g. the command line and date
	Notes    []string  // paragraphs under the title
	Sections []Section // rendered in order; more than one also gets a table of contents
}

// Section is a titled part of a page: notes, an optional summary table and
// charts.
type Section struct {
	Title  string   // heading; "" draws none (the contents list says "Section n")
	Notes  []string // paragraphs under the heading, one per element
	Charts []Chart  // drawn in order, after the table
	Table  *Table   // summary table; nil for none
}

// Table is a summary table. Every row must have len(Columns) cells. Cells
// that read as numbers (optionally with a unit such as "%" or "ms") are
// right-aligned.
type Table struct {
	Columns []string   // header cells
	Rows    [][]string // body rows, each of len(Columns) cells
}

// Kind is the kind of a chart.
type Kind int

const (
	// Bars draws stacked bars: points of different series with the same X
	// stack (e.g. accepted + rejected per window).
	Bars Kind = iota
	// Lines draws one polyline per series (e.g. calls vs N per strategy).
	Lines
)

// String returns "bars" or "lines".
func (k Kind) String() string {
	switch k {
	case Bars:
		return "bars"
	case Lines:
		return "lines"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Chart is one chart. See the package documentation for how ranges, bars
// and marks are read.
type Chart struct {
	Title          string   // caption and the svg's data-title; "" draws no caption
	Kind           Kind     // Bars or Lines; any other value is an error
	XLabel, YLabel string   // axis titles; "" draws none
	XMin, XMax     float64  // axis range; XMin == XMax means auto. Give every chart of a
	YMax           float64  //   comparison the same values so they share an axis. 0 = auto.
	BarWidth       float64  // Bars: width of one bar in X units (e.g. the window); 0 = auto
	Series         []Series // drawn and listed in the legend in order; names distinct
	Shades         []Shade  // shaded X ranges, e.g. the outage
	Marks          []Mark   // annotated points, e.g. the peak window

	// LogX and LogY put that axis on a base-10 log scale (Lines only; every
	// value on the axis, and XMin/XMax/YMax when given, must be > 0).
	// Added to the original contract.
	LogX, LogY bool

	// Wide draws the chart across the whole width of the page (1296 units
	// instead of 640), on a row of its own.
	Wide bool
	// EndLabels (Lines) names each series at the end of its line, in its
	// colour. Lines that reach the right edge are named right of the plot:
	// labels of lines that end close together are spread apart and joined
	// to their line by a thin leader. A line that ends earlier is named
	// next to its last point, inside the plot, with no leader (one would
	// read as data). When the names at the edge do not fit the plot's
	// height, the legend alone names the lines.
	EndLabels bool
	// Dashed (Lines) gives every series of the chart its own dash pattern
	// as well as its own colour, so that lines lying on top of each other
	// stay apart.
	Dashed bool
}

// Color names a colour of the report's palette (Okabe & Ito). The zero
// value lets the page pick one (see the package documentation).
type Color uint8

// The palette's colours.
const (
	AutoColor Color = iota
	Blue
	Orange
	Green // bluish green
	Purple
	SkyBlue
	Vermillion
	Grey
	Yellow
)

// Series is one named data series of a chart.
type Series struct {
	Name   string  // legend entry; also picks the colour, kept for the whole page
	Points []Point // any order (Lines sorts by X); Bars: one bar per point
	// Color, if set, is the series' colour wherever it appears; series of
	// one chart must not set the same one. Names without one take colours
	// no Color on the page holds.
	Color Color
}

// Point is one data point.
type Point struct {
	X, Y float64 // data coordinates; Bars: X is the bar's left edge
}

// Shade is a shaded X range with a label, e.g. "gateway down".
type Shade struct {
	From, To float64 // X range in data units, From <= To
	Label    string  // drawn in the band above the plot; "" for none
}

// Mark is an annotated point, e.g. "peak 18".
type Mark struct {
	X, Y  float64 // data coordinates; Bars: X is a bar's left edge, drawn at its middle
	Label string  // drawn beside the point; "" for a bare dot
}

const (
	// MaxLinePoints is the most points drawn for one series of a Lines
	// chart; longer series are downsampled (see the package documentation).
	MaxLinePoints = 2000
	// MaxBars is the most bars (points, over all series) of one Bars chart.
	MaxBars = 20000
)

// Write renders one self-contained HTML document (inline SVG and CSS, no
// scripts, no network) to w. The whole page is validated first: NaN/Inf
// values and other bad input are rejected with an error naming the section,
// chart, series and field, and nothing is written.
func Write(w io.Writer, p Page) error {
	if err := validate(&p); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	r := newRenderer(bw)
	r.page(&p)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("report: write: %w", err)
	}
	return nil
}

// WriteFile writes the page to path atomically: it validates the page, writes
// a temporary file in the same directory, syncs it, and renames it over path,
// so a failed run leaves neither a half-written report nor a temporary file
// (and an existing file at path is untouched). The file gets mode 0644.
func WriteFile(path string, p Page) (err error) {
	if err := validate(&p); err != nil {
		return err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 64<<10)
	newRenderer(bw).page(&p)
	if err = bw.Flush(); err != nil {
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	if err = f.Chmod(0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("report: sync %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("report: close %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	// Make the rename durable; a directory that cannot be synced (some
	// file systems) does not make the report less complete.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
