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

// driver runs one retry.Policy one step per event with the shipped steps
// every stagger driver uses: Policy.Begin before an attempt (limiter slot;
// the budget's Request for an original), Policy.End after it (release, the
// budget's Result), then Policy.Decide for a failure (which asks the
// budget's Retry). Nothing of the decision or its bookkeeping is copied here.
type driver struct {
	p *retry.Policy
}

// begin takes what an original attempt needs; NoReason means it may start.
func (d driver) begin(now time.Time) retry.Reason { return d.p.Begin(1, now) }

// again takes what a retry attempt needs (the budget was charged by
// Decide, so Begin reads no time for it); NoReason means it may start.
func (d driver) again() retry.Reason { return d.p.Begin(2, time.Time{}) }

// end closes attempt number attempt, which ended at now with err, and
// returns the policy's decision (the zero Decision for a success).
func (d driver) end(now time.Time, attempt int, err error, deadline time.Time, prev time.Duration) retry.Decision {
	d.p.End(err, now)
	if err == nil {
		return retry.Decision{}
	}
	return d.p.Decide(attempt, err, now, deadline, prev)
}

// needsSendEvent reports whether a retry must start in an event of its own
// at the end of its wait: only a limiter acts at that instant. Without one
// a model may compute the retry's send time directly.
func (d driver) needsSendEvent() bool { return d.p.Limiter != nil }
