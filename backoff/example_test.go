package backoff_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/staggerhq/stagger/backoff"
)

// The durable queue's delay: the cap applies before the ratio.
func ExampleRetryDelay() {
	for _, attempt := range []int{1, 2, 3} {
		d, _ := backoff.RetryDelay(attempt, 100*time.Millisecond, 250*time.Millisecond, 0.5)
		fmt.Printf("after failure %d: %v\n", attempt, d)
	}
	_, err := backoff.RetryDelay(0, 100*time.Millisecond, 250*time.Millisecond, 0.5)
	fmt.Println(err)
	// Output:
	// after failure 1: 50ms
	// after failure 2: 100ms
	// after failure 3: 125ms
	// backoff: invalid argument: attempt must be >= 1, got 0
}

// The lab's two default strategies, expressed exactly: retry immediately (nothing
// before the first attempt, 20ms before each later one), and full jitter over
// 60·2^(n−2) ms before attempt n, drawn in whole milliseconds.
func ExampleExponential() {
	immediate := backoff.Constant(20 * time.Millisecond)
	jittered := backoff.Exponential{Base: 60 * time.Millisecond, Jitter: backoff.Full, Unit: time.Millisecond}

	src := rand.NewPCG(1, 2) // seeded: reproducible
	for attempt := 2; attempt <= 6; attempt++ {
		failure := attempt - 1
		fmt.Printf("attempt %d: immediate waits %v, jittered waits %v of up to %v\n",
			attempt, immediate.Delay(failure, 0, src), jittered.Delay(failure, 0, src), jittered.Window(failure))
	}
	// Output:
	// attempt 2: immediate waits 20ms, jittered waits 46ms of up to 60ms
	// attempt 3: immediate waits 20ms, jittered waits 74ms of up to 120ms
	// attempt 4: immediate waits 20ms, jittered waits 189ms of up to 240ms
	// attempt 5: immediate waits 20ms, jittered waits 383ms of up to 480ms
	// attempt 6: immediate waits 20ms, jittered waits 225ms of up to 960ms
}

// Decorrelated jitter keeps its state (the previous wait) with the caller,
// so one schedule value serves every goroutine.
func ExampleDecorrelated() {
	s := backoff.Decorrelated{Base: 100 * time.Millisecond, Cap: 2 * time.Second, Unit: time.Millisecond}
	src := rand.NewPCG(7, 7)
	var prev time.Duration
	for n := 1; n <= 4; n++ {
		prev = s.Delay(n, prev, src)
		fmt.Println(prev >= 100*time.Millisecond && prev <= 2*time.Second)
	}
	// Output:
	// true
	// true
	// true
	// true
}
