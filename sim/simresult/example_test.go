package simresult_test

import (
	"os"

	"github.com/staggerhq/stagger/sim/simresult"
)

// A result built by hand is written as the simulator's are: floats with
// their column's precision.
func ExampleResult_WriteCSV() {
	r := &simresult.Result{
		Scenario: "demo",
		Title:    "two strategies",
		Table: simresult.Table{
			Columns: []simresult.Column{{Key: "strategy", Title: "strategy"}, {Key: "peak", Title: "peak", Prec: 1}},
			Rows:    [][]any{{"full jitter", 12.25}, {"none", 400.0}},
		},
	}
	if err := r.WriteCSV(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// strategy,peak
	// full jitter,12.2
	// none,400.0
}
