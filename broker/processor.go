package broker

import (
	"context"
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
	// acknowledge the original.
	Dead
)

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
	Action    Action
	Delay     time.Duration // Retry, Park: how long the broker must hold it
	State     State         // the state to write on the parked or dead letter
	Reason    retry.Reason  // Dead: why
	Err       error         // the handler's error, if any
	Duplicate bool          // the inbox had already applied this ID
}

// Processor runs a Handler on deliveries and decides what happens next. It
// is what every broker adapter shares; it holds no per-message state and is
// safe for concurrent use.
type Processor struct {
	// Handler is the user's handler, the same one retry.Run runs.
	Handler retry.Handler
	// Policy is the retry policy: MaxAttempts, Schedule, MaxAfter, Timeout
	// (measured from the first attempt's start, carried in a header),
	// Budget, Classify and Hooks are honoured; Limiter and AttemptTimeout
	// are not (concurrency is the adapter's prefetch and workers; bound a
	// handler's time in the handler or with the broker's ack timeout).
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
	pol := p.Policy
	if pol == nil {
		pol = &retry.Policy{}
	}
	start := p.now()
	if !st.Due.IsZero() && start.Before(st.Due) {
		return Outcome{Action: Park, Delay: st.Due.Sub(start), State: st}
	}
	attempt := st.Attempts + 1
	if attempt == 1 && pol.Budget != nil && !pol.Budget.Request(start) {
		st.Reason = retry.Budget.String()
		st.Error = retry.ErrBudget.Error()
		return p.giveUp(pol, Outcome{Action: Dead, State: st, Reason: retry.Budget})
	}
	if h := pol.Hooks.OnAttempt; h != nil {
		h(retry.Event{Attempt: attempt})
	}
	hctx := retry.WithDelivery(ctx, retry.Delivery{ID: id, Attempt: attempt, MaxAttempts: p.MaxAttempts(), Source: p.Source})
	var (
		err error
		dup bool
	)
	if p.Inbox != nil && id != "" {
		dup, err = p.Inbox.Process(hctx, id, func(ctx context.Context) error { return p.Handler(ctx, payload) })
	} else {
		err = p.Handler(hctx, payload)
	}
	now := p.now()
	if pol.Budget != nil {
		c, _ := retry.Classify(err)
		pol.Budget.Result(now, err == nil || c == retry.ClassPermanent)
	}
	if err == nil {
		if h := pol.Hooks.OnSuccess; h != nil {
			h(retry.Event{Attempt: attempt})
		}
		return Outcome{Action: Ack, Duplicate: dup}
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
	var deadline time.Time
	if pol.Timeout > 0 {
		deadline = st.FirstAttempt.Add(pol.Timeout)
	}
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

func (p *Processor) giveUp(pol *retry.Policy, o Outcome) Outcome {
	if h := pol.Hooks.OnGiveUp; h != nil {
		h(retry.Event{Attempt: o.State.Attempts, Err: o.Err, Reason: o.Reason})
	}
	return o
}
