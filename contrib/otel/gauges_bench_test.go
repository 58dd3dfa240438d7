package staggerotel_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	staggerotel "github.com/staggerhq/stagger/contrib/otel"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

// BenchmarkRetryPath is the cost per attempt of observing a policy: a
// call of retry.Do that succeeds at once, with a budget, a circuit
// breaker and a bulkhead — bare, with the gauges registered (they are
// read at collection, not here), and with the Hooks' counters too.
func BenchmarkRetryPath(b *testing.B) {
	for _, c := range []struct {
		name          string
		gauges, hooks bool
	}{{"bare", false, false}, {"gauges", true, false}, {"hooks+gauges", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer mp.Shutdown(context.Background())
			m, _ := staggerotel.New(mp)
			meter := mp.Meter(staggerotel.ScopeName)
			tb := &budget.TokenBucket{}
			cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{})
			bh, _ := limit.NewBulkhead(64)
			p := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0), Budget: cb.Guard(tb), Limiter: bh}
			if c.gauges {
				staggerotel.ObserveBudget(meter, "bench", tb)
				staggerotel.ObserveBreaker(meter, "bench", cb)
				staggerotel.ObserveLimiter(meter, "bench", bh)
			}
			if c.hooks {
				p.Hooks = m.Hooks("bench")
			}
			ctx := context.Background()
			op := func(context.Context) error { return nil }
			b.ReportAllocs()
			for b.Loop() {
				retry.Do(ctx, p, op)
			}
		})
	}
}

// BenchmarkHooksPerAttempt is what the Hooks add to an attempt that
// succeeds (OnAttempt and OnSuccess), the common case; the gauges add
// nothing to it (BenchmarkRetryPath).
func BenchmarkHooksPerAttempt(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, _ := staggerotel.New(mp)
	h := m.Hooks("bench")
	e := retry.Event{Attempt: 1}
	b.ReportAllocs()
	for b.Loop() {
		h.OnAttempt(e)
		h.OnSuccess(e)
	}
}
