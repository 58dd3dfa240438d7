package sim

import "github.com/staggerhq/stagger/sim/simresult"

// Result is what a scenario run produces: a table (printed, or written as
// JSON or CSV), charts for the HTML report, and notes. Every number in it
// is a pure function of the scenario's parameters and the seed. Its
// writers are WriteText, WriteCSV, WriteJSON and WriteReport.
type Result = simresult.Result

// The parts of a Result.
type (
	Setting = simresult.Setting // one parameter value of a run
	Table   = simresult.Table   // the rows; a cell is a string, int, int64 or float64
	Column  = simresult.Column  // a table column
	Chart   = simresult.Chart   // one chart of the report
	Series  = simresult.Series  // one named line of a chart
	Point   = simresult.Point   // one (x, y) value, in the chart's axis units
	Shade   = simresult.Shade   // a shaded X range, e.g. an outage
)
