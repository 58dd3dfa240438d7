package sim

import (
	"errors"
	"time"

	"github.com/staggerhq/stagger/retry"
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

// driver runs one retry.Policy one step per event, in the order retry.Do
// uses: before an attempt the limiter (and, for the original, the budget's
// Request); after it the limiter's Release and the budget's Result; then
// the one decision, Policy.Decide, which itself asks the budget's Retry.
// Nothing of the decision is copied here.
type driver struct {
	p *retry.Policy
}

// begin takes what an original attempt needs; NoReason means it may start.
func (d driver) begin(now time.Time) retry.Reason {
	p := d.p
	if p.Limiter != nil && !p.Limiter.TryAcquire() {
		return retry.Limited
	}
	if p.Budget != nil && !p.Budget.Request(now) {
		if p.Limiter != nil {
			p.Limiter.Release(true)
		}
		return retry.Budget
	}
	return retry.NoReason
}

// again takes what a retry attempt needs (the budget was charged by
// Decide); NoReason means it may start.
func (d driver) again() retry.Reason {
	if l := d.p.Limiter; l != nil && !l.TryAcquire() {
		return retry.Limited
	}
	return retry.NoReason
}

// end closes attempt number attempt, which ended at now with err, and
// returns the policy's decision (the zero Decision for a success).
func (d driver) end(now time.Time, attempt int, err error, deadline time.Time, prev time.Duration) retry.Decision {
	p := d.p
	ok := err == nil
	if !ok {
		if c, _ := retry.Classify(err); c == retry.ClassPermanent {
			ok = true // the dependency answered; the content was wrong
		}
	}
	if p.Limiter != nil {
		p.Limiter.Release(ok)
	}
	if p.Budget != nil {
		p.Budget.Result(now, ok)
	}
	if err == nil {
		return retry.Decision{}
	}
	return p.Decide(attempt, err, now, deadline, prev)
}

// needsSendEvent reports whether a retry must start in an event of its own
// at the end of its wait: only a limiter acts at that instant. Without one
// a model may compute the retry's send time directly.
func (d driver) needsSendEvent() bool { return d.p.Limiter != nil }
