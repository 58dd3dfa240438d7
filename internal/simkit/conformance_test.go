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
	"github.com/staggerhq/stagger/retry/retrydriver"
)

// simSkips are the suite's cases no simulated driver can run, and why.
func simSkips() map[string]string {
	// The suite bounds, cancels and ends attempts through their context;
	// a simulated attempt is an event with no context (a model times an
	// attempt out with an event of its own, ErrTimeout), so the Step has
	// nothing to bound or cancel. Every other case runs, the deadline one
	// included: Begin folds Policy.Timeout into the request's ledger.
	noCtx := "a simulated client has no context: its models time out and give up themselves"
	return map[string]string{
		"attempt timeout":                   noCtx,
		"attempt timeout exhausted":         noCtx,
		"attempt timeout, Done not watched": noCtx,
		"canceled during an attempt":        noCtx,
		"own failure while canceled":        noCtx,
		"canceled during a wait":            noCtx,
		"panic frees the slot":              "a simulated attempt is no user code: it cannot panic",
	}
}

// TestDriverConformance: the simulator's driver, stepped once per event as
// the models step it (here on the bubble's virtual clock), makes the same
// calls as retry.Do and ends as it ends.
func TestDriverConformance(t *testing.T) {
	drivertest.Run(t, drivertest.Driver{
		Name: "sim driver",
		Skip: simSkips(),
		Run: func(_ context.Context, p *retry.Policy, attempt func(context.Context) error) error {
			d := driver{p}
			var l ledger // the Step folds Policy.Timeout into it and records the delays
			if r := d.begin(&l, time.Now()); r != retry.NoReason {
				return &retry.Error{Reason: r}
			}
			for n := 1; ; n++ {
				err := attempt(context.Background())
				dec := d.end(&l, time.Now(), n, err)
				switch {
				case err == nil:
					return nil
				case dec.Reason == retry.UnknownError:
					return err
				case !dec.Retry:
					return &retry.Error{Reason: dec.Reason, Attempts: n, Err: err}
				}
				time.Sleep(dec.Delay)
				if r := d.againN(&l, n+1, time.Now()); r != retry.NoReason {
					return &retry.Error{Reason: r, Attempts: n, Err: err}
				}
			}
		},
	})
}

// TestModelConformance: the budgets model's own event loop (runOne, the
// code the budgets scenario runs), with its clients and server replaced
// by the suite's one request, makes the calls retry.Do makes and ends as
// it ends. Each attempt takes, on the model's clock, the time it took in
// the bubble; the waits between attempts are the model's.
func TestModelConformance(t *testing.T) {
	skip := simSkips()
	drivertest.Run(t, drivertest.Driver{
		Name: "sim budgets model",
		Skip: skip,
		Run: func(_ context.Context, p *retry.Policy, attempt func(context.Context) error) error {
			var out error
			c := DefaultBudgets()
			c.Clients, c.Duration = 1, time.Hour
			c.probe = &probe{
				policy: p,
				answer: func() (time.Duration, error) {
					start := time.Now()
					err := attempt(context.Background())
					return time.Since(start), err
				},
				end: func(err error, r retry.Reason, attempts int32) {
					switch r {
					case retry.NoReason:
						out = nil
					case retry.UnknownError:
						out = err
					default:
						out = &retry.Error{Reason: r, Attempts: int(attempts), Err: err}
					}
				},
			}
			if _, err := c.runOne("3-retries", 0, 1); err != nil {
				return err
			}
			return out
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
			if (&retrydriver.Step{Policy: a.p}).NeedsNow(context.Background()) {
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
				l := withDeadline(deadline)
				l.prev = prev
				want := b.end(&l, now, n%7+1, err)
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
