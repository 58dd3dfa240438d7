package retry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
)

// Reason says why a retry loop stopped without success.
type Reason uint8

const (
	// NoReason means "retry" in a Decision and "no give-up" elsewhere.
	NoReason Reason = iota
	// Exhausted: the last allowed attempt failed.
	Exhausted
	// Deadline: the next attempt could not start before the deadline
	// (now + delay >= deadline), or the deadline passed.
	Deadline
	// Budget: the retry budget refused (or a throttle refused the attempt).
	Budget
	// Limited: no concurrency slot was free.
	Limited
	// PermanentError: the error was marked Permanent.
	PermanentError
	// UnknownError: the error had no class; it is returned as it is.
	UnknownError
	// Canceled: the caller's context was canceled.
	Canceled
	// Pushback: the dependency asked for a wait longer than Policy.MaxAfter.
	Pushback
	// CircuitOpen: a circuit breaker (a [budget.Circuit]) refused the attempt.
	CircuitOpen
)

var reasonNames = [...]string{"none", "exhausted", "deadline", "budget", "limited", "permanent", "unknown", "canceled", "pushback", "circuit-open"}

// String returns the reason's lower-case name, as used in metrics and logs.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// MarshalText returns the reason's name (Reason.String).
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText parses a reason's name (case-insensitive), the inverse of
// MarshalText, as a dead letter's or a job's reason is read back.
func (r *Reason) UnmarshalText(b []byte) error {
	for i, n := range reasonNames {
		if strings.EqualFold(string(b), n) {
			*r = Reason(i)
			return nil
		}
	}
	return fmt.Errorf("retry: unknown reason %q", b)
}

// Sentinels, one per give-up reason. A give-up error satisfies errors.Is for
// its reason's sentinel and for the last attempt's error.
var (
	ErrExhausted   = errors.New("retry: attempts exhausted")           // reason Exhausted
	ErrDeadline    = errors.New("retry: deadline")                     // reason Deadline
	ErrBudget      = errors.New("retry: budget refused")               // reason Budget
	ErrLimited     = limit.ErrLimited                                  // reason Limited (the same value as limit.ErrLimited)
	ErrPermanent   = errors.New("retry: permanent error")              // reason PermanentError
	ErrPushback    = errors.New("retry: pushback longer than allowed") // reason Pushback
	ErrCircuitOpen = errors.New("retry: circuit open")                 // reason CircuitOpen

	// ErrInvalid is wrapped by policy validation errors; the message
	// names the field and the rule.
	ErrInvalid = errors.New("retry: invalid policy")
)

// Err returns the reason's sentinel (context.Canceled for Canceled, nil for
// NoReason and UnknownError).
func (r Reason) Err() error {
	switch r {
	case Exhausted:
		return ErrExhausted
	case Deadline:
		return ErrDeadline
	case Budget:
		return ErrBudget
	case Limited:
		return ErrLimited
	case PermanentError:
		return ErrPermanent
	case Canceled:
		return context.Canceled
	case Pushback:
		return ErrPushback
	case CircuitOpen:
		return ErrCircuitOpen
	}
	return nil
}

// Decision is the outcome of [Policy.Decide]: retry after Delay, or stop
// because of Reason.
type Decision struct {
	// Retry reports that the failed attempt should be retried.
	Retry bool
	// Delay is the wait before the retry (0 when Retry is false).
	Delay time.Duration
	// Reason is why the loop stops; NoReason when Retry.
	Reason Reason
	// Interrupted reports that the attempt failed with the end of the
	// driver's context (retrydriver.Step.End): nothing was decided, Reason is
	// Canceled or Deadline, and a durable driver hands the work back
	// unchanged.
	Interrupted bool
}

