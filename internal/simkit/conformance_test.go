package simkit

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// TestDriverConformance: the simulator's driver, stepped once per event as
// the models step it (here on the bubble's virtual clock), makes the same
// calls as retry.Do. The simulator has no contexts: its clients model
// timeouts and cancellation themselves, so the context cases are left out.
func TestDriverConformance(t *testing.T) {
	drivertest.Run(t, drivertest.Driver{
		Name:         "sim driver",
		NoWaitCancel: true,
		Simulated:    true,
		Run: func(_ context.Context, p *retry.Policy, attempt func(context.Context) error) {
			d := driver{p}
			start := time.Now()
			var deadline time.Time
			if p.Timeout > 0 {
				deadline = start.Add(p.Timeout)
			}
			if d.begin(start) != retry.NoReason {
				return
			}
			var prev time.Duration
			for n := 1; ; n++ {
				err := attempt(context.Background())
				dec := d.end(time.Now(), n, err, deadline, prev)
				if err == nil || !dec.Retry {
					return
				}
				time.Sleep(dec.Delay)
				if d.againN(n+1) != retry.NoReason {
					return
				}
				prev = dec.Delay
			}
		},
	})
}
