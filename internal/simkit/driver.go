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
// retrydriver.Step every stagger driver uses: Begin before an attempt
// (limiter slot; the budget's Request for an original; Policy.Timeout
// folded into the request's deadline), End after it (the budget's Result,
// the release, the decision — which asks the budget's Retry — and the
// delay it decided, kept for the next decision). A model keeps only the
// attempt number and the ledger of a request in flight; the Step is
// rebuilt from them at each event (Step.Resume). Nothing of the decision
// or its bookkeeping is copied here.
type driver struct {
	p *retry.Policy
}

// ledger is what a model keeps of a request's retry.Delivery between
// events, packed (the simulator keeps millions): its deadline and the
// delay decided after its last failure. The Step sets both — Begin folds
// Policy.Timeout (and any deadline the model gave) into the deadline, End
// records the delay — as it sets them in a queue row or message headers.
// The attempt number the model counts itself, with its sends.
type ledger struct {
	deadline int64 // Delivery.Deadline as ns after Epoch, plus one; 0: none
	prev     time.Duration
}

// withDeadline returns a ledger whose request must be done by t (the zero
// time: none), for a model whose requests carry a deadline of their own.
func withDeadline(t time.Time) ledger {
	if t.IsZero() {
		return ledger{}
	}
	return ledger{deadline: int64(t.Sub(Epoch)) + 1}
}

// load puts the ledger, for attempt number attempt, in d. A nil ledger is
// that of a request a model keeps nothing of: one that makes one attempt
// and uses no decision after it (a thread or connection held and given
// back).
func (l *ledger) load(d *retry.Delivery, attempt int) {
	d.Attempt = attempt
	if l == nil {
		return
	}
	d.Prev = l.prev
	if l.deadline != 0 {
		d.Deadline = Epoch.Add(time.Duration(l.deadline - 1))
	}
}

// keep takes the ledger back from d.
func (l *ledger) keep(d *retry.Delivery) {
	if l == nil {
		return
	}
	l.prev = d.Prev
	if !d.Deadline.IsZero() {
		l.deadline = int64(d.Deadline.Sub(Epoch)) + 1
	}
}

// begin takes what an original attempt needs, for the request whose
// ledger is l; NoReason means it may start.
func (d driver) begin(l *ledger, now time.Time) retry.Reason {
	var s retrydriver.Step
	s.Policy = d.p
	l.load(&s.Delivery, 0)
	r := s.Begin(context.Background(), now)
	l.keep(&s.Delivery)
	return r
}

// again takes what a retry attempt of the request whose ledger is l
// needs at now (the budget was charged by the decision); NoReason means
// it may start. The models' policies carry no hooks, so the attempt number
// the Step reports to OnAttempt is not tracked here (see againN).
func (d driver) again(l *ledger, now time.Time) retry.Reason { return d.againN(l, 2, now) }

// againN is again for attempt number n (2 or more).
func (d driver) againN(l *ledger, n int, now time.Time) retry.Reason {
	var s retrydriver.Step
	s.Policy = d.p
	l.load(&s.Delivery, n-1)
	return s.Begin(context.Background(), now)
}

// end closes attempt number attempt of the request whose ledger is l,
// which ended at now with err, and returns the policy's decision (the zero
// Decision for a success).
func (d driver) end(l *ledger, now time.Time, attempt int, err error) retry.Decision {
	// fields set one by one: a composite literal here is built in a
	// temporary and copied, two passes over the Step per event
	var s retrydriver.Step
	s.Policy = d.p
	l.load(&s.Delivery, attempt)
	s.Resume()
	dec := s.End(err, now)
	l.keep(&s.Delivery)
	return dec
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
