package simkit

import (
	"context"
	"errors"
	"time"

	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/retrydriver"
)

// Errors the simulated servers answer with. They are created once and
// classified Retryable, so every failure goes through the shipped
// retry.Classify and Policy.Decide without allocating.
var (
	// ErrDown is the answer of a server inside its outage.
	ErrDown = retry.Retryable(errors.New("sim: server down"))
	// ErrConflict is a conditional write that lost (optimistic concurrency).
	ErrConflict = retry.Retryable(errors.New("sim: write conflict"))
	// ErrFailed is a Bernoulli failure.
	ErrFailed = retry.Retryable(errors.New("sim: call failed"))
	// ErrTimeout is a client-side timeout: the server may still be working.
	ErrTimeout = retry.Retryable(errors.New("sim: timeout"))
)

// driver runs one retry.Policy one step per event with the shipped
// retrydriver.Step every stagger driver uses: Begin before an attempt (limiter
// slot; the budget's Request for an original), End after it (the budget's
// Result, the release, the decision — which asks the budget's Retry).
// A model keeps only the attempt number, deadline and previous delay of a
// request in flight; the Step is rebuilt from them at each event
// (Step.Resume). Nothing of the decision or its bookkeeping is copied here.
type driver struct {
	p *retry.Policy
}

// begin takes what an original attempt needs; NoReason means it may start.
func (d driver) begin(now time.Time) retry.Reason {
	s := retrydriver.Step{Policy: d.p}
	return s.Begin(context.Background(), now)
}

// again takes what a retry attempt needs (the budget was charged by
// the decision, so Begin reads no time for it); NoReason means it may
// start. The models' policies carry no hooks, so the attempt number the
// Step reports to OnAttempt is not tracked here (see againN).
func (d driver) again() retry.Reason { return d.againN(2) }

// againN is again for attempt number n (2 or more).
func (d driver) againN(n int) retry.Reason {
	s := retrydriver.Step{Policy: d.p, Delivery: retry.Delivery{Attempt: n - 1}}
	return s.Begin(context.Background(), time.Time{})
}

// end closes attempt number attempt, which ended at now with err, and
// returns the policy's decision (the zero Decision for a success).
func (d driver) end(now time.Time, attempt int, err error, deadline time.Time, prev time.Duration) retry.Decision {
	// fields set one by one: a composite literal here is built in a
	// temporary and copied, two passes over the Step per event
	var s retrydriver.Step
	s.Policy = d.p
	s.Delivery.Attempt, s.Delivery.Deadline, s.Delivery.Prev = attempt, deadline, prev
	s.Resume()
	return s.End(err, now)
}

// plain reports whether the policy's Step has nothing to do around its
// decision: no Budget to tell the outcome, no Limiter slot to release, no
// hooks to call and no Timeout for Begin to fold into the deadline. End
// is then Policy.Decide itself, which decide calls without building a
// Step; the decision shares nothing with other requests but the policy's
// Rand, and with no deadline given it reads no clock (the Step's NeedsNow
// is false), so now may be the zero time (TestDriverPlain checks all
// three). Classify, AttemptTimeout and Clock change nothing here: End and
// Decide classify alike, and the simulator runs no attempt context and
// reads no clock.
func (d driver) plain() bool {
	h := &d.p.Hooks
	return d.p.Budget == nil && d.p.Limiter == nil && d.p.Timeout == 0 &&
		h.OnAttempt == nil && h.OnRetry == nil && h.OnSuccess == nil && h.OnGiveUp == nil
}

// decide is end for a plain policy: the shipped Policy.Decide.
func (d driver) decide(now time.Time, attempt int, err error, deadline time.Time, prev time.Duration) retry.Decision {
	return d.p.Decide(attempt, err, now, deadline, prev)
}

// needsSendEvent reports whether a retry must start in an event of its own
// at the end of its wait, where the Step's Begin runs: a limiter acts at
// that instant, and an OnAttempt hook reports the attempt then. Without
// either a model may compute the retry's send time directly (the decision
// already kept it before the deadline).
func (d driver) needsSendEvent() bool { return d.p.Limiter != nil || d.p.Hooks.OnAttempt != nil }
