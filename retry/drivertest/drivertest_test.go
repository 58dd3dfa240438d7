package drivertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/drivertest"
	"github.com/staggerhq/stagger/retry/retrydriver"
)

func TestDo(t *testing.T) { drivertest.Run(t, drivertest.Do) }

// recorder is a testing.TB that records failures instead of failing, so
// that a test can assert that the suite fails a broken driver.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs) > 0
}

// loop is a driver written on retrydriver.Step as the durable drivers are, with
// the faults a broken driver could have as options.
type loop struct {
	keep          []retry.Reason // keep the work on these reasons instead of giving up
	quietKeep     bool           // and drop the give-up's hook when it does
	servedOnPanic bool           // release a panicking attempt's slot as served
	recoverPanic  bool           // swallow a panic as a success
	noRelease     bool           // never release a successful attempt's slot
	attempts      int            // added to the attempts a give-up reports
	lazy          bool           // run attempts in Step.LazyContext
}

func (l loop) run(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) (err error) {
	q := *p
	if l.quietKeep {
		giveUp := p.Hooks.OnGiveUp
		q.Hooks.OnGiveUp = func(e retry.Event) {
			for _, r := range l.keep {
				if e.Reason == r {
					return
				}
			}
			giveUp(e)
		}
	}
	s := retrydriver.Step{Policy: &q}
	kept := func() error {
		for _, r := range l.keep {
			if s.Reason() == r {
				return &drivertest.Kept{Attempts: s.Delivery.Attempt}
			}
		}
		var e *retry.Error
		if errors.As(s.Err(), &e) {
			e.Attempts += l.attempts
			return e
		}
		return s.Err()
	}
	for {
		if s.Begin(ctx, time.Now()) != retry.NoReason {
			return kept()
		}
		var aerr error
		func() {
			defer func() {
				if v := recover(); v != nil {
					if l.servedOnPanic {
						s.Postpone() // frees the slot as served
					}
					s.Abort()
					if !l.recoverPanic {
						panic(v)
					}
				}
			}()
			if l.noRelease {
				s.Hold()
			}
			if l.lazy {
				aerr = attempt(s.LazyContext())
			} else {
				aerr = attempt(s.Context())
			}
		}()
		dec := s.End(aerr, time.Now())
		if aerr == nil {
			return nil
		}
		if !dec.Retry {
			return kept()
		}
		time.Sleep(dec.Delay)
	}
}

