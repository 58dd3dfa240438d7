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

// A circuit breaker that refuses original requests too: it opens when half
// of at least 4 outcomes in a second failed, and tries one request again
// after a cool-down of 100 ms.
func ExampleCircuitBreaker() {
	cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{
		FailureRatio: 0.5, MinCalls: 4, Window: time.Second, CoolDown: 100 * time.Millisecond,
		OnStateChange: func(from, to budget.CircuitState, _ time.Time) { fmt.Println(from, "->", to) },
	})
	now := time.Now()
	for range 4 {
		cb.Request(now)
		cb.Result(now, false) // the dependency failed
	}
	fmt.Println("original admitted:", cb.Request(now))
	later := now.Add(100 * time.Millisecond)
	fmt.Println("trial admitted:", cb.Request(later), "another:", cb.Request(later))
	cb.Result(later, true)
	// Output:
	// closed -> open
	// original admitted: false
	// open -> half-open
	// trial admitted: true another: false
	// half-open -> closed
}
