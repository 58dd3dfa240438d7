package broker

import (
	"context"
	"errors"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// Action is what an adapter must do with a delivery after [Processor.Process].
type Action uint8

const (
	// Ack: done (success, or a duplicate the inbox had already applied).
	Ack Action = iota
	// Retry: park the message for Outcome.Delay with Outcome.State, then
	// acknowledge the original (after the broker confirmed the park).
	Retry
	// Park: the message came back before its due time (a tier shorter than
	// the wait); park it again for Outcome.Delay without running the handler
	// or counting an attempt.
	Park
	// Dead: copy to the DLQ with Outcome.State (Reason set), then
	// acknowledge the original. A message whose due time fails
	// State.CheckDue is dead-lettered unhandled, with State.Reason
	// ReasonMalformed and Outcome.Reason retry.NoReason.
	Dead
)

// ReasonMalformed is the dead-letter reason (HeaderReason) of a message
// whose stagger headers do not parse (DecodeState's error) or whose due
// time fails State.CheckDue.
const ReasonMalformed = "malformed"

var actionNames = [...]string{"ack", "retry", "park", "dead"}

// String returns "ack", "retry", "park" or "dead".
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(?)"
}

// Outcome is the result of one delivery.
type Outcome struct {
	Action    Action        // what the adapter must do
	Delay     time.Duration // Retry, Park: how long the broker must hold it
	State     State         // the state to write on the parked or dead letter
	Reason    retry.Reason  // Dead: why
	Err       error         // the handler's error, if any
	Duplicate bool          // the inbox had already applied this ID
}

// Processor runs a Handler on deliveries and decides what happens next. It
// is what every broker adapter shares; it holds no per-message state and is
// safe for concurrent use.
//
// Each delivery goes through the steps every stagger driver takes
// (retry.Policy.Begin, the attempt, End, and Decide for a failure), so a
// broker retries, gives up and charges budgets exactly as retry.Do does.
type Processor struct {
	// Handler is the user's handler, the same one retry.Run runs.
	Handler retry.Handler
	// Policy is the retry policy, honoured as retry.Do honours it:
	// MaxAttempts, Schedule, MaxAfter, Timeout (measured from the first
	// attempt's start, carried in a header: a retry delivered after it is
	// dead-lettered with reason "deadline" without running), AttemptTimeout
	// (each attempt's context ends after min(AttemptTimeout, time left); an
	// unclassed error from an attempt whose own timeout fired is
	// retryable), Budget, Limiter, Classify and Hooks. Keep AttemptTimeout
	// below the broker's ack timeout (JetStream's AckWait), so an attempt
	// ends before the broker hands the message to someone else. As in
	// retry.Do, an attempt the Budget or the Limiter refuses
	// does not run and the message is dead-lettered with that reason
	// ("budget", "limited"); an adapter's own concurrency (prefetch,
	// workers) is usually the better bound for a consumer.
	Policy *retry.Policy
	// Inbox, if set, wraps the handler keyed by the message ID, so a
	// redelivered message whose effect was applied is acknowledged without
	// running the handler again. Messages without an ID bypass it.
	Inbox queue.Inbox
	// Source names the adapter in retry.Delivery ("rabbitmq", "kafka",
	// "jetstream").
	Source string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (p *Processor) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// MaxAttempts is the policy's attempt budget.
func (p *Processor) MaxAttempts() int {
	if p.Policy == nil || p.Policy.MaxAttempts == 0 {
		return retry.DefaultMaxAttempts
	}
	return p.Policy.MaxAttempts
}

// Process handles one delivery of the message id with payload, whose
// previous attempts are described by st, and returns what to do with it.
// The handler runs with a retry.Delivery in its context.
func (p *Processor) Process(ctx context.Context, id string, payload []byte, st State) Outcome {
	return p.ProcessAt(ctx, id, payload, st, time.Time{})
}

// ProcessAt is Process for a delivery the adapter took in at start, a
// reading of the Processor's clock (zero: the Processor reads it). An
// adapter that handles a batch of deliveries passes the time it received
// the batch and so saves a clock read per message. A start earlier than the
// attempt's real start is safe: a message is never handled before its due
// time, and Policy.Timeout's deadline (based on the first attempt's start)
// is never later than configured.
//
// The clock is read again only when the handler fails (the failure time
// bases the next due time, so a retry is never early) or when the policy
// has a Budget.
func (p *Processor) ProcessAt(ctx context.Context, id string, payload []byte, st State, start time.Time) Outcome {
	pol := p.Policy
	if pol == nil {
		pol = &retry.Policy{}
	}
	if start.IsZero() {
		start = p.now()
	}
	if !st.Due.IsZero() && start.Before(st.Due) {
		if err := st.CheckDue(start); err != nil {
			st.Due, st.Reason, st.Error = time.Time{}, ReasonMalformed, err.Error()
			return Outcome{Action: Dead, State: st}
		}
		return Outcome{Action: Park, Delay: st.Due.Sub(start), State: st}
	}
	attempt := st.Attempts + 1
	var deadline time.Time // Policy.Timeout, from the first attempt's start
	if pol.Timeout > 0 {
		first := st.FirstAttempt
		if first.IsZero() {
			first = start
		}
		if deadline = first.Add(pol.Timeout); !start.Before(deadline) {
			// No time left (the broker delivered the retry late): as
			// retry.Do, give up before the attempt, not after it.
			return p.refuse(pol, st, retry.Deadline)
		}
	}
	if r := pol.Begin(attempt, start); r != retry.NoReason {
		// Refused before it started, as retry.Do gives up: not an attempt.
		return p.refuse(pol, st, r)
	}
	if h := pol.Hooks.OnAttempt; h != nil {
		h(retry.Event{Attempt: attempt})
	}
	hctx := retry.WithDelivery(ctx, retry.Delivery{ID: id, Attempt: attempt, MaxAttempts: p.MaxAttempts(), Source: p.Source})
	// The attempt's own bound, as in retry.Do: min(AttemptTimeout, the
	// time left before the deadline).
	bound := pol.AttemptTimeout
	if !deadline.IsZero() {
		if left := deadline.Sub(start); bound == 0 || left < bound {
			bound = left
		}
	}
	var (
		dup bool
		err error
	)
	if bound > 0 {
		actx, cancel := context.WithTimeout(hctx, bound)
		dup, err = p.run(actx, pol, id, payload)
		if err != nil && actx.Err() != nil && ctx.Err() == nil {
			// The attempt's own timeout fired: an error without a class
			// is retryable, as in retry.Do.
			if c, _ := retry.Classify(err); c == retry.ClassUnknown && (pol.Classify == nil || pol.Classify(err) == retry.ClassUnknown) {
				err = retry.Retryable(err)
			}
		}
		cancel()
	} else {
		dup, err = p.run(hctx, pol, id, payload)
	}
	var now time.Time
	if err != nil || pol.NeedsNow() {
		now = p.now()
	}
	pol.End(err, now)
	if err == nil {
		if h := pol.Hooks.OnSuccess; h != nil {
			h(retry.Event{Attempt: attempt})
		}
		return Outcome{Action: Ack, Duplicate: dup}
	}
	if Interrupted(ctx, Outcome{Err: err}) {
		// Shutting down, and the failure is the cancellation itself: as
		// retry.Do does, a give-up for the context's reason (OnGiveUp), not
		// a retry decision. The state is returned as it came (the attempt
		// is not counted) with Park, so an adapter that does not check
		// Interrupted forwards it unchanged rather than retry or
		// dead-letter it.
		r := retry.Canceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			r = retry.Deadline
		}
		if h := pol.Hooks.OnGiveUp; h != nil {
			h(retry.Event{Attempt: attempt, Err: err, Reason: r})
		}
		return Outcome{Action: Park, State: st, Reason: r, Err: err}
	}

	st.Attempts = attempt
	st.Due = time.Time{}
	if st.FirstAttempt.IsZero() {
		st.FirstAttempt = start
	}
	if st.FirstFailure.IsZero() {
		st.FirstFailure = now
	}
	st.Error = ErrorText(err)
	dec := pol.Decide(attempt, err, now, deadline, st.Prev)
	if !dec.Retry {
		st.Reason = dec.Reason.String()
		return p.giveUp(pol, Outcome{Action: Dead, State: st, Reason: dec.Reason, Err: err})
	}
	if h := pol.Hooks.OnRetry; h != nil {
		h(retry.Event{Attempt: attempt, Delay: dec.Delay, Err: err})
	}
	st.Prev = dec.Delay
	st.Due = now.Add(dec.Delay)
	return Outcome{Action: Retry, Delay: dec.Delay, State: st, Err: err}
}

