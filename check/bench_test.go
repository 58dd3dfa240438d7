package check_test

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/check"
	"github.com/staggerhq/stagger/retry"
)

// BenchmarkVirtual100k is 100,000 open-loop callers (Poisson, 166.7/s)
// over a 10-minute timeline with a 1-minute outage, under the nil Policy
// with a token bucket: one op is one virtual run.
func BenchmarkVirtual100k(b *testing.B) {
	e := check.Experiment{
		Policies: []check.Policy{check.RetryFunc("budget", func() *retry.Policy {
			return &retry.Policy{Budget: &budget.TokenBucket{}}
		})},
		Callers:    check.OpenLoop(100_000.0/600, true),
		Dependency: check.Dependency{Latency: 20 * time.Millisecond, LatencyExp: 10 * time.Millisecond},
		Faults:     []string{"down 1m at 2m"},
		Duration:   10 * time.Minute,
		Seed:       1,
	}
	b.ReportAllocs()
	for b.Loop() {
		res, err := check.Run(context.Background(), e)
		if err != nil {
			b.Fatal(err)
		}
		if n := res.Policies[0].Requests; n < 99_000 || n > 101_000 {
			b.Fatalf("%d requests, want about 100,000", n)
		}
	}
}

// BenchmarkGuard is the guard test's experiment: three policies × one
// outage (30 s of 100 req/s), one op per virtual run of all three.
func BenchmarkGuard(b *testing.B) {
	e := outage(1, check.Retry("nil", nil),
		check.RetryFunc("budget", func() *retry.Policy { return &retry.Policy{Budget: &budget.TokenBucket{}} }),
		check.HedgedFunc("hedge", func() (*retry.Hedge, *retry.Policy) { return &retry.Hedge{Delay: 30 * time.Millisecond}, nil }))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := check.Run(context.Background(), e); err != nil {
			b.Fatal(err)
		}
	}
}
