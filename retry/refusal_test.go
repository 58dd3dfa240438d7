package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
)

// TestRefusalReasons: a refusal by every shipped budget and breaker is a
// visible outcome — OnGiveUp fires with a reason of its own (Budget for a
// spent budget or a throttle, CircuitOpen for a breaker) and the error
// matches its sentinel — whether it refuses a retry (Decide) or an
// original (Begin), and whether the breaker stands alone or guards a
// budget.
func TestRefusalReasons(t *testing.T) {
	now := time.Unix(1000, 0)
	grpcDrained := func() budget.Budget {
		g, _ := budget.NewGRPC(2, 0.1)
		g.Result(now, false)
		return g
	}
	ratio := func() budget.Budget { r, _ := budget.NewRatio(0.1, time.Minute); return r }
	adaptiveRejecting := func() budget.Budget {
		// Every attempt the dependency never accepted: with a source that
		// always draws 0, the throttle refuses once its probability is > 0.
		a, _ := budget.NewAdaptive(1, time.Minute, zeroSource{})
		for range 10 {
			a.Request(now)
		}
		return a
	}
	breakerOpen := func() budget.Budget {
		b, _ := budget.NewBreaker(0.5, 1, time.Minute)
		return b
	}
	circuitOpen := func() budget.Budget {
		cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{MinCalls: 1, CoolDown: time.Hour})
		cb.Result(now, false)
		return cb
	}
	circuitLater := func() budget.Budget {
		cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{MinCalls: 1, CoolDown: time.Hour})
		return cb.Guard(&budget.TokenBucket{})
	}
	for _, c := range []struct {
		name     string
		budget   func() budget.Budget
		reason   Reason
		attempts int // made before the give-up
	}{
		{"token bucket, retry", func() budget.Budget { return &budget.TokenBucket{Empty: true} }, Budget, 1},
		{"gRPC A6, retry", grpcDrained, Budget, 1},
		{"ratio, retry", ratio, Budget, 1},
		{"adaptive, original", adaptiveRejecting, Budget, 0},
		{"breaker, retry", breakerOpen, CircuitOpen, 1},
		{"circuit breaker, original", circuitOpen, CircuitOpen, 0},
		{"guarded bucket, retry", circuitLater, CircuitOpen, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var gave []Event
			p := &Policy{MaxAttempts: 5, Schedule: backoff.Constant(0), Budget: c.budget(),
				Clock: fixedClock{now}, Hooks: Hooks{OnGiveUp: func(e Event) { gave = append(gave, e) }}}
			calls := 0
			err := Do(context.Background(), p, func(context.Context) error { calls++; return errBoom2 })
			var ge *Error
			if !errors.As(err, &ge) || ge.Reason != c.reason || !errors.Is(err, c.reason.Err()) {
				t.Fatalf("err %v, want a give-up with reason %v", err, c.reason)
			}
			if calls != c.attempts || len(gave) != 1 || gave[0].Reason != c.reason || gave[0].Attempt != c.attempts {
				t.Fatalf("%d calls, OnGiveUp %+v; want one give-up (%v) after %d attempts", calls, gave, c.reason, c.attempts)
			}
		})
	}
}

type zeroSource struct{}

func (zeroSource) Uint64() uint64 { return 0 }

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }
func (c fixedClock) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- c.t
	return ch
}
