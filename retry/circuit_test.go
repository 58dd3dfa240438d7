package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
)

// TestCircuitOpenReason: a retry refused by a circuit breaker that opened
// gives up with CircuitOpen and ErrCircuitOpen, not Budget; a refusal by
// an ordinary budget stays Budget.
func TestCircuitOpenReason(t *testing.T) {
	cb, err := budget.NewCircuitBreaker(budget.CircuitConfig{MinCalls: 2, CoolDown: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := &Policy{MaxAttempts: 5, Schedule: backoff.Constant(0), Budget: cb}
	now := time.Now()
	// The first failure leaves the circuit closed (MinCalls 2): a retry.
	cb.Result(now, false)
	if d := p.Decide(1, errBoom2, now, time.Time{}, 0); !d.Retry {
		t.Fatalf("closed circuit: %+v", d)
	}
	// The second opens it: the retry is refused with a reason of its own.
	cb.Result(now, false)
	if d := p.Decide(2, errBoom2, now, time.Time{}, 0); d.Retry || d.Reason != CircuitOpen {
		t.Fatalf("open circuit: %+v, want reason circuit-open", d)
	}
	var e error = &Error{Reason: CircuitOpen, Attempts: 2, Err: errBoom2}
	if !errors.Is(e, ErrCircuitOpen) || !errors.Is(e, errBoom2) || errors.Is(e, ErrBudget) ||
		e.Error() != "retry: gave up (circuit-open) after 2 attempts: boom" {
		t.Fatalf("give-up error %q", e)
	}
	// An ordinary budget's refusal is still Budget.
	q := &Policy{MaxAttempts: 5, Schedule: backoff.Constant(0), Budget: &budget.TokenBucket{Empty: true}}
	if d := q.Decide(1, errBoom2, now, time.Time{}, 0); d.Reason != Budget {
		t.Fatalf("token bucket: %+v", d)
	}
}

// TestDoCircuitOpen: Do against a dependency that always fails stops when
// the shared circuit opens, with ErrCircuitOpen; the next original is
// refused before it starts, with the same reason.
func TestDoCircuitOpen(t *testing.T) {
	cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{MinCalls: 3, CoolDown: time.Hour})
	var reasons []Reason
	p := &Policy{MaxAttempts: 10, Schedule: backoff.Constant(0), Budget: cb,
		Hooks: Hooks{OnGiveUp: func(e Event) { reasons = append(reasons, e.Reason) }}}
	calls := 0
	op := func(context.Context) error { calls++; return errBoom2 }
	err := Do(context.Background(), p, op)
	if !errors.Is(err, ErrCircuitOpen) || calls != 3 || cb.State() != budget.CircuitOpen {
		t.Fatalf("err %v after %d calls, circuit %v; want circuit-open after 3", err, calls, cb.State())
	}
	err = Do(context.Background(), p, op)
	var ge *Error
	if !errors.As(err, &ge) || ge.Reason != CircuitOpen || ge.Attempts != 0 || calls != 3 {
		t.Fatalf("an original against the open circuit: %v after %d calls", err, calls)
	}
	if len(reasons) != 2 || reasons[0] != CircuitOpen || reasons[1] != CircuitOpen {
		t.Fatalf("OnGiveUp reasons %v", reasons)
	}
}

var errBoom2 = Retryable(errors.New("boom"))
