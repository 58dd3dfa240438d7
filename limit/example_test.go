package limit_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/staggerhq/stagger/limit"
)

// A bulkhead per dependency: a full one answers at once instead of queueing.
func ExampleBulkhead() {
	payments, _ := limit.NewBulkhead(2)
	payments.TryAcquire()
	payments.TryAcquire()
	err := limit.Do(payments, func() error { return nil })
	fmt.Println(errors.Is(err, limit.ErrLimited), payments.InFlight())
	// Output: true 2
}

// A rate limit of 2 starts per second with bursts of 3, on an injected
// clock: the burst goes at once, then one start every 500 ms.
func ExampleRate() {
	now := time.Unix(0, 0)
	r, _ := limit.NewRate(2, 3, func() time.Time { return now })
	fmt.Println(r.TryAcquire(), r.TryAcquire(), r.TryAcquire(), r.TryAcquire(), r.Wait())
	now = now.Add(500 * time.Millisecond)
	fmt.Println(r.TryAcquire(), r.TryAcquire())
	// Output:
	// true true true false 500ms
	// true false
}

// A bulkhead and a rate limit on one policy: an attempt needs a slot of
// each, and the rate's refusal gives the bulkhead's slot back.
func ExampleJoin() {
	bulkhead, _ := limit.NewBulkhead(10)
	now := time.Unix(0, 0)                                            // an injected clock, standing still
	rate, _ := limit.NewRate(100, 2, func() time.Time { return now }) // 100 starts per second, bursts of 2
	l := limit.Join(bulkhead, rate)                                   // for retry.Policy.Limiter
	fmt.Println(l.TryAcquire(), l.TryAcquire(), l.TryAcquire(), bulkhead.InFlight())
	// Output: true true false 2
}
