package simkit

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/drivertest"
)

// TestDriverConformance: the simulator's driver, stepped once per event as
// the models step it (here on the bubble's virtual clock), makes the same
// calls as retry.Do. The simulator has no contexts: its clients model
// timeouts and cancellation themselves, so the context cases are left out.
func TestDriverConformance(t *testing.T) {
	drivertest.Run(t, drivertest.Driver{
		Name:         "sim driver",
		NoWaitCancel: true,
		Simulated:    true,
		Run: func(_ context.Context, p *retry.Policy, attempt func(context.Context) error) {
			d := driver{p}
			start := time.Now()
			var deadline time.Time
			if p.Timeout > 0 {
				deadline = start.Add(p.Timeout)
			}
			if d.begin(start) != retry.NoReason {
				return
			}
			var prev time.Duration
			for n := 1; ; n++ {
				err := attempt(context.Background())
				dec := d.end(time.Now(), n, err, deadline, prev)
				if err == nil || !dec.Retry {
					return
				}
				time.Sleep(dec.Delay)
				if d.againN(n+1) != retry.NoReason {
					return
				}
				prev = dec.Delay
			}
		},
	})
}

// TestDriverPlain: for a policy with no Budget, no Limiter, no Timeout and
// no hooks, the driver's decide (Policy.Decide) and end (the Step) agree,
// draw for draw, for every schedule the simulator's scenarios use, with
// and without a Classify, and the Step needs no clock; a policy with any
// of the four is not plain.
func TestDriverPlain(t *testing.T) {
	schedules := []backoff.Schedule{
		backoff.Constant(0),
		backoff.Exponential{Base: 10 * time.Millisecond, Cap: 2 * time.Second},
		backoff.Exponential{Base: 10 * time.Millisecond, Cap: 2 * time.Second, Jitter: backoff.Full},
		backoff.Exponential{Base: 10 * time.Millisecond, Cap: 2 * time.Second, Jitter: backoff.Equal},
		backoff.Decorrelated{Base: 5 * time.Millisecond, Cap: 2 * time.Second},
	}
	errs := []error{nil, ErrConflict, retry.Permanent(ErrConflict), errors.New("no class")}
	retryAll := func(error) retry.Class { return retry.ClassRetryable }
	for _, s := range schedules {
		for _, max := range []int{3, 4, math.MaxInt} {
			var classify func(error) retry.Class
			if max == 4 {
				classify = retryAll
			}
			a := driver{&retry.Policy{MaxAttempts: max, Schedule: s, Rand: pcg(5), Classify: classify, AttemptTimeout: time.Second}}
			b := driver{&retry.Policy{MaxAttempts: max, Schedule: s, Rand: pcg(5), Classify: classify, AttemptTimeout: time.Second}}
			if !a.plain() || !b.plain() {
				t.Fatal("a policy with no Budget, Limiter, Timeout or hooks is not plain")
			}
			if (&retry.Step{Policy: a.p}).NeedsNow(context.Background()) {
				t.Fatal("a plain policy's Step needs the time: decide may not get the zero time")
			}
			var prev time.Duration
			now := Epoch
			for n := 1; n <= 200; n++ {
				err := errs[n%len(errs)]
				deadline := time.Time{}
				if n%5 == 0 {
					deadline = now.Add(time.Second)
				}
				got := a.decide(now, n%7+1, err, deadline, prev)
				want := b.end(now, n%7+1, err, deadline, prev)
				if got != want {
					t.Fatalf("%#v attempt %d err %v: decide %+v, end %+v", s, n%7+1, err, got, want)
				}
				prev, now = got.Delay, now.Add(time.Millisecond)
			}
		}
	}
	bulkhead, err := limit.NewBulkhead(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*retry.Policy{
		{Budget: &budget.TokenBucket{}},
		{Limiter: bulkhead},
		{Timeout: time.Second},
		{Hooks: retry.Hooks{OnRetry: func(retry.Event) {}}},
	} {
		if (driver{p}).plain() {
			t.Errorf("%+v is plain", p)
		}
	}
}