// Interrupted reports whether o is a failure caused by the end of ctx, the
// context the adapter handed to Process: ctx is done and the handler's
// error is (or wraps) ctx's error or its cause. Such a failure says
// nothing about the message, so it is not an attempt: an adapter that is
// shutting down leaves the delivery to be handled again (requeued,
// uncommitted, redelivered) instead of retrying or dead-lettering it. A
// handler that fails for its own reasons while ctx ends is still decided
// as usual.
func Interrupted(ctx context.Context, o Outcome) bool {
	if o.Err == nil || ctx.Err() == nil {
		return false
	}
	return errors.Is(o.Err, ctx.Err()) || errors.Is(o.Err, context.Cause(ctx))
}

// run calls the handler (through the inbox, when there is one). If the
// handler panics, the attempt's Limiter slot is released (as an overload
// sign) before the panic goes on, as retry.Do does: an adapter that
// recovers panics must not lose a bulkhead slot to each.
func (p *Processor) run(ctx context.Context, pol *retry.Policy, id string, payload []byte) (dup bool, err error) {
	returned := false
	defer func() {
		if !returned && pol.Limiter != nil {
			pol.Limiter.Release(false)
		}
	}()
	if p.Inbox != nil && id != "" {
		dup, err = p.Inbox.Process(ctx, id, func(ctx context.Context) error { return p.Handler(ctx, payload) })
	} else {
		err = p.Handler(ctx, payload)
	}
	returned = true
	return dup, err
}

// refuse dead-letters a delivery given up for r before its attempt: the
// state as it came, with r as the reason (and as the error, when no attempt
// failed before).
func (p *Processor) refuse(pol *retry.Policy, st State, r retry.Reason) Outcome {
	st.Due = time.Time{}
	st.Reason = r.String()
	if st.Error == "" {
		st.Error = r.Err().Error()
	}
	return p.giveUp(pol, Outcome{Action: Dead, State: st, Reason: r})
}

func (p *Processor) giveUp(pol *retry.Policy, o Outcome) Outcome {
	if h := pol.Hooks.OnGiveUp; h != nil {
		h(retry.Event{Attempt: o.State.Attempts, Err: o.Err, Reason: o.Reason})
	}
	return o
}
