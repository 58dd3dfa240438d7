package simkit

import (
	"io"

	"github.com/staggerhq/stagger/sim/simresult"
)

// The result types are package simresult's: one definition, which package
// sim returns as it is.
type (
	Result  = simresult.Result  // what a scenario run produces
	Setting = simresult.Setting // one parameter value of a run
	Table   = simresult.Table   // a result's rows
	Column  = simresult.Column  // a table column
	Chart   = simresult.Chart   // one chart of the report
	Series  = simresult.Series  // one named line of a chart
	Point   = simresult.Point   // one (x, y) value
	Shade   = simresult.Shade   // a shaded x range
)

// WriteReport writes res as a self-contained HTML report to w.
func WriteReport(w io.Writer, res *Result, subtitle string) error {
	return res.WriteReport(w, subtitle)
}

// WriteReportFile writes res as a self-contained HTML report to path,
// atomically.
func WriteReportFile(path string, res *Result, subtitle string) error {
	return res.WriteReportFile(path, subtitle)
}
