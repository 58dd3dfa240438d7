package bench

// Side-by-side benchmarks of hedging: stagger's retry.Hedge against
// failsafe-go's hedgepolicy. Each is configured once, outside the timed
// loop, as its documentation shows.
//
//	BenchmarkHedgeSuccess/<lib>          the first attempt succeeds before the delay (1 s): no hedge
//	BenchmarkHedgeSuccessQuantile/<lib>  the same with a learned 0.95 quantile delay, RunParallel
//	BenchmarkHedgeHedged/<lib>           every call hedges (delay 1 ms): the first attempt runs
//	                                     until it is canceled, the hedge succeeds at once
//
// stagger's Do returns once the canceled loser has returned; failsafe-go
// returns without waiting for it. The hedged benchmark's time is mostly the
// delay and the runtime's timer wake-up: with a delay under a millisecond
// that wake-up depends on whether another goroutine keeps a processor
// spinning (failsafe-go starts its first attempt on a goroutine, stagger
// runs it on the caller's), so it measures the scheduler, not the hedger.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/staggerhq/stagger/retry"
)

func ok() error { return nil }

func BenchmarkHedgeSuccess(b *testing.B) {
	ctx := context.Background()
	b.Run("stagger", func(b *testing.B) {
		h := &retry.Hedge{Delay: time.Second}
		p := &retry.Policy{MaxAttempts: 2}
		fn := func(context.Context) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			sink = h.Do(ctx, p, fn)
		}
	})
	b.Run("failsafe", func(b *testing.B) {
		exec := failsafe.With[any](hedgepolicy.NewWithDelay[any](time.Second))
		b.ReportAllocs()
		for b.Loop() {
			sink = exec.WithContext(ctx).Run(ok)
		}
	})
}

func BenchmarkHedgeSuccessQuantile(b *testing.B) {
	ctx := context.Background()
	b.Run("stagger", func(b *testing.B) {
		h := &retry.Hedge{Delay: time.Second, Quantile: 0.95}
		p := &retry.Policy{MaxAttempts: 2}
		fn := func(context.Context) error { return nil }
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = h.Do(ctx, p, fn)
			}
		})
	})
	b.Run("failsafe", func(b *testing.B) {
		exec := failsafe.With[any](hedgepolicy.NewWithDelayQuantile[any](0.95, 1000, 100))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = exec.WithContext(ctx).Run(ok)
			}
		})
	})
}

func BenchmarkHedgeHedged(b *testing.B) {
	ctx := context.Background()
	b.Run("stagger", func(b *testing.B) {
		h := &retry.Hedge{Delay: time.Millisecond}
		p := &retry.Policy{MaxAttempts: 2}
		b.ReportAllocs()
		for b.Loop() {
			var n atomic.Int32
			sink = h.Do(ctx, p, func(ctx context.Context) error {
				if n.Add(1) == 1 {
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			})
		}
	})
	b.Run("failsafe", func(b *testing.B) {
		exec := failsafe.With[any](hedgepolicy.NewWithDelay[any](time.Millisecond))
		b.ReportAllocs()
		for b.Loop() {
			sink = exec.WithContext(ctx).RunWithExecution(func(e failsafe.Execution[any]) error {
				if !e.IsHedge() {
					<-e.Canceled()
					return context.Canceled
				}
				return nil
			})
		}
	})
}
