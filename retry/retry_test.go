package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
)

var (
	errBoom    = errors.New("boom")
	errFlaky   = Retryable(errors.New("flaky"))
	errNoGood  = Permanent(errors.New("bad content"))
	zeroWait   = backoff.Constant(0)
	epoch      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctxTODO    = context.Background()
	noDeadline time.Time
)

func TestClassify(t *testing.T) {
	base := errors.New("x")
	for _, c := range []struct {
		err   error
		class Class
		after time.Duration
	}{
		{nil, ClassUnknown, 0},
		{base, ClassUnknown, 0},
		{Retryable(base), ClassRetryable, 0},
		{Permanent(base), ClassPermanent, 0},
		{After(base, time.Second), ClassRetryable, time.Second},
		{After(base, -time.Second), ClassRetryable, 0},
		{fmt.Errorf("wrapped: %w", Permanent(base)), ClassPermanent, 0},
		{Permanent(Retryable(base)), ClassPermanent, 0}, // outermost wins
		{errors.Join(base, After(base, 3*time.Second)), ClassRetryable, 3 * time.Second},
		{fmt.Errorf("two: %w %w", base, Permanent(base)), ClassPermanent, 0},
	} {
		class, after := Classify(c.err)
		if class != c.class || after != c.after {
			t.Errorf("Classify(%v) = %v, %v; want %v, %v", c.err, class, after, c.class, c.after)
		}
	}
	if Permanent(nil) != nil || Retryable(nil) != nil || After(nil, time.Second) != nil {
		t.Error("marking nil must give nil")
	}
	if !errors.Is(Permanent(base), base) || Permanent(base).Error() != "x" {
		t.Error("marks must wrap transparently")
	}
}

func TestDecideRules(t *testing.T) {
	p := &Policy{MaxAttempts: 3, Schedule: backoff.Constant(100 * time.Millisecond)}
	now := epoch
	for _, c := range []struct {
		name     string
		attempt  int
		err      error
		deadline time.Time
		want     Decision
	}{
		{"nil error", 1, nil, noDeadline, Decision{}},
		{"retryable", 1, errFlaky, noDeadline, Decision{Retry: true, Delay: 100 * time.Millisecond}},
		{"permanent", 1, errNoGood, noDeadline, Decision{Reason: PermanentError}},
		{"unknown", 1, errBoom, noDeadline, Decision{Reason: UnknownError}},
		{"last attempt", 3, errFlaky, noDeadline, Decision{Reason: Exhausted}},
		{"beyond last", 7, errFlaky, noDeadline, Decision{Reason: Exhausted}},
		{"deadline equality stops", 1, errFlaky, now.Add(100 * time.Millisecond), Decision{Reason: Deadline}},
		{"deadline one ns later allows", 1, errFlaky, now.Add(100*time.Millisecond + 1), Decision{Retry: true, Delay: 100 * time.Millisecond}},
		{"deadline passed", 1, errFlaky, now.Add(-time.Second), Decision{Reason: Deadline}},
		{"after raises delay", 1, After(errBoom, 2*time.Second), noDeadline, Decision{Retry: true, Delay: 2 * time.Second}},
		{"after below schedule keeps schedule", 1, After(errBoom, time.Millisecond), noDeadline, Decision{Retry: true, Delay: 100 * time.Millisecond}},
		{"after above cap gives up", 1, After(errBoom, 2*time.Minute), noDeadline, Decision{Reason: Pushback}},
		{"after past deadline", 1, After(errBoom, 30*time.Second), now.Add(30 * time.Second), Decision{Reason: Deadline}},
	} {
		if got := p.Decide(c.attempt, c.err, now, c.deadline, 0); got != c.want {
			t.Errorf("%s: Decide = %+v, want %+v", c.name, got, c.want)
		}
	}

	clamp := &Policy{MaxAttempts: 3, Schedule: zeroWait, MaxAfter: 5 * time.Second, ClampAfter: true}
	if got := clamp.Decide(1, After(errBoom, time.Hour), now, noDeadline, 0); got != (Decision{Retry: true, Delay: 5 * time.Second}) {
		t.Errorf("ClampAfter: %+v", got)
	}
	unconditional := &Policy{Schedule: zeroWait, MaxAfter: backoff.MaxDelay}
	if got := unconditional.Decide(1, After(errBoom, 5*time.Hour), now, noDeadline, 0); got != (Decision{Retry: true, Delay: 5 * time.Hour}) {
		t.Errorf("MaxAfter=MaxDelay: %+v", got)
	}

	classify := &Policy{Schedule: zeroWait, Classify: func(err error) Class {
		if errors.Is(err, errBoom) {
			return ClassRetryable
		}
		return ClassUnknown
	}}
	if got := classify.Decide(1, errBoom, now, noDeadline, 0); !got.Retry {
		t.Errorf("Classify should make errBoom retryable: %+v", got)
	}
	if got := classify.Decide(1, Permanent(errBoom), now, noDeadline, 0); got.Reason != PermanentError {
		t.Errorf("an explicit mark wins over Classify: %+v", got)
	}

	var nilPolicy *Policy
	if got := nilPolicy.Decide(DefaultMaxAttempts, errFlaky, now, noDeadline, 0); got.Reason != Exhausted {
		t.Errorf("nil policy uses defaults: %+v", got)
	}
}

