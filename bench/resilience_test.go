package bench

// Side-by-side benchmarks of the circuit breaker and the rate limiter
// against failsafe-go's, on the success path (the circuit is closed, the
// rate is never reached), each configured once outside the timed loop:
//
//	BenchmarkCircuitBreaker/<lib>       the primitive: admit, then record a success
//	BenchmarkCircuitBreaker/stagger-now the same, given a time the driver already read
//	BenchmarkCircuitBreaker/<lib>-run   one call of a succeeding operation through the library's executor
//	BenchmarkRateLimiter/<lib>          the primitive: take a permit
//	BenchmarkRateLimiter/stagger-at     the same, given a time the driver already read
//	BenchmarkRateLimiter/<lib>-run      one call through the library's executor
//	.../<name>-parallel                 the primitive from every core at once (RunParallel)
//
// Both breakers judge a failure rate over a 10 s rolling window with a
// 20-call minimum and a 5 s cool-down; stagger reads the clock once per
// call (time.Now, passed as now), as retry.Do does; failsafe-go reads it
// inside. On this project's VM a clock read costs about 55 ns, so the
// rows that read the clock are mostly the clock; the -now / -at rows are
// the cost of the breaker or the limit itself, which is what a driver
// that already holds now (retry.Do, the simulator) adds. Both rate limiters are the smooth kind (GCRA / a reserved next
// slot) at a rate no benchmark reaches.

import (
	"context"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/ratelimiter"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

func staggerBreaker(tb testing.TB) *budget.CircuitBreaker {
	cb, err := budget.NewCircuitBreaker(budget.CircuitConfig{FailureRatio: 0.5, MinCalls: 20,
		Window: 10 * time.Second, CoolDown: 5 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	return cb
}

func failsafeBreaker() circuitbreaker.CircuitBreaker[any] {
	return circuitbreaker.NewBuilder[any]().
		WithFailureRateThreshold(0.5, 20, 10*time.Second).
		WithDelay(5 * time.Second).
		Build()
}

// unreached is a rate no benchmark reaches: one start per nanosecond.
const unreached = 1_000_000_000

func staggerRate(tb testing.TB) *limit.Rate {
	r, err := limit.NewRate(unreached, 1<<20, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func failsafeRate() ratelimiter.RateLimiter[any] {
	return ratelimiter.NewSmooth[any](unreached, time.Second)
}

var okOp = func() error { return nil }

// doStagger times one succeeding call through retry.Do with p.
func doStagger(b *testing.B, p *retry.Policy) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sink = retry.Do(ctx, p, func(context.Context) error { return okOp() })
	}
	if sink != nil {
		b.Fatal(sink)
	}
}

// doFailsafe times one succeeding call through a failsafe-go executor.
func doFailsafe(b *testing.B, exec failsafe.Executor[any]) {
	b.ReportAllocs()
	for b.Loop() {
		sink = exec.Run(okOp)
	}
	if sink != nil {
		b.Fatal(sink)
	}
}

func BenchmarkCircuitBreaker(b *testing.B) {
	b.Run("stagger", func(b *testing.B) {
		cb := staggerBreaker(b)
		b.ReportAllocs()
		for b.Loop() {
			now := time.Now()
			if !cb.Request(now) {
				b.Fatal("refused")
			}
			cb.Result(now, true)
		}
	})
	b.Run("stagger-now", func(b *testing.B) {
		cb := staggerBreaker(b)
		now := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			if !cb.Request(now) {
				b.Fatal("refused")
			}
			cb.Result(now, true)
		}
	})
	b.Run("failsafe", func(b *testing.B) {
		cb := failsafeBreaker()
		b.ReportAllocs()
		for b.Loop() {
			if !cb.TryAcquirePermit() {
				b.Fatal("refused")
			}
			cb.RecordSuccess()
		}
	})
	b.Run("stagger-run", func(b *testing.B) {
		doStagger(b, &retry.Policy{MaxAttempts: 1, Schedule: backoff.Constant(0), Budget: staggerBreaker(b)})
	})
	b.Run("failsafe-run", func(b *testing.B) { doFailsafe(b, failsafe.With[any](failsafeBreaker())) })
	b.Run("stagger-parallel", func(b *testing.B) {
		cb := staggerBreaker(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				now := time.Now()
				cb.Request(now)
				cb.Result(now, true)
			}
		})
	})
	b.Run("failsafe-parallel", func(b *testing.B) {
		cb := failsafeBreaker()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				cb.TryAcquirePermit()
				cb.RecordSuccess()
			}
		})
	})
}

func BenchmarkRateLimiter(b *testing.B) {
	b.Run("stagger", func(b *testing.B) {
		r := staggerRate(b)
		b.ReportAllocs()
		for b.Loop() {
			if !r.TryAcquire() {
				b.Fatal("refused")
			}
		}
	})
	b.Run("stagger-at", func(b *testing.B) {
		r := staggerRate(b)
		now := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Nanosecond) // the limit's pace: never reached
			if !r.TryAcquireAt(now) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("failsafe", func(b *testing.B) {
		r := failsafeRate()
		b.ReportAllocs()
		for b.Loop() {
			if !r.TryAcquirePermit() {
				b.Fatal("refused")
			}
		}
	})
	b.Run("stagger-run", func(b *testing.B) {
		doStagger(b, &retry.Policy{MaxAttempts: 1, Schedule: backoff.Constant(0), Limiter: staggerRate(b)})
	})
	b.Run("failsafe-run", func(b *testing.B) { doFailsafe(b, failsafe.With[any](failsafeRate())) })
	b.Run("stagger-parallel", func(b *testing.B) {
		r := staggerRate(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.TryAcquire()
			}
		})
	})
	b.Run("failsafe-parallel", func(b *testing.B) {
		r := failsafeRate()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.TryAcquirePermit()
			}
		})
	})
}

// TestBreakersBehave checks both breaker configurations really open: 20
// failures in the window refuse the next call, in stagger's case an
// original request too.
func TestBreakersBehave(t *testing.T) {
	s, f := staggerBreaker(t), failsafeBreaker()
	now := time.Now()
	for range 20 {
		s.Request(now)
		s.Result(now, false)
		f.TryAcquirePermit()
		f.RecordFailure()
	}
	if s.Request(now) || f.TryAcquirePermit() {
		t.Fatalf("after 20 failures: stagger admits %v, failsafe admits %v; want both open", s.State() != budget.CircuitOpen, f.IsClosed())
	}
}

// TestRateLimitersBehave checks both limiter kinds refuse at their rate
// (one per hour here, a burst of 1 for the smooth kind).
func TestRateLimitersBehave(t *testing.T) {
	s, err := limit.NewRate(1.0/3600, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := ratelimiter.NewSmooth[any](1, time.Hour)
	if !s.TryAcquire() || s.TryAcquire() || !f.TryAcquirePermit() || f.TryAcquirePermit() {
		t.Fatal("want one permit, then a refusal, from each")
	}
}
