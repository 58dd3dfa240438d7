package bench

// Side-by-side benchmarks of the in-process retry loop against Go peers.
// Every library is configured once, outside the timed loop, the way its
// documentation shows; the operation's errors are built once, so the
// numbers measure the retry machinery, not error construction.
//
//	BenchmarkSuccess/<lib>        the operation succeeds on the first try
//	BenchmarkThreeAttempts/<lib>  it fails twice (zero delay), then succeeds
//	BenchmarkBudget/stagger       default TokenBucket, RunParallel (see below)

import (
	"context"
	"errors"
	"testing"
	"time"

	avast "github.com/avast/retry-go/v4"
	avast5 "github.com/avast/retry-go/v5"
	cenkalti "github.com/cenkalti/backoff/v5"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	sethvargo "github.com/sethvargo/go-retry"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/retry"
)

var (
	errTransient     = errors.New("transient")
	staggerRetryable = retry.Retryable(errTransient)
	sethvargoRetry   = sethvargo.RetryableError(errTransient)
	sink             error
)

type peer struct {
	name string
	// run performs one logical call of fn, retrying per the library.
	run func(ctx context.Context, fn func() error) error
	// retryable converts the operation's transient error to the library's.
	retryable error
}

func peers() []peer {
	staggerPolicy := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0)}

	cenkaltiOpts := []cenkalti.RetryOption{cenkalti.WithBackOff(&cenkalti.ZeroBackOff{}), cenkalti.WithMaxTries(3)}

	avastOpts := []avast.Option{
		avast.Attempts(3), avast.Delay(0), avast.MaxJitter(0),
		avast.DelayType(avast.FixedDelay), avast.LastErrorOnly(true),
	}

	// v5 builds a reusable Retrier once; the benchmark context is
	// Background, so one Retrier (whose default context it is) serves.
	avast5Retrier := avast5.New(avast5.Attempts(3), avast5.Delay(0), avast5.MaxJitter(0),
		avast5.DelayType(avast5.FixedDelay), avast5.LastErrorOnly(true))

	failsafeExec := failsafe.With[any](retrypolicy.NewBuilder[any]().WithMaxAttempts(3).WithDelay(0).Build())

	return []peer{
		{"stagger", func(ctx context.Context, fn func() error) error {
			return retry.Do(ctx, staggerPolicy, func(context.Context) error { return fn() })
		}, staggerRetryable},
		{"cenkalti", func(ctx context.Context, fn func() error) error {
			_, err := cenkalti.Retry(ctx, func() (struct{}, error) { return struct{}{}, fn() }, cenkaltiOpts...)
			return err
		}, errTransient},
		{"avast", func(ctx context.Context, fn func() error) error {
			return avast.Do(fn, append(avastOpts, avast.Context(ctx))...)
		}, errTransient},
		{"avast5", func(ctx context.Context, fn func() error) error {
			return avast5Retrier.Do(fn)
		}, errTransient},
		{"sethvargo", func(ctx context.Context, fn func() error) error {
			// go-retry backoffs are stateful: one per call, as documented.
			b := sethvargo.WithMaxRetries(2, sethvargo.BackoffFunc(func() (time.Duration, bool) { return 0, false }))
			return sethvargo.Do(ctx, b, func(context.Context) error { return fn() })
		}, sethvargoRetry},
		{"failsafe", func(ctx context.Context, fn func() error) error {
			return failsafeExec.WithContext(ctx).Run(fn)
		}, errTransient},
	}
}

func BenchmarkSuccess(b *testing.B) {
	ctx := context.Background()
	ok := func() error { return nil }
	for _, p := range peers() {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = p.run(ctx, ok)
			}
			if sink != nil {
				b.Fatal(sink)
			}
		})
	}
}

func BenchmarkThreeAttempts(b *testing.B) {
	ctx := context.Background()
	for _, p := range peers() {
		b.Run(p.name, func(b *testing.B) {
			calls := 0
			fn := func() error {
				calls++
				if calls < 3 {
					return p.retryable
				}
				return nil
			}
			b.ReportAllocs()
			for b.Loop() {
				calls = 0
				sink = p.run(ctx, fn)
			}
			if sink != nil || calls != 3 {
				b.Fatalf("%s: err %v after %d calls", p.name, sink, calls)
			}
		})
	}
}

// BenchmarkBudget: the default token bucket shared by every goroutine.
//
//	stagger           what every request pays on a healthy service: an
//	                  original request against a full reserve (a read of
//	                  one atomic word)
//	stagger-incident  a 10% failure rate: every tenth op also asks for a
//	                  retry, so the reserve keeps refilling and every op
//	                  writes the shared word (cache-line contention)
func BenchmarkBudget(b *testing.B) {
	b.Run("stagger", func(b *testing.B) {
		tb := &budget.TokenBucket{Initial: budget.DefaultMax}
		now := time.Now()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tb.Request(now)
			}
		})
	})
	b.Run("stagger-incident", func(b *testing.B) {
		tb := &budget.TokenBucket{Initial: budget.DefaultMax}
		now := time.Now()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				tb.Request(now)
				if i++; i == 10 {
					i = 0
					tb.Retry(now)
				}
			}
		})
	})
}

// TestPeersBehave checks every configuration really retries: three attempts
// for a twice-failing operation, one for a succeeding one.
func TestPeersBehave(t *testing.T) {
	for _, p := range peers() {
		calls := 0
		err := p.run(context.Background(), func() error {
			calls++
			if calls < 3 {
				return p.retryable
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Errorf("%s: err %v after %d calls, want success after 3", p.name, err, calls)
		}
	}
}