func TestDecideBudgetChargedOnlyWhenRetrying(t *testing.T) {
	b := &budget.TokenBucket{Initial: 20}
	p := &Policy{MaxAttempts: 2, Schedule: zeroWait, Budget: b}
	// Exhausted and deadline decisions must not spend credits.
	p.Decide(2, errFlaky, epoch, noDeadline, 0)
	p.Decide(1, errFlaky, epoch, epoch, 0)
	p.Decide(1, errNoGood, epoch, noDeadline, 0)
	if c := b.Credits(); c != 20 {
		t.Fatalf("credits %d after non-retry decisions, want 20", c)
	}
	if d := p.Decide(1, errFlaky, epoch, noDeadline, 0); !d.Retry || b.Credits() != 10 {
		t.Fatalf("retry: %+v, credits %d", d, b.Credits())
	}
	p.Decide(1, errFlaky, epoch, noDeadline, 0)
	if d := p.Decide(1, errFlaky, epoch, noDeadline, 0); d.Reason != Budget {
		t.Fatalf("empty budget: %+v", d)
	}
}

func TestDoAttemptCounting(t *testing.T) {
	for _, max := range []int{1, 2, 5} {
		calls := 0
		err := Do(ctxTODO, &Policy{MaxAttempts: max, Schedule: zeroWait}, func(context.Context) error {
			calls++
			return errFlaky
		})
		var ge *Error
		if calls != max || !errors.As(err, &ge) || ge.Attempts != max || ge.Reason != Exhausted {
			t.Errorf("MaxAttempts %d: %d calls, err %v", max, calls, err)
		}
		if !errors.Is(err, ErrExhausted) || !errors.Is(err, errFlaky) {
			t.Errorf("err %v must match ErrExhausted and the last error", err)
		}
	}
	// Zero value: DefaultMaxAttempts.
	calls := 0
	Do(ctxTODO, &Policy{Schedule: zeroWait}, func(context.Context) error { calls++; return errFlaky })
	if calls != DefaultMaxAttempts {
		t.Errorf("zero MaxAttempts made %d calls, want %d", calls, DefaultMaxAttempts)
	}
	// Success on the third attempt.
	calls = 0
	err := Do(ctxTODO, &Policy{MaxAttempts: 5, Schedule: zeroWait}, func(context.Context) error {
		calls++
		if calls < 3 {
			return errFlaky
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("got %v after %d calls", err, calls)
	}
}

func TestDoUnknownAndPermanent(t *testing.T) {
	calls := 0
	err := Do(ctxTODO, &Policy{Schedule: zeroWait}, func(context.Context) error { calls++; return errBoom })
	if err != errBoom || calls != 1 {
		t.Errorf("unknown error: got %v (want errBoom unchanged) after %d calls", err, calls)
	}
	calls = 0
	err = Do(ctxTODO, &Policy{Schedule: zeroWait}, func(context.Context) error { calls++; return errNoGood })
	if calls != 1 || !errors.Is(err, ErrPermanent) || !errors.Is(err, errNoGood) {
		t.Errorf("permanent: %v after %d calls", err, calls)
	}
	if !strings.Contains(err.Error(), "permanent") || !strings.Contains(err.Error(), "bad content") {
		t.Errorf("message %q should say why and include the cause", err)
	}
}

func TestDoWaitsAndCancellationIsPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var starts []time.Duration
		start := time.Now()
		done := make(chan error)
		go func() {
			done <- Do(ctx, &Policy{MaxAttempts: 10, Schedule: backoff.Constant(time.Hour)}, func(context.Context) error {
				starts = append(starts, time.Since(start))
				return errFlaky
			})
		}()
		time.Sleep(90 * time.Minute) // virtual: attempt 1 at 0, attempt 2 at 1h
		synctest.Wait()
		cancel()
		err := <-done
		if len(starts) != 2 || starts[0] != 0 || starts[1] != time.Hour {
			t.Fatalf("attempts started at %v, want [0 1h]", starts)
		}
		if elapsed := time.Since(start); elapsed != 90*time.Minute {
			t.Errorf("Do returned %v after start, want at once on cancel (90m)", elapsed)
		}
		if !errors.Is(err, context.Canceled) || !errors.Is(err, errFlaky) {
			t.Errorf("canceled: %v", err)
		}
		var ge *Error
		if !errors.As(err, &ge) || ge.Reason != Canceled || ge.Attempts != 2 {
			t.Errorf("canceled error %+v", ge)
		}
	})
}

func TestDoDeadlineSplitAcrossAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// One deadline (1s) for the whole operation, per-attempt timeout
		// 400ms, waits of 150ms: attempts get 400, 400, then only what is
		// left (1000-400-150-400-150 = -100 → no time: stop).
		var budgets []time.Duration
		start := time.Now()
		err := Do(context.Background(), &Policy{
			MaxAttempts:    10,
			Timeout:        time.Second,
			AttemptTimeout: 400 * time.Millisecond,
			Schedule:       backoff.Constant(100 * time.Millisecond),
		}, func(ctx context.Context) error {
			dl, ok := ctx.Deadline()
			if !ok {
				t.Fatal("attempt context has no deadline")
			}
			budgets = append(budgets, time.Until(dl))
			<-ctx.Done() // hang until the attempt's own timeout
			return ctx.Err()
		})
		want := []time.Duration{400 * time.Millisecond, 400 * time.Millisecond}
		if fmt.Sprint(budgets) != fmt.Sprint(want) {
			t.Errorf("attempt budgets %v, want %v", budgets, want)
		}
		// After attempt 2 ends at 900ms, now+100ms == deadline: stop at
		// once rather than sleep into a deadline that cannot be used.
		if !errors.Is(err, ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want ErrDeadline wrapping the attempt's timeout", err)
		}
		if el := time.Since(start); el != 900*time.Millisecond {
			t.Errorf("returned after %v, want 900ms (no sleep into the deadline)", el)
		}
	})
}

func TestDoLastAttemptGetsOnlyWhatIsLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var budgets []time.Duration
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		Do(ctx, &Policy{
			MaxAttempts:    5,
			AttemptTimeout: 400 * time.Millisecond,
			Schedule:       backoff.Constant(50 * time.Millisecond),
		}, func(ctx context.Context) error {
			dl, _ := ctx.Deadline()
			budgets = append(budgets, time.Until(dl))
			<-ctx.Done()
			return ctx.Err()
		})
		// 0–400, wait 50, 450–850, wait 50, 900–1000 (only 100ms left).
		want := []time.Duration{400 * time.Millisecond, 400 * time.Millisecond, 100 * time.Millisecond}
		if fmt.Sprint(budgets) != fmt.Sprint(want) {
			t.Errorf("attempt budgets %v, want %v", budgets, want)
		}
	})
}

func TestDoAttemptTimeoutIsRetryable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		err := Do(context.Background(), &Policy{MaxAttempts: 3, AttemptTimeout: time.Second, Schedule: zeroWait},
			func(ctx context.Context) error {
				calls++
				if calls < 3 {
					<-ctx.Done()
					return ctx.Err() // unknown class, but the attempt's own timeout fired
				}
				return nil
			})
		if err != nil || calls != 3 {
			t.Errorf("got %v after %d calls", err, calls)
		}
	})
}

// TestDoAttemptTimeoutKeepsError: an attempt that timed out counts as
// retryable, but the give-up error carries the attempt's own error, not a
// re-marked copy of it.
func TestDoAttemptTimeoutKeepsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []error
		p := &Policy{MaxAttempts: 2, AttemptTimeout: time.Second, Schedule: zeroWait,
			Hooks: Hooks{OnRetry: func(e Event) { got = append(got, e.Err) }}}
		err := Do(context.Background(), p, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		var e *Error
		if !errors.As(err, &e) || e.Reason != Exhausted || e.Err != context.DeadlineExceeded {
			t.Fatalf("Do = %#v", err)
		}
		if len(got) != 1 || got[0] != context.DeadlineExceeded {
			t.Errorf("OnRetry errors %v", got)
		}
	})
}

// TestDoClassifiesOnce: Policy.Classify is asked once per failed attempt,
// though both End and the decision need the class.
func TestDoClassifiesOnce(t *testing.T) {
	n := 0
	bh, _ := limit.NewBulkhead(1)
	p := &Policy{MaxAttempts: 3, Limiter: bh, Schedule: zeroWait,
		Classify: func(error) Class { n++; return ClassRetryable }}
	_ = Do(ctxTODO, p, func(context.Context) error { return errBoom })
	if n != 3 {
		t.Errorf("Classify called %d times for 3 attempts", n)
	}
}

func TestDoRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		err := Do(context.Background(), &Policy{MaxAttempts: 3, Schedule: backoff.Constant(10 * time.Millisecond)},
			func(ctx context.Context) error {
				at = append(at, time.Since(start))
				if len(at) == 1 {
					return After(errBoom, 3*time.Second)
				}
				return nil
			})
		if err != nil || len(at) != 2 || at[1] != 3*time.Second {
			t.Errorf("err %v, attempts at %v; want the retry no sooner than 3s", err, at)
		}
		// Above the policy's cap: give up at once.
		start = time.Now()
		err = Do(context.Background(), &Policy{MaxAttempts: 3, MaxAfter: 10 * time.Second},
			func(ctx context.Context) error { return After(errBoom, time.Hour) })
		if !errors.Is(err, ErrPushback) || !errors.Is(err, errBoom) || time.Since(start) != 0 {
			t.Errorf("pushback above cap: %v after %v", err, time.Since(start))
		}
	})
}

