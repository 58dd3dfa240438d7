package retrydriver_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/retrydriver"
)

// A driver of its own — here one that keeps the ledger between calls, as
// a queue row or message headers would — runs each attempt through a Step.
func ExampleStep() {
	p := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Second)}
	var ledger retry.Delivery // stored with the work between attempts
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for {
		s := retrydriver.Step{Policy: p, Delivery: ledger}
		if s.Begin(context.Background(), now) != retry.NoReason {
			break
		}
		err := retry.Retryable(errors.New("503")) // the attempt, run in s.Context()
		dec := s.End(err, now)
		ledger = s.Delivery
		fmt.Printf("attempt %d: retry=%v delay=%v reason=%v\n", ledger.Attempt, dec.Retry, dec.Delay, dec.Reason)
		if !dec.Retry {
			fmt.Println(s.Err())
			break
		}
		now = now.Add(dec.Delay) // the driver's wait
	}
	// Output:
	// attempt 1: retry=true delay=1s reason=none
	// attempt 2: retry=true delay=1s reason=none
	// attempt 3: retry=false delay=0s reason=exhausted
	// retry: gave up (exhausted) after 3 attempts: 503
}

// A consumer hands each message's handler a context carrying its
// Delivery; DeliveryContexts makes those contexts a block at a time.
func ExampleDeliveryContexts() {
	var contexts retrydriver.DeliveryContexts // one per driver, never copied
	h := retry.Handler(func(ctx context.Context, payload []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		fmt.Printf("%s: attempt %d of %d from %s\n", d.ID, d.Attempt, d.MaxAttempts, d.Source)
		return nil
	})
	for i, id := range []string{"m-1", "m-2"} {
		d := retry.Delivery{ID: id, Attempt: i + 1, MaxAttempts: 5, Source: "mybroker"}
		h(contexts.NewContext(context.Background(), &d), nil)
	}
	// Output:
	// m-1: attempt 1 of 5 from mybroker
	// m-2: attempt 2 of 5 from mybroker
}
