package broker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/staggerhq/stagger/broker"
	"github.com/staggerhq/stagger/retry"
)

// A Processor turns one delivery into the broker's next step. Here the
// default cascade: attempt n waits tier n, then the DLQ.
func ExampleProcessor() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	p := &broker.Processor{
		Handler: func(ctx context.Context, _ []byte) error { return retry.Retryable(errors.New("payments: 503")) },
		Policy:  broker.CascadePolicy(broker.DefaultTiers),
		Source:  "example",
		Now:     func() time.Time { return now },
	}
	var st broker.State
	for {
		o := p.Process(context.Background(), "order-1", nil, st)
		if o.Action != broker.Retry {
			fmt.Printf("attempt %d: %s (%s)\n", o.State.Attempts, o.Action, o.State.Reason)
			return
		}
		tier := broker.DefaultTiers.For(o.Delay)
		fmt.Printf("attempt %d: %s after %v → tier %s\n", o.State.Attempts, o.Action, o.Delay, broker.DefaultTiers.Name(tier))
		st, now = o.State, o.State.Due
	}
	// Output:
	// attempt 1: retry after 10s → tier 10s
	// attempt 2: retry after 1m0s → tier 1m
	// attempt 3: retry after 10m0s → tier 10m
	// attempt 4: dead (exhausted)
}

// An After(d) error raises the wait; the message goes to the first tier at
// least that long, so the broker never delivers it early.
func ExampleTiers_For() {
	t := broker.DefaultTiers
	for _, d := range []time.Duration{3 * time.Second, 45 * time.Second, 2 * time.Hour} {
		fmt.Printf("%v → %s\n", d, t.Name(t.For(d)))
	}
	// Output:
	// 3s → 10s
	// 45s → 1m
	// 2h0m0s → 10m
}
