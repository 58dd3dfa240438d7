// Package uievents reads a ui.Dashboard's queue events (the SSE stream at
// events/queues) for tests that must wait for a redrive the dashboard
// runs in the background: they wait on the stream, not on a timer.
package uievents

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/staggerhq/stagger/ui"
)

// AwaitRedrives reads the queue events at url (a dashboard's
// ".../events/queues") with c until the redrive of every source named has
// ended, and returns those runs in the order named. It fails when ctx ends
// or the stream ends first, with the last event read.
func AwaitRedrives(ctx context.Context, c *http.Client, url string, sources ...string) ([]ui.RedriveRun, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var last string
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		last = data
		var st struct{ Redrives []ui.RedriveRun }
		if err := json.Unmarshal([]byte(data), &st); err != nil {
			return nil, err
		}
		runs := make([]ui.RedriveRun, 0, len(sources))
		for _, s := range sources {
			if i := slices.IndexFunc(st.Redrives, func(r ui.RedriveRun) bool { return r.Source == s && !r.Running }); i >= 0 {
				runs = append(runs, st.Redrives[i])
			}
		}
		if len(runs) == len(sources) {
			return runs, nil
		}
	}
	return nil, fmt.Errorf("the queue events ended (%v) before the redrives of %v did; last: %s", sc.Err(), sources, last)
}