func TestDoLimiterReleasedBeforeSleeping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bh, _ := limit.NewBulkhead(1)
		var inflightDuringWait []int
		p := &Policy{
			MaxAttempts: 3,
			Schedule:    backoff.Constant(time.Second),
			Limiter:     bh,
			Hooks: Hooks{OnRetry: func(Event) {
				inflightDuringWait = append(inflightDuringWait, bh.InFlight())
			}},
		}
		go Do(context.Background(), p, func(context.Context) error { return errFlaky })
		time.Sleep(500 * time.Millisecond) // mid-wait
		synctest.Wait()
		if bh.InFlight() != 0 {
			t.Errorf("slot held during the wait: in flight %d", bh.InFlight())
		}
		// Another caller can use the slot while the first one waits.
		if err := Do(context.Background(), p, func(context.Context) error { return nil }); err != nil {
			t.Errorf("second caller: %v", err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if fmt.Sprint(inflightDuringWait) != "[0 0]" {
			t.Errorf("in flight at each retry decision: %v", inflightDuringWait)
		}
	})
}

func TestDoLimitedAnswersAtOnce(t *testing.T) {
	bh, _ := limit.NewBulkhead(1)
	if !bh.TryAcquire() {
		t.Fatal("acquire")
	}
	called := false
	err := Do(ctxTODO, &Policy{Limiter: bh}, func(context.Context) error { called = true; return nil })
	if called || !errors.Is(err, ErrLimited) || !errors.Is(err, limit.ErrLimited) {
		t.Errorf("full bulkhead: called=%v err=%v", called, err)
	}
	bh.Release(true)
}

func TestDoBudget(t *testing.T) {
	b := &budget.TokenBucket{Empty: true} // earned from the first request
	p := &Policy{MaxAttempts: 3, Schedule: zeroWait, Budget: b}
	// Nine originals succeed: 9 credits, not enough for a retry.
	for range 9 {
		Do(ctxTODO, p, func(context.Context) error { return nil })
	}
	calls := 0
	err := Do(ctxTODO, p, func(context.Context) error { calls++; return errFlaky })
	// The 10th original earned the 10th credit: exactly one retry.
	if calls != 2 || !errors.Is(err, ErrBudget) || b.Credits() != 0 {
		t.Errorf("calls %d err %v credits %d", calls, err, b.Credits())
	}
}

func TestDoThrottledOriginal(t *testing.T) {
	p := &Policy{Budget: refuseAll{}}
	called := false
	err := Do(ctxTODO, p, func(context.Context) error { called = true; return nil })
	if called || !errors.Is(err, ErrBudget) {
		t.Errorf("throttled: called=%v err=%v", called, err)
	}
}

type refuseAll struct{}

func (refuseAll) Request(time.Time) bool { return false }
func (refuseAll) Retry(time.Time) bool   { return false }
func (refuseAll) Result(time.Time, bool) {}

func TestDoHooks(t *testing.T) {
	var log []string
	p := &Policy{MaxAttempts: 3, Schedule: backoff.Constant(0), Hooks: Hooks{
		OnAttempt: func(e Event) { log = append(log, fmt.Sprintf("attempt %d", e.Attempt)) },
		OnRetry:   func(e Event) { log = append(log, fmt.Sprintf("retry %d after %v: %v", e.Attempt, e.Delay, e.Err)) },
		OnSuccess: func(e Event) { log = append(log, fmt.Sprintf("success %d", e.Attempt)) },
		OnGiveUp:  func(e Event) { log = append(log, fmt.Sprintf("give up %d %v: %v", e.Attempt, e.Reason, e.Err)) },
	}}
	Do(ctxTODO, p, func(context.Context) error { return errFlaky })
	want := "attempt 1|retry 1 after 0s: flaky|attempt 2|retry 2 after 0s: flaky|attempt 3|give up 3 exhausted: flaky"
	if got := strings.Join(log, "|"); got != want {
		t.Errorf("hooks:\n got %s\nwant %s", got, want)
	}
	log = nil
	Do(ctxTODO, p, func(context.Context) error { return nil })
	if got := strings.Join(log, "|"); got != "attempt 1|success 1" {
		t.Errorf("hooks on success: %s", got)
	}
	joined := p.Hooks.Join(Hooks{OnSuccess: func(Event) { log = append(log, "second") }})
	log = nil
	Do(ctxTODO, &Policy{Hooks: joined}, func(context.Context) error { return nil })
	if got := strings.Join(log, "|"); got != "attempt 1|success 1|second" {
		t.Errorf("joined hooks: %s", got)
	}
}