// TestBrokenDrivers runs drivers broken in one way each through the
// suite: every one must fail it on the case named, and a faithful copy
// of the same loop must pass every case.
func TestBrokenDrivers(t *testing.T) {
	refusals := []retry.Reason{retry.Budget, retry.Limited, retry.Pushback}
	opposite := func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
		if err := retry.Do(ctx, p, attempt); err == nil {
			return errors.New("failed")
		}
		return nil
	}
	extraAttempt := func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
		q := *p
		on := p.Hooks.OnAttempt
		q.Hooks.OnAttempt = func(e retry.Event) {
			on(e)
			if e.Attempt == 1 {
				on(e)
			}
		}
		return retry.Do(ctx, &q, attempt)
	}
	exhaustedAlways := func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
		err := retry.Do(ctx, p, attempt)
		var e *retry.Error
		if errors.As(err, &e) {
			e.Reason = retry.Exhausted
		}
		return err
	}
	noLast := func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
		err := retry.Do(ctx, p, attempt)
		var e *retry.Error
		if errors.As(err, &e) {
			return &retry.Error{Reason: e.Reason, Attempts: e.Attempts}
		}
		return err
	}
	clamps := func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
		q := *p
		q.ClampAfter = true // waits MaxAfter where Do gives up
		return retry.Do(ctx, &q, attempt)
	}
	forever := func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
		err := retry.Do(ctx, p, attempt)
		<-ctx.Done() // never returns by itself
		return err
	}
	tests := []struct {
		name string
		d    drivertest.Driver
		fail []string // cases that must fail
	}{
		{"retry.Do with one extra OnAttempt", drivertest.Driver{Run: extraAttempt}, []string{"success", "exhausted"}},
		{"the opposite outcome", drivertest.Driver{Run: opposite}, []string{"success", "exhausted", "permanent", "budget refuses the retry"}},
		{"every give-up reported as exhausted", drivertest.Driver{Run: exhaustedAlways}, []string{"permanent", "retry would start at the deadline", "limiter refuses"}},
		{"the last error dropped", drivertest.Driver{Run: noLast}, []string{"exhausted", "permanent"}},
		{"pushback clamped", drivertest.Driver{Run: clamps}, []string{"after above the cap"}},
		{"never returns", drivertest.Driver{Run: forever}, []string{"success", "exhausted"}},
		{"durable, dropping the refusals' give-ups", drivertest.Driver{Keeps: refusals,
			Run: loop{keep: refusals, quietKeep: true}.run},
			[]string{"budget refuses the retry", "budget throttles the original", "limiter refuses", "after above the cap"}},
		{"durable, keeping the work without saying so", drivertest.Driver{
			Run: loop{keep: refusals}.run},
			[]string{"budget refuses the retry", "limiter refuses", "after above the cap"}},
		{"durable, keeping with the attempts miscounted", drivertest.Driver{Keeps: refusals, SpendsRefused: true,
			Run: loop{keep: refusals}.run},
			[]string{"budget throttles the original", "limiter refuses"}},
		{"give-ups with one attempt too many", drivertest.Driver{Run: loop{attempts: 1}.run}, []string{"exhausted", "permanent"}},
		{"a panicking attempt's slot released as served", drivertest.Driver{Run: loop{servedOnPanic: true}.run}, []string{"panic frees the slot"}},
		{"a panic swallowed as a success", drivertest.Driver{Run: loop{recoverPanic: true}.run}, []string{"panic frees the slot"}},
		{"a panic swallowed, said to be recovered", drivertest.Driver{RecoversPanics: true, Run: loop{recoverPanic: true}.run}, []string{"panic frees the slot"}},
		{"a slot never released", drivertest.Driver{Run: loop{noRelease: true}.run}, []string{"budget and limiter around a retry"}},
	}
	cases := map[string]drivertest.Case{}
	for _, c := range drivertest.Cases() {
		cases[c.Name] = c
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.d.Name = tt.name
			for _, name := range tt.fail {
				c, ok := cases[name]
				if !ok {
					t.Fatalf("no case %q", name)
				}
				synctest.Test(t, func(t *testing.T) {
					rec := &recorder{TB: t}
					drivertest.Check(rec, tt.d, c)
					if !rec.Failed() {
						t.Errorf("case %q passes a driver broken by %s", name, tt.name)
					} else {
						t.Logf("%s: %s", name, strings.Join(rec.errs, "; "))
					}
				})
			}
		})
	}
}

// TestFaithfulLoop: the loop the broken drivers are made from passes the
// suite when nothing is broken, with its attempts' contexts made lazily,
// and as a durable driver that keeps the work on refusals and says so:
// the failures above are the faults'.
func TestFaithfulLoop(t *testing.T) {
	drivertest.Run(t, drivertest.Driver{Name: "loop", Run: loop{}.run})
	drivertest.Run(t, drivertest.Driver{Name: "lazy loop", Run: loop{lazy: true}.run})
	refusals := []retry.Reason{retry.Budget, retry.Limited, retry.Pushback}
	drivertest.Run(t, drivertest.Driver{Name: "keeping loop", Keeps: refusals, Run: loop{keep: refusals}.run})
}

// TestSkips: a skip must name a case of the suite and say why.
func TestSkips(t *testing.T) {
	for _, skip := range []map[string]string{
		{"no such case": "because"},
		{"success": ""},
		{"success": "  "},
	} {
		rec := &recorder{TB: t}
		if drivertest.CheckSkips(rec, drivertest.Driver{Name: "d", Run: drivertest.Do.Run, Skip: skip}) || !rec.Failed() {
			t.Errorf("skip list %q accepted", skip)
		}
	}
	rec := &recorder{TB: t}
	if !drivertest.CheckSkips(rec, drivertest.Driver{Name: "d", Skip: map[string]string{"success": "a reason"}}) || rec.Failed() {
		t.Errorf("a sound skip list refused: %v", rec.errs)
	}
}