// Decide is the one retry decision every stagger driver calls: the
// in-process loop, the durable queue, the simulator, the HTTP transport and
// the broker adapters. It does no waiting and reads no clock.
//
// attempt is the number of attempts made so far (the one that just failed is
// attempt number attempt, counting from 1); err is its error; now is the
// driver's current time; deadline the operation's deadline (zero: none);
// prev the delay decided after the previous failure (0 after the first).
//
// The rules, in order:
//   - a nil err is not retried (Reason NoReason, Retry false);
//   - Permanent → PermanentError; an error of no class (after Classify) →
//     UnknownError;
//   - attempt >= MaxAttempts → Exhausted;
//   - delay = Schedule.Delay(attempt, prev); an After(d) error raises it to
//     at least d, where d > MaxAfter gives up with Pushback (or waits
//     MaxAfter when ClampAfter is set);
//   - now + delay >= deadline → Deadline (equality counts: there is no
//     budget left to start then);
//   - the Budget refuses → Budget (CircuitOpen when it is a circuit
//     breaker that is not closed). A Budget that allows the retry has
//     charged for it, so call Decide once per failure.
func (p *Policy) Decide(attempt int, err error, now, deadline time.Time, prev time.Duration) Decision {
	if err == nil {
		return Decision{}
	}
	if p == nil {
		p = &defaultPolicy
	}
	class, after := p.classify(err)
	d := Delivery{Attempt: attempt, Deadline: deadline, Prev: prev}
	return p.decideD(&d, p.maxAttempts(), class, after, &now)
}

// decideD is Decide after classification for the ledger d (its attempt,
// deadline and previous delay), with maxAttempts attempts allowed. The
// ledger and now are passed by reference: the retry path copies neither.
func (p *Policy) decideD(d *Delivery, maxAttempts int, class Class, after time.Duration, now *time.Time) Decision {
	switch class {
	case ClassPermanent:
		return Decision{Reason: PermanentError}
	case ClassRetryable:
	default:
		return Decision{Reason: UnknownError}
	}
	if d.Attempt >= maxAttempts {
		return Decision{Reason: Exhausted}
	}
	var delay time.Duration
	switch sc := p.schedule().(type) { // the stock schedules without a dynamic call
	case backoff.Constant:
		delay = sc.Delay(d.Attempt, d.Prev, p.Rand)
	case backoff.Exponential:
		delay = sc.Delay(d.Attempt, d.Prev, p.Rand)
	default:
		delay = sc.Delay(d.Attempt, d.Prev, p.Rand)
	}
	if after > 0 {
		if m := p.maxAfter(); after > m {
			if !p.ClampAfter {
				return Decision{Reason: Pushback}
			}
			after = m
		}
		delay = max(delay, after)
	}
	if !d.Deadline.IsZero() && !now.Add(delay).Before(d.Deadline) {
		return Decision{Reason: Deadline}
	}
	if p.Budget != nil && !p.Budget.Retry(*now) {
		return Decision{Reason: p.refused()}
	}
	return Decision{Retry: true, Delay: delay}
}

// refused is the reason a refusal by p.Budget gives: CircuitOpen when the
// budget is a circuit breaker that is not closed, Budget otherwise.
func (p *Policy) refused() Reason {
	if c, ok := p.Budget.(budget.Circuit); ok && c.State() != budget.CircuitClosed {
		return CircuitOpen
	}
	return Budget
}

// Error is returned when a retry loop gives up. It satisfies errors.Is for
// the reason's sentinel (ErrExhausted, ErrDeadline, ErrBudget, ErrLimited,
// ErrPermanent, ErrPushback, ErrCircuitOpen, context.Canceled), for the
// context's error when the context ended the loop, and for the last
// attempt's error.
type Error struct {
	Reason   Reason // why the loop stopped
	Attempts int    // attempts made
	Err      error  // the last attempt's error; nil if no attempt was made
	ctxErr   error
}

// Error describes the give-up.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("retry: gave up (")
	b.WriteString(e.Reason.String())
	b.WriteString(") after ")
	fmt.Fprintf(&b, "%d attempt", e.Attempts)
	if e.Attempts != 1 {
		b.WriteByte('s')
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the reason's sentinel, the context's error (if any) and the
// last attempt's error.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 3)
	if s := e.Reason.Err(); s != nil {
		errs = append(errs, s)
	}
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}