// fakeClock is a manually advanced clock for Policy.Clock.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c    chan time.Time
	at   time.Time
	live bool
}

func (f *fakeClock) Now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
func (f *fakeClock) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{c: make(chan time.Time, 1), at: f.now.Add(d), live: true}
	f.timers = append(f.timers, t)
	return t.c
}
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	for _, t := range f.timers {
		if t.live && !t.at.After(f.now) {
			t.live = false
			t.c <- f.now
		}
	}
}
func TestDoInjectedClock(t *testing.T) {
	clk := &fakeClock{now: epoch}
	retried := make(chan time.Duration, 10)
	p := &Policy{MaxAttempts: 3, Clock: clk, Schedule: backoff.Constant(time.Minute),
		Hooks: Hooks{OnRetry: func(e Event) { retried <- e.Delay }}}
	calls := atomic.Int32{}
	done := make(chan error)
	go func() {
		done <- Do(ctxTODO, p, func(context.Context) error { calls.Add(1); return errFlaky })
	}()
	for i := range 2 {
		if d := <-retried; d != time.Minute {
			t.Fatalf("retry %d delay %v", i, d)
		}
		// The loop waits on the injected clock's timer until we advance it.
		if n := calls.Load(); n != int32(i+1) {
			t.Fatalf("calls %d before advancing, want %d", n, i+1)
		}
		for calls.Load() == int32(i+1) {
			clk.Advance(time.Minute)
			runtime.Gosched() // let the loop goroutine reach its timer
		}
	}
	if err := <-done; !errors.Is(err, ErrExhausted) || calls.Load() != 3 {
		t.Errorf("err %v after %d calls", err, calls.Load())
	}
}

func TestDoValue(t *testing.T) {
	calls := 0
	v, err := DoValue(ctxTODO, &Policy{Schedule: zeroWait}, func(context.Context) (string, error) {
		calls++
		if calls == 1 {
			return "", errFlaky
		}
		return "ok", nil
	})
	if v != "ok" || err != nil || calls != 2 {
		t.Errorf("DoValue = %q, %v after %d calls", v, err, calls)
	}
	if _, err := DoValue[int](ctxTODO, nil, nil); err == nil {
		t.Error("nil function must be an error")
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		p     Policy
		field string
	}{
		{Policy{MaxAttempts: -1}, "MaxAttempts"},
		{Policy{AttemptTimeout: -1}, "AttemptTimeout"},
		{Policy{Timeout: -1}, "Timeout"},
		{Policy{MaxAfter: -1}, "MaxAfter"},
		{Policy{Schedule: backoff.Exponential{}}, "Base"},
	} {
		err := Do(ctxTODO, &c.p, func(context.Context) error { t.Fatal("called with an invalid policy"); return nil })
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: %v; want ErrInvalid naming %s", c.p, err, c.field)
		}
	}
	if err := Do(ctxTODO, nil, nil); err == nil {
		t.Error("nil fn must be an error")
	}
}

func TestReasonStrings(t *testing.T) {
	for r := NoReason; r <= CircuitOpen; r++ {
		text, _ := r.MarshalText()
		var back Reason
		if err := back.UnmarshalText(text); err != nil || back != r {
			t.Errorf("UnmarshalText(%q) = %v, %v", text, back, err)
		}
	}
	var r Reason
	if err := r.UnmarshalText([]byte("nope")); err == nil {
		t.Error("UnmarshalText accepted nonsense")
	}
	if err := (&Error{Reason: Exhausted}).Error(); err != "retry: gave up (exhausted) after 0 attempts" {
		t.Errorf("message %q", err)
	}
}

func TestZeroAllocFirstTrySuccess(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	for name, p := range map[string]*Policy{
		"nil":     nil,
		"zero":    {},
		"limited": {Limiter: mustBulkhead(4)},
		"budget":  {Budget: &budget.TokenBucket{}},
	} {
		if n := testing.AllocsPerRun(1000, func() { Do(ctx, p, fn) }); n != 0 {
			t.Errorf("%s policy: %v allocs on the first-try success path", name, n)
		}
	}
	v := 0
	if n := testing.AllocsPerRun(1000, func() {
		v, _ = DoValue(ctx, nil, func(context.Context) (int, error) { return 1, nil })
	}); n != 0 {
		t.Errorf("DoValue: %v allocs", n)
	}
	_ = v
	// Retrying with zero waits and a prebuilt error allocates nothing either.
	calls := 0
	flaky := func(context.Context) error {
		calls++
		if calls%3 != 0 {
			return errFlaky
		}
		return nil
	}
	p := &Policy{Schedule: zeroWait}
	if n := testing.AllocsPerRun(1000, func() { Do(ctx, p, flaky) }); n != 0 {
		t.Errorf("three attempts, zero wait: %v allocs", n)
	}
}

func mustBulkhead(n int) *limit.Bulkhead {
	b, err := limit.NewBulkhead(n)
	if err != nil {
		panic(err)
	}
	return b
}

