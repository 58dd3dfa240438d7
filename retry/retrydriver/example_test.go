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
