package brokertest

import (
	"context"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// Driver adapts a consumer built on a Processor to the suite: run
// delivers one message to the Processor it is given until the message is
// acknowledged, dead-lettered or left for redelivery, and returns the
// outcome (Outcome's, or a *drivertest.Kept with the attempts the message
// carries).
func Driver(name string, run func(ctx context.Context, pr *broker.Processor) error) drivertest.Driver {
	return drivertest.Driver{
		Name:      name,
		Keeps:     []retry.Reason{retry.Canceled},
		Uncounted: true, // an interrupted delivery goes back as it came
		Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
			pr := &broker.Processor{Policy: p, Source: "test",
				Handler: func(ctx context.Context, _ []byte) error { return attempt(ctx) }}
			return run(ctx, pr)
		},
	}
}

// Outcome is the suite's outcome of one Process result: done is false
// for a retry or a park (the message goes on); else err is nil for an
// ack, a *retry.Error for a dead letter and a *drivertest.Kept for a
// delivery left as it came.
func Outcome(o broker.Outcome) (err error, done bool) {
	switch {
	case o.Action == broker.Ack:
		return nil, true
	case o.Action == broker.Dead:
		if o.Reason == retry.UnknownError {
			return o.Err, true // as retry.Do returns it
		}
		return &retry.Error{Reason: o.Reason, Attempts: o.State.Attempts, Err: o.Err}, true
	case o.Interrupted:
		return &drivertest.Kept{Attempts: o.State.Attempts}, true
	}
	return nil, false
}