// TestSharedBudgetAndLimiterRace: many goroutines share one budget and one
// limiter; credits are conserved exactly and the limiter never admits more
// than its size.
func TestSharedBudgetAndLimiterRace(t *testing.T) {
	b := &budget.TokenBucket{Max: 1 << 40, Empty: true} // no cap: every earned credit is kept
	bh := mustBulkhead(8)
	var inflight, peak, retries, originals atomic.Int64
	p := &Policy{
		MaxAttempts: 4,
		Schedule:    zeroWait,
		Budget:      b,
		Limiter:     bh,
		Rand:        rand.NewPCG(1, 1),
		Hooks:       Hooks{OnRetry: func(Event) { retries.Add(1) }},
	}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				for {
					err := Do(ctxTODO, p, func(context.Context) error {
						n := inflight.Add(1)
						for {
							pk := peak.Load()
							if n <= pk || peak.CompareAndSwap(pk, n) {
								break
							}
						}
						defer inflight.Add(-1)
						if (g+i)%3 == 0 {
							return errFlaky
						}
						return nil
					})
					if !errors.Is(err, ErrLimited) {
						break
					}
				}
				originals.Add(1)
			}
		}()
	}
	wg.Wait()
	if pk := peak.Load(); pk > 8 {
		t.Errorf("limiter admitted %d at once, size 8", pk)
	}
	if bh.InFlight() != 0 {
		t.Errorf("slots leaked: %d", bh.InFlight())
	}
	// Every original earned 1, every retry spent 10: nothing else moves credits.
	if got, want := b.Credits(), originals.Load()-10*retries.Load(); got != want {
		t.Errorf("credits %d, want originals %d − 10×retries %d = %d", got, originals.Load(), retries.Load(), want)
	}
	if retries.Load() == 0 {
		t.Error("no retries happened: the test proves nothing")
	}
}

func TestRunPutsDeliveryInContext(t *testing.T) {
	var got []Delivery
	err := Handler(func(ctx context.Context, payload []byte) error {
		d, ok := DeliveryFrom(ctx)
		if !ok || string(payload) != "x" {
			t.Fatal("no delivery or wrong payload")
		}
		got = append(got, Delivery{ID: d.ID, Attempt: d.Attempt, MaxAttempts: d.MaxAttempts, Source: d.Source})
		return errFlaky
	}).Run(ctxTODO, &Policy{MaxAttempts: 2, Schedule: zeroWait}, "job-1", []byte("x"))
	if !errors.Is(err, ErrExhausted) {
		t.Fatal(err)
	}
	want := "[{job-1 1 2 retry 0001-01-01 00:00:00 +0000 UTC 0001-01-01 00:00:00 +0000 UTC 0s} {job-1 2 2 retry 0001-01-01 00:00:00 +0000 UTC 0001-01-01 00:00:00 +0000 UTC 0s}]"
	if fmt.Sprint(got) != want {
		t.Errorf("deliveries %v, want %s", got, want)
	}
	if _, ok := DeliveryFrom(ctxTODO); ok {
		t.Error("empty context has a delivery")
	}
}

// recorder is a Budget and Limiter that logs the calls a driver makes.
type recorder struct {
	log       []string
	slots     int
	request   bool
	retryOK   bool
	inflight  int
	maxFlight int
}

func (r *recorder) TryAcquire() bool {
	r.log = append(r.log, "acquire")
	if r.inflight >= r.slots {
		return false
	}
	r.inflight++
	r.maxFlight = max(r.maxFlight, r.inflight)
	return true
}
func (r *recorder) Release(ok bool) {
	r.inflight--
	r.log = append(r.log, fmt.Sprintf("release %v", ok))
}
func (r *recorder) Request(time.Time) bool {
	r.log = append(r.log, "request")
	return r.request
}
func (r *recorder) Retry(time.Time) bool { r.log = append(r.log, "retry"); return r.retryOK }
func (r *recorder) Result(_ time.Time, ok bool) {
	r.log = append(r.log, fmt.Sprintf("result %v", ok))
}

