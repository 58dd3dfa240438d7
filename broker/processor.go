package broker

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/staggerhq/stagger/internal/wire"
	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/retrydriver"
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
	// Interrupted: the adapter's context ended before or during the
	// attempt; nothing was decided and State is as it came (Action Park).
	Interrupted bool
}

// Processor runs a Handler on deliveries and decides what happens next. It
// is what every broker adapter shares; it holds no per-message state and is
// safe for concurrent use.
//
// Each delivery runs one attempt through retrydriver.Step, the per-attempt code
// every stagger driver runs (Begin, the attempt, End), so a broker
// retries, gives up and charges budgets exactly as retry.Do does.
type Processor struct {
	// Handler is the user's handler, the same one retry.Handler.Run runs.
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
	Inbox Inbox
	// Source names the adapter in retry.Delivery ("rabbitmq", "kafka",
	// "jetstream").
	Source string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Trace, if set, restores the trace context a message carries
	// (HeaderTraceParent, HeaderTraceState) into its handler's context
	// (WithTrace), so what the handler traces joins the producer's trace
	// on every delivery, a retry delivered much later included.
	// contrib/otel's Propagator is one.
	Trace retry.Propagator
}

// handlerContexts makes the handlers' contexts, a block of them at a time,
// for every Processor (a Processor is a value its users may copy).
var handlerContexts retrydriver.DeliveryContexts

// WithTrace returns ctx with the trace context of a message whose headers
// get reads, through Trace: ctx itself when Trace is nil or the message
// carries no traceparent. An adapter passes the result to Process.
func (p *Processor) WithTrace(ctx context.Context, get func(key string) (string, bool)) context.Context {
	if p.Trace == nil {
		return ctx
	}
	parent, _ := get(HeaderTraceParent)
	if parent == "" {
		return ctx
	}
	state, _ := get(HeaderTraceState)
	return p.Trace.Extract(ctx, parent, state)
}

func (p *Processor) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// MaxAttempts is the policy's attempt budget, as the Step counts it.
func (p *Processor) MaxAttempts() int {
	s := retrydriver.Step{Policy: p.Policy}
	return s.MaxAttempts()
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
	// Fields are set one by one: a composite literal builds the Step in a
	// temporary and copies it, and budget's own Step is not needed here.
	var s retrydriver.Step
	s.Policy = p.Policy
	s.Delivery.MaxAttempts = min1(s.MaxAttempts(), st.MaxAttempts)
	s.Delivery.ID, s.Delivery.Attempt, s.Delivery.Source = id, st.Attempts, p.Source
	s.Delivery.First, s.Delivery.Prev, s.Delivery.Deadline = st.FirstAttempt, st.Prev, st.Deadline
	if (!st.FirstAttempt.IsZero() || st.MaxAttempts != 0) && p.ledger(&s, &st, start) {
		return Outcome{Action: Dead, State: st, Reason: retry.Exhausted}
	}
	if r := s.Begin(ctx, start); r != retry.NoReason {
		if ctx.Err() != nil {
			// Shutting down before the attempt: not an attempt; the
			// delivery goes back as it came.
			return Outcome{Action: Park, State: st, Reason: r, Interrupted: true}
		}
		// Refused before it started (deadline passed, Limiter, Budget),
		// as retry.Do gives up: not an attempt.
		st.Due = time.Time{}
		st.Reason = r.String()
		if st.Error == "" {
			st.Error = r.Err().Error()
		}
		return Outcome{Action: Dead, State: st, Reason: r}
	}
	defer s.Abort() // the handler panicked: free its slot before the panic goes on
	// The handler runs in the attempt's context, with the Delivery in it.
	// If it panics, the deferred Abort releases the attempt's Limiter slot
	// (as an overload sign) before the panic goes on, as retry.Do does: an
	// adapter that recovers panics must not lose a bulkhead slot to each.
	var (
		dup bool
		err error
	)
	if hctx := handlerContexts.NewContext(s.LazyContext(), &s.Delivery); p.Inbox != nil && id != "" {
		dup, err = p.inbox(hctx, id, payload)
	} else {
		err = p.Handler(hctx, payload)
	}
	now := start
	if err != nil || s.NeedsNow(ctx) {
		now = p.now()
	}
	dec := s.End(err, now)
	if err == nil {
		return Outcome{Action: Ack, Duplicate: dup}
	}
	if dec.Interrupted {
		// The failure came while ctx ended: not decided. The state goes
		// back as it came (the attempt is not counted) with Park, so an
		// adapter that does not check Interrupted forwards it unchanged
		// rather than retry or dead-letter it.
		return Outcome{Action: Park, State: st, Reason: dec.Reason, Err: err, Interrupted: true}
	}
	st.Attempts = s.Delivery.Attempt
	st.FirstAttempt = s.Delivery.First
	st.Due = time.Time{}
	if st.FirstFailure.IsZero() {
		st.FirstFailure = now
	}
	st.Error = wire.Cut(err.Error(), MaxErrorLen)
	if !dec.Retry {
		st.Reason = dec.Reason.String()
		return Outcome{Action: Dead, State: st, Reason: dec.Reason, Err: err}
	}
	st.Prev = dec.Delay
	st.Due = dueAfter(now, dec.Delay)
	return Outcome{Action: Retry, Delay: dec.Delay, State: st, Err: err}
}

// Interrupted reports whether o is a failure caused by the end of ctx, the
// context the adapter handed to Process (Outcome.Interrupted): ctx has
// ended and the handler's error is, or wraps, ctx's error or cause.
// Such a failure says nothing about the message, so it is not an attempt:
// an adapter that is shutting down leaves the delivery to be handled again
// (requeued, uncommitted, redelivered) instead of retrying or
// dead-lettering it.
func Interrupted(ctx context.Context, o Outcome) bool {
	if o.Interrupted {
		return true
	}
	if o.Err == nil || ctx.Err() == nil {
		return false
	}
	return errors.Is(o.Err, ctx.Err()) || errors.Is(o.Err, context.Cause(ctx))
}

// inbox runs the handler through the Inbox, keyed by id.
func (p *Processor) inbox(ctx context.Context, id string, payload []byte) (dup bool, err error) {
	return p.Inbox.Process(ctx, id, func(ctx context.Context) error { return p.Handler(ctx, payload) })
}

// dueAfter is now+d rounded up to a whole millisecond, as headers hold
// whole milliseconds, so a retry read back from them is never early. It is
// now.Add(d).Truncate(time.Millisecond), plus a millisecond when that cut
// anything, in one Add: a rounded time has no monotonic reading, an exact
// one keeps now's.
func dueAfter(now time.Time, d time.Duration) time.Time {
	const ms = int64(time.Millisecond)
	// now.Nanosecond() counts from a whole second, so it and d agree on
	// where the millisecond boundaries of now+d are.
	rem := (int64(now.Nanosecond()) + int64(d)%ms) % ms
	if rem < 0 {
		rem += ms
	}
	if rem == 0 {
		return now.Add(d)
	}
	if up := time.Duration(ms - rem); d <= math.MaxInt64-up {
		return now.Add(d + up).Round(0)
	}
	t := now.Add(d).Truncate(time.Millisecond) // d near the largest Duration
	return t.Add(time.Millisecond)
}
