package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// TestDriverConformance: the Processor, driven as an adapter drives it
// (a retry parked for its delay, then delivered again with its state),
// makes the same calls as retry.Do.
func TestDriverConformance(t *testing.T) {
	drivertest.Run(t, drivertest.Driver{
		Name:         "broker.Processor",
		NoWaitCancel: true,
		Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) {
			pr := &broker.Processor{Policy: p, Source: "test",
				Handler: func(ctx context.Context, _ []byte) error { return attempt(ctx) }}
			var st broker.State
			for {
				o := pr.Process(ctx, "m1", nil, st)
				switch o.Action {
				case broker.Ack, broker.Dead:
					return
				case broker.Park:
					if o.Interrupted {
						return
					}
				}
				st = o.State
				time.Sleep(o.Delay) // the broker holds it
			}
		},
	})
}
