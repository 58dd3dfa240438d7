package retry

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
)

func BenchmarkDoSuccess(b *testing.B) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		Do(ctx, nil, fn)
	}
}

func BenchmarkDoThreeAttempts(b *testing.B) {
	ctx := context.Background()
	p := &Policy{Schedule: backoff.Constant(0)}
	calls := 0
	fn := func(context.Context) error {
		calls++
		if calls%3 != 0 {
			return errFlaky
		}
		return nil
	}
	b.ReportAllocs()
	for b.Loop() {
		Do(ctx, p, fn)
	}
}

func BenchmarkDoSuccessWithBudget(b *testing.B) {
	ctx := context.Background()
	p := &Policy{Budget: &budget.TokenBucket{}, Limiter: mustBulkhead(1 << 20)}
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			Do(ctx, p, fn)
		}
	})
}

func BenchmarkDecide(b *testing.B) {
	p := &Policy{MaxAttempts: 5, Schedule: backoff.Exponential{Base: time.Millisecond, Cap: time.Second, Jitter: backoff.Full}}
	now := time.Now()
	deadline := now.Add(time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(2, errFlaky, now, deadline, 0)
	}
}
