package retry_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
)

var errUnavailable = errors.New("503 service unavailable")

// A call that fails twice with a transient error, then succeeds.
func ExampleDo() {
	policy := &retry.Policy{
		MaxAttempts: 4, // attempts, not retries
		Schedule:    backoff.Exponential{Base: time.Millisecond, Cap: 10 * time.Millisecond, Jitter: backoff.Full},
		Hooks: retry.Hooks{OnRetry: func(e retry.Event) {
			fmt.Printf("attempt %d failed: %v; retrying\n", e.Attempt, e.Err)
		}},
	}
	calls := 0
	err := retry.Do(context.Background(), policy, func(ctx context.Context) error {
		calls++
		if calls < 3 {
			return retry.Retryable(errUnavailable)
		}
		return nil
	})
	fmt.Println("err:", err, "after", calls, "attempts")
	// Output:
	// attempt 1 failed: 503 service unavailable; retrying
	// attempt 2 failed: 503 service unavailable; retrying
	// err: <nil> after 3 attempts
}

// DoValue returns the value of the successful attempt.
func ExampleDoValue() {
	calls := 0
	n, err := retry.DoValue(context.Background(), &retry.Policy{Schedule: backoff.Constant(0)},
		func(ctx context.Context) (int, error) {
			calls++
			if calls == 1 {
				return 0, retry.Retryable(errUnavailable)
			}
			return 42, nil
		})
	fmt.Println(n, err)
	// Output: 42 <nil>
}

// Give-ups say why: the error matches the reason's sentinel and the last
// attempt's error. Errors of no class come back unchanged, unretried.
func ExampleDo_giveUp() {
	p := &retry.Policy{MaxAttempts: 2, Schedule: backoff.Constant(0)}
	err := retry.Do(context.Background(), p, func(context.Context) error {
		return retry.Retryable(errUnavailable)
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, retry.ErrExhausted), errors.Is(err, errUnavailable))

	err = retry.Do(context.Background(), p, func(context.Context) error {
		return retry.Permanent(errors.New("invalid card number"))
	})
	fmt.Println(err, errors.Is(err, retry.ErrPermanent))

	unknown := errors.New("something odd")
	err = retry.Do(context.Background(), p, func(context.Context) error { return unknown })
	fmt.Println(err == unknown)
	// Output:
	// retry: gave up (exhausted) after 2 attempts: 503 service unavailable
	// true true
	// retry: gave up (permanent) after 1 attempt: invalid card number true
	// true
}

// A retry budget shared by every request to one dependency: ten original
// requests earn one retry. (The zero TokenBucket starts full, as a healthy
// dependency's would; this one starts empty to show the earning.)
func ExamplePolicy_budget() {
	credits := &budget.TokenBucket{Empty: true} // +1 per original (cap 200), a retry costs 10
	p := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(0), Budget: credits}
	for range 10 {
		retry.Do(context.Background(), p, func(context.Context) error { return nil })
	}
	calls := 0
	err := retry.Do(context.Background(), p, func(context.Context) error {
		calls++
		return retry.Retryable(errUnavailable)
	})
	fmt.Println(calls, "attempts;", errors.Is(err, retry.ErrBudget))
	// Output: 2 attempts; true
}

// A bulkhead caps attempts in flight to one dependency and answers at once
// when it is full; the slot is released before any backoff wait.
func ExamplePolicy_bulkhead() {
	slots, _ := limit.NewBulkhead(1)
	p := &retry.Policy{Limiter: slots}
	held := slots.TryAcquire() // someone else holds the only slot
	err := retry.Do(context.Background(), p, func(context.Context) error { return nil })
	fmt.Println(held, errors.Is(err, retry.ErrLimited))
	slots.Release(true)
	err = retry.Do(context.Background(), p, func(context.Context) error { return nil })
	fmt.Println(err)
	// Output:
	// true true
	// <nil>
}

// Decide is the decision every stagger driver shares; it waits for nothing
// and reads no clock.
func ExamplePolicy_Decide() {
	p := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(100 * time.Millisecond)}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	deadline := now.Add(100 * time.Millisecond)
	fmt.Printf("%+v\n", p.Decide(1, retry.Retryable(errUnavailable), now, time.Time{}, 0))
	fmt.Printf("%+v\n", p.Decide(1, retry.Retryable(errUnavailable), now, deadline, 0)) // now+delay == deadline
	fmt.Printf("%+v\n", p.Decide(3, retry.Retryable(errUnavailable), now, time.Time{}, 0))
	fmt.Printf("%+v\n", p.Decide(1, retry.After(errUnavailable, 2*time.Second), now, time.Time{}, 0))
	// Output:
	// {Retry:true Delay:100ms Reason:none Interrupted:false}
	// {Retry:false Delay:0s Reason:deadline Interrupted:false}
	// {Retry:false Delay:0s Reason:exhausted Interrupted:false}
	// {Retry:true Delay:2s Reason:none Interrupted:false}
}

// A slow first attempt is hedged after Delay; the hedge answers first, so
// the first attempt is canceled and Do returns the hedge's success.
func ExampleHedge_Do() {
	h := &retry.Hedge{Delay: 10 * time.Millisecond} // share one per dependency
	var calls atomic.Int32
	err := h.Do(context.Background(), &retry.Policy{MaxAttempts: 2}, func(ctx context.Context) error {
		if calls.Add(1) == 1 {
			<-ctx.Done() // a slow answer, still running when the hedge wins
			fmt.Println("first attempt:", ctx.Err())
			return ctx.Err()
		}
		return nil // the hedge answers at once
	})
	fmt.Println("err:", err, "attempts:", calls.Load())
	// Output:
	// first attempt: context canceled
	// err: <nil> attempts: 2
}

// A Handler run in process: each attempt finds its Delivery in the
// context, as it would in the durable queue or on a broker.
func ExampleHandler_Run() {
	var handle retry.Handler = func(ctx context.Context, payload []byte) error {
		d, _ := retry.DeliveryFrom(ctx)
		fmt.Printf("%s attempt %d of %d: %s\n", d.ID, d.Attempt, d.MaxAttempts, payload)
		if d.Attempt < 2 {
			return retry.Retryable(errUnavailable)
		}
		return nil
	}
	policy := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond)}
	err := handle.Run(context.Background(), policy, "order-1", []byte("pay 10 EUR"))
	fmt.Println("error:", err)
	// Output:
	// order-1 attempt 1 of 3: pay 10 EUR
	// order-1 attempt 2 of 3: pay 10 EUR
	// error: <nil>
}

// Hooks of two observers (metrics and a log, say) on one Policy.
func ExampleHooks_Join() {
	var retries atomic.Int64
	counting := retry.Hooks{OnRetry: func(retry.Event) { retries.Add(1) }}
	printing := retry.Hooks{OnGiveUp: func(e retry.Event) {
		fmt.Printf("gave up after %d attempts: %v\n", e.Attempt, e.Reason)
	}}
	policy := &retry.Policy{MaxAttempts: 3, Schedule: backoff.Constant(time.Millisecond), Hooks: counting.Join(printing)}
	_ = retry.Do(context.Background(), policy, func(context.Context) error { return retry.Retryable(errUnavailable) })
	fmt.Println("retries:", retries.Load())
	// Output:
	// gave up after 3 attempts: exhausted
	// retries: 2
}
