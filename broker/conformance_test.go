package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/broker/brokertest"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// TestDriverConformance: the Processor, driven as an adapter drives it
// (a retry parked for its delay, then delivered again with its state; a
// consumer whose context ended takes no more deliveries), makes the same
// calls as retry.Do and ends as it ends: acked, dead-lettered with the
// give-up's reason (a refusal included), or left for redelivery when the
// consumer's context ends (Keeps Canceled).
func TestDriverConformance(t *testing.T) {
	drivertest.Run(t, brokertest.Driver("broker.Processor", func(ctx context.Context, pr *broker.Processor) error {
		var st broker.State
		for {
			if ctx.Err() != nil { // the consumer stopped: the message waits for redelivery
				return &drivertest.Kept{Attempts: st.Attempts}
			}
			o := pr.Process(ctx, "m1", nil, st)
			if err, done := brokertest.Outcome(o); done {
				return err
			}
			st = o.State
			time.Sleep(o.Delay) // the broker holds it
		}
	}))
}
