package budget_test

import (
	"fmt"
	"time"

	"github.com/staggerhq/stagger/budget"
)

// The default retry budget in integer credits: +1 per original request up to
// 200, a retry needs and spends 10.
func ExampleTokenBucket() {
	b := &budget.TokenBucket{Empty: true} // the zero value starts full (200)
	now := time.Now()
	for range 25 {
		b.Request(now)
	}
	fmt.Println(b.Credits(), b.Retry(now), b.Retry(now), b.Retry(now), b.Credits())
	// Output: 25 true true false 5
}

// The SRE book's per-client budget: retries at most 10% of requests.
func ExampleRatio() {
	r, _ := budget.NewRatio(0.1, time.Minute)
	now := time.Now()
	for range 30 {
		r.Request(now)
	}
	allowed := 0
	for r.Retry(now) {
		allowed++
	}
	fmt.Println(allowed)
	// Output: 3
}