func TestBeginEnd(t *testing.T) {
	r := &recorder{slots: 1, request: true, retryOK: true}
	p := &Policy{Limiter: r, Budget: r, Schedule: zeroWait}
	s1 := step{Policy: p}
	if got := s1.Begin(context.Background(), epoch); got != NoReason || s1.Delivery.Attempt != 1 {
		t.Fatalf("Begin = %v, attempt %d", got, s1.Delivery.Attempt)
	}
	s2 := step{Policy: p, Delivery: Delivery{Attempt: 1}}
	if got := s2.Begin(context.Background(), epoch); got != Limited || s2.Delivery.Attempt != 1 {
		t.Fatalf("second Begin with one slot = %v", got)
	}
	s1.End(errNoGood, epoch) // permanent: the dependency served it
	r.request = false
	s3 := step{Policy: p}
	if got := s3.Begin(context.Background(), epoch); got != Budget || r.inflight != 0 {
		t.Fatalf("refused original: %v, in flight %d", got, r.inflight)
	}
	s4 := step{Policy: p, Delivery: Delivery{Attempt: 1}}
	s4.Begin(context.Background(), epoch) // a retry does not ask Request
	s4.End(errFlaky, epoch)
	want := "acquire|request|acquire|result true|release true|acquire|request|release true|acquire|result false|release false|retry"
	if got := strings.Join(r.log, "|"); got != want {
		t.Errorf("calls\n got %s\nwant %s", got, want)
	}
	if !(&step{Policy: p}).NeedsNow(context.Background()) || (&step{}).NeedsNow(context.Background()) {
		t.Error("NeedsNow")
	}
	if !(&step{}).NeedsNow(expiredCtx(t)) {
		t.Error("NeedsNow must see the context's deadline")
	}
}

func expiredCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), epoch)
	t.Cleanup(cancel)
	return ctx
}

// TestDoUsesTheSteps: Do's calls to the limiter and budget are exactly
// Begin, End and Decide's, in that order, for a retried call.
func TestDoUsesTheSteps(t *testing.T) {
	r := &recorder{slots: 1, request: true, retryOK: true}
	p := &Policy{MaxAttempts: 3, Limiter: r, Budget: r, Schedule: zeroWait}
	calls := 0
	Do(ctxTODO, p, func(context.Context) error {
		calls++
		if calls < 3 {
			return errFlaky
		}
		return nil
	})
	want := "acquire|request|result false|release false|retry|acquire|result false|release false|retry|acquire|result true|release true"
	if got := strings.Join(r.log, "|"); got != want {
		t.Errorf("calls\n got %s\nwant %s", got, want)
	}
}

type testKey struct{}

func TestWithDeliveryContext(t *testing.T) {
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), testKey{}, "v"))
	ctx := Delivery{ID: "m1", Attempt: 2, Source: "test"}.NewContext(parent)
	if d, ok := DeliveryFrom(ctx); !ok || d.ID != "m1" || d.Attempt != 2 {
		t.Fatalf("DeliveryFrom = %+v, %v", d, ok)
	}
	if ctx.Value(testKey{}) != "v" {
		t.Error("other values must come from the parent")
	}
	// A context derived from it is canceled with the parent.
	child, cancelChild := context.WithTimeout(ctx, time.Hour)
	defer cancelChild()
	if d, ok := DeliveryFrom(child); !ok || d.ID != "m1" {
		t.Error("a derived context must still carry the delivery")
	}
	cancel()
	<-child.Done()
	if ctx.Err() != context.Canceled {
		t.Errorf("Err = %v", ctx.Err())
	}
	// An inner delivery shadows an outer one.
	inner := Delivery{ID: "m2", Attempt: 1}.NewContext(ctx)
	if d, _ := DeliveryFrom(inner); d.ID != "m2" {
		t.Errorf("inner delivery %+v", d)
	}
	if n := testing.AllocsPerRun(100, func() {
		c := Delivery{ID: "m1", Attempt: 2}.NewContext(parent)
		DeliveryFrom(c)
	}); n != 1 {
		t.Errorf("Delivery.NewContext + DeliveryFrom: %v allocs, want 1", n)
	}
}

// TestEndUsesPolicyClassify: an error that Policy.Classify makes permanent
// is served by the dependency for End as it is for Decide — it neither
// shrinks an adaptive limiter nor counts as a failure in a budget.
func TestEndUsesPolicyClassify(t *testing.T) {
	errNotFound := errors.New("not found")
	r := &recorder{slots: 1, request: true, retryOK: true}
	p := &Policy{Limiter: r, Budget: r, Schedule: zeroWait, Classify: func(err error) Class {
		if errors.Is(err, errNotFound) {
			return ClassPermanent
		}
		return ClassUnknown
	}}
	err := Do(ctxTODO, p, func(context.Context) error { return fmt.Errorf("get: %w", errNotFound) })
	if !errors.Is(err, ErrPermanent) {
		t.Fatalf("Do = %v, want a permanent give-up", err)
	}
	s := step{Policy: p, Delivery: Delivery{Attempt: 1}}
	s.Begin(context.Background(), epoch)
	s.End(errBoom, epoch) // unknown for Classify too: a failure
	want := "acquire|request|result true|release true|acquire|result false|release false"
	if got := strings.Join(r.log, "|"); got != want {
		t.Errorf("calls\n got %s\nwant %s", got, want)
	}
}

