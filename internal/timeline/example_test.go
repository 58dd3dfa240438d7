package timeline_test

import (
	"fmt"
	"strings"

	"github.com/staggerhq/stagger/internal/timeline"
)

// Read a metrics export with one row per second and look at what the
// dependency did in each window.
func ExampleReadCSV() {
	export := `window_start,arrivals,status_2xx,status_503,timeout,p50_ms,p99_ms
2026-11-03T14:00:00Z,120,118,0,2,11,40
2026-11-03T14:00:01Z,480,60,400,20,15,3000
`
	tl, err := timeline.ReadCSV(strings.NewReader(export), 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, w := range tl.Windows {
		fmt.Printf("%v: %d arrivals, %d failed, p99 %v\n", w.Start, w.Arrivals, w.Failed(), w.Latency.P99)
	}
	// Output:
	// 0s: 120 arrivals, 2 failed, p99 40ms
	// 1s: 480 arrivals, 420 failed, p99 3s
}

// A file that breaks a rule names the line, the field and the rule.
func ExampleRead() {
	file := `{"stagger_timeline":1,"window_ms":200}
{"start_ms":0,"arrivals":3,"status":{"200":3}}
{"start_ms":100,"arrivals":1,"status":{"200":1}}
{"end":{"windows":2,"arrivals":4}}
`
	_, err := timeline.Read(strings.NewReader(file))
	fmt.Println(err)
	// Output:
	// timeline: line 3: start_ms: overlaps the previous window [0, 200) ms
}
