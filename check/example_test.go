package check_test

import (
	"context"
	"fmt"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/check"
	"github.com/staggerhq/stagger/retry"
)

// A user's policy against the lab's outage, next to one that retries at
// once: what the dependency receives. In a test, res.Check(t, …) fails
// the test instead.
func Example() {
	mine := &retry.Policy{MaxAttempts: 5, Schedule: backoff.Exponential{Base: 100 * time.Millisecond, Cap: 2 * time.Second, Jitter: backoff.Full}}
	res, err := check.Run(context.Background(), check.LabOutage(
		check.Retry("mine", mine),
		check.Retry("at once", &retry.Policy{MaxAttempts: 1000, Schedule: backoff.Constant(20 * time.Millisecond)}),
	))
	if err != nil {
		panic(err)
	}
	vs, _ := res.Evaluate(check.MaxAmplification(5), check.MaxPeakPerWindow(10))
	for _, v := range vs {
		fmt.Println(v.OK, v.Policy, v.Measure)
	}
	// Output:
	// true mine amplification
	// true mine peak per window
	// false at once amplification
	// false at once peak per window
}

// An open loop with a budget, a 2 s outage, and the measures a CI gate
// reads.
func ExampleRun_openLoop() {
	res, err := check.Run(context.Background(), check.Experiment{
		Policies: []check.Policy{check.RetryFunc("budget", func() *retry.Policy {
			return &retry.Policy{Budget: &budget.TokenBucket{}}
		})},
		Callers:    check.OpenLoop(50, true),
		Dependency: check.Dependency{Latency: 20 * time.Millisecond},
		Faults:     []string{"down 2s at 2s"},
		Duration:   10 * time.Second,
		Seed:       1,
	})
	if err != nil {
		panic(err)
	}
	p := res.Policies[0]
	fmt.Println(p.Amplification < 1.2, p.Recovered, p.Metastable, p.GaveUp["budget"] > 0)
	// Output: true true false true
}

// A change to a policy, compared with the policy on the main branch: no
// more than 1.2 times its load.
func ExampleAtMost() {
	onMain := &retry.Policy{MaxAttempts: 3}
	changed := &retry.Policy{MaxAttempts: 6, Schedule: backoff.Constant(50 * time.Millisecond)}
	res, err := check.Run(context.Background(), check.LabOutage(check.Retry("main", onMain), check.Retry("change", changed)))
	if err != nil {
		panic(err)
	}
	vs, _ := res.Evaluate(check.AtMost(1.2, "main"))
	fmt.Println(vs[1])
	// Output: change: load vs main 2.00× attempts (24 vs 12), 1.50× peak (12 vs 8) exceeds 1.2× main (window [400µs, 200.4ms))
}