// TestDoReleasesSlotOnPanic: a panicking attempt gives its Limiter slot
// back, whether or not the attempt runs under a timeout.
func TestDoReleasesSlotOnPanic(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Hour} {
		bh, _ := limit.NewBulkhead(1)
		p := &Policy{Limiter: bh, AttemptTimeout: timeout}
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic must go on")
				}
			}()
			_ = Do(ctxTODO, p, func(context.Context) error { panic("handler bug") })
		}()
		if bh.InFlight() != 0 {
			t.Errorf("AttemptTimeout %v: in flight after a panic: %d", timeout, bh.InFlight())
		}
		if err := Do(ctxTODO, p, func(context.Context) error { return nil }); err != nil {
			t.Errorf("AttemptTimeout %v: Do after a panic: %v", timeout, err)
		}
	}
}

// TestDoContextAlreadyDone: whatever the policy, a ctx that is done before
// Do starts gives a give-up after 0 attempts and fn is never called.
func TestDoContextAlreadyDone(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), epoch)
	defer cancel2()
	bh, _ := limit.NewBulkhead(1)
	for _, p := range []*Policy{nil, {}, {Limiter: bh}, {Timeout: time.Hour}} {
		for _, c := range []struct {
			ctx    context.Context
			reason Reason
			want   error
		}{{canceled, Canceled, context.Canceled}, {expired, Deadline, context.DeadlineExceeded}} {
			called := false
			err := Do(c.ctx, p, func(context.Context) error { called = true; return nil })
			var e *Error
			if called || !errors.As(err, &e) || e.Reason != c.reason || e.Attempts != 0 || !errors.Is(err, c.want) {
				t.Errorf("policy %+v, ctx %v: called=%v err=%v", p, c.want, called, err)
			}
		}
	}
}

// TestHoldRelease: under Hold, End tells the Budget the outcome (served:
// nil or permanent) at once but keeps the Limiter slot until Release.
func TestHoldRelease(t *testing.T) {
	bh, _ := limit.NewBulkhead(1)
	tb := &budget.TokenBucket{}
	p := &Policy{Limiter: bh, Budget: tb}
	for _, c := range []struct {
		err    error
		served bool
	}{{nil, true}, {errNoGood, true}, {Retryable(errors.New("503")), false}, {errors.New("unclassed"), false}} {
		s := step{Policy: p, Delivery: Delivery{Attempt: 1}}
		if r := s.Begin(context.Background(), epoch); r != NoReason {
			t.Fatalf("Begin: %v", r)
		}
		s.Hold()
		s.End(c.err, epoch)
		if s.st().Served != c.served {
			t.Errorf("End(%v) judged served=%v, want %v", c.err, s.st().Served, c.served)
		}
		if bh.InFlight() != 1 {
			t.Errorf("End(%v) under Hold released the slot", c.err)
		}
		s.Release()
		s.Release() // idempotent
		if bh.InFlight() != 0 {
			t.Errorf("Release after %v kept the slot", c.err)
		}
	}
}

// TestStepDoContinuesTheLedger: work handed over with two attempts made
// and a deadline gets only what is left.
func TestStepDoContinuesTheLedger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		deadline := time.Now().Add(time.Minute)
		s := step{Policy: &Policy{MaxAttempts: 3, Schedule: zeroWait}, Delivery: Delivery{ID: "w", Attempt: 2, Deadline: deadline}}
		var seen []int
		err := s.Do(context.Background(), func(ctx context.Context) error {
			seen = append(seen, s.Delivery.Attempt)
			if dl, ok := ctx.Deadline(); !ok || dl.After(deadline) {
				t.Errorf("attempt context deadline %v, want at most %v", dl, deadline)
			}
			return errFlaky
		})
		if !errors.Is(err, ErrExhausted) || fmt.Sprint(seen) != "[3]" {
			t.Fatalf("err %v, attempts %v; want one attempt (3 of 3)", err, seen)
		}
	})
}

// A first attempt that fails under a plain policy (the fast path of Do,
// which skips Begin) is decided against the context's deadline as any
// other: a wait that would outlast it gives up at once, with no retry.
func TestFirstFailureSeesTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		retries := 0
		p := &Policy{MaxAttempts: 3, Schedule: backoff.Constant(10 * time.Second),
			Hooks: Hooks{OnRetry: func(Event) { retries++ }}}
		start := time.Now()
		err := Do(ctx, p, func(context.Context) error { return errFlaky })
		if !errors.Is(err, ErrDeadline) || retries != 0 || time.Since(start) != 0 {
			t.Errorf("Do = %v after %v with %d retries; want ErrDeadline at once, no retry", err, time.Since(start), retries)
		}
	})
}

// A Step whose Do panicked under a context that is never done, recovered
// by the caller, honours the next context's cancellation.
func TestStepAfterPanicAsksTheContext(t *testing.T) {
	s := step{Policy: &Policy{MaxAttempts: 3, Schedule: zeroWait}}
	func() {
		defer func() { _ = recover() }()
		s.Do(context.Background(), func(context.Context) error { panic("boom") })
	}()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := s.Begin(ctx, time.Time{}); r != Canceled {
		t.Errorf("Begin under a canceled context after a panic = %v, want %v", r, Canceled)
	}
}