// TestHedgeNoneDue: a Hedge whose delay never comes during a case makes
// the calls retry.Do makes and returns what it returns.
func TestHedgeNoneDue(t *testing.T) {
	drivertest.Run(t, drivertest.Driver{
		Name: "retry.Hedge (no hedge due)",
		Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
			h := &retry.Hedge{Delay: 1000 * time.Hour}
			return h.Do(ctx, p, attempt)
		},
	})
}

// TestHedgeHedging: a Hedge that does send hedges makes the calls its
// documentation promises: OnAttempt for every attempt started, a hedge
// charged to the Budget as a retry (and not sent, silently, when it is
// refused), a loser dropped without a hook or a Budget result, a
// retryable failure that others carry on unreported, and one decision
// when the last attempt in flight fails.
func TestHedgeHedging(t *testing.T) {
	sleep := func(d time.Duration, err error) error {
		time.Sleep(d)
		return err
	}
	flaky := retry.Retryable(errors.New("flaky"))
	bad := retry.Permanent(errors.New("bad input"))
	hedged := drivertest.Driver{
		Name: "retry.Hedge (Delay 10ms)",
		Run: func(ctx context.Context, p *retry.Policy, attempt func(context.Context) error) error {
			h := &retry.Hedge{Delay: 10 * time.Millisecond}
			return h.Do(ctx, p, attempt)
		},
	}
	plain := func(budget, limiter bool) func(rec *drivertest.Recorder) *retry.Policy {
		return func(rec *drivertest.Recorder) *retry.Policy {
			p := &retry.Policy{MaxAttempts: 4, Schedule: backoffStep}
			if budget {
				p.Budget = rec
			}
			if limiter {
				p.Limiter = rec
			}
			return rec.Policy(p)
		}
	}
	cases := []drivertest.Case{
		{Name: "the hedge wins", Policy: plain(true, true),
			Attempt: func(ctx context.Context, n int, _ context.CancelFunc) error {
				if n == 1 {
					<-ctx.Done() // the loser: canceled when the hedge wins
					return ctx.Err()
				}
				return nil
			},
			Want: "acquire|request|attempt 1|acquire|retry? true|attempt 2|result true|release true|success 2|release true"},
		{Name: "hedges refused by the budget", Policy: func(rec *drivertest.Recorder) *retry.Policy {
			rec.RefuseRetries()
			return plain(true, true)(rec)
		}, Attempt: func(ctx context.Context, n int, _ context.CancelFunc) error { return sleep(25*time.Millisecond, nil) },
			Want: "acquire|request|attempt 1|acquire|retry? false|release true|acquire|retry? false|release true|result true|release true|success 1"},
		{Name: "both fail, one retry", Policy: plain(false, false),
			Attempt: func(ctx context.Context, n int, _ context.CancelFunc) error {
				switch n {
				case 1:
					return sleep(15*time.Millisecond, flaky)
				case 2:
					return sleep(time.Millisecond, flaky)
				}
				return nil
			},
			Want: "attempt 1|attempt 2|retry 2 10ms|attempt 3|success 3"},
		{Name: "a permanent failure stops every attempt", Policy: plain(false, false),
			Attempt: func(ctx context.Context, n int, _ context.CancelFunc) error {
				if n == 1 {
					<-ctx.Done()
					return ctx.Err()
				}
				return bad
			},
			Want: "attempt 1|attempt 2|giveup 2 permanent", Reason: retry.PermanentError, Attempts: 2, Last: bad},
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { drivertest.Check(t, hedged, c) })
		})
	}
}

var backoffStep = backoff.Constant(10 * time.Millisecond)
