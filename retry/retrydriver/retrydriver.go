// Package retrydriver is for people writing a stagger driver: code that
// runs a unit of work's attempts and waits between them its own way (a
// queue row's available_at, a broker's delay tier, a virtual clock). It
// holds [Step], the per-attempt code every stagger driver runs — the
// in-process retry.Do and retry.Hedge, the HTTP transport, the gRPC client,
// the broker processor, the durable queue and the simulator — so that the
// rules around an attempt are written once. An application that calls
// retry.Do, writes a retry.Handler or a retry.Policy does not need it.
//
// A driver is checked by the conformance suite in retry/drivertest. A
// driver runs one attempt of a unit of work at a time; running them side
// by side (hedging) is retry.Hedge's, whose halves of End stay in retry.
package retrydriver

import (
	"context"
	"time"

	"github.com/staggerhq/stagger/internal/stepcore"
	"github.com/staggerhq/stagger/retry"
)

// Step is the per-attempt code every stagger driver runs. A driver differs
// only in how it waits between attempts and where it keeps the
// retry.Delivery (the ledger) between them: in a local variable, a queue
// row or message headers.
//
// Its exported fields are:
//
//	Policy     *retry.Policy   the rules; nil means the zero Policy
//	Delivery   retry.Delivery  the ledger of the unit of work: what the
//	                           previous attempts left (Attempt made so far,
//	                           Prev, First, Deadline) going in, and what
//	                           the next attempt must carry on coming out;
//	                           a driver that persists attempts between
//	                           processes stores it with the work
//	Classifier Classifier      the driver's own classifier, for the errors
//	                           of its wire (HTTP statuses, gRPC codes); nil:
//	                           none
//
// Per attempt a driver calls, in this order:
//
//	r := s.Begin(ctx, now)   // may the attempt start? (retry.NoReason: yes)
//	actx := s.Context()      // the attempt's context, bounded
//	err := work(actx)        // the attempt
//	dec := s.End(err, now)   // judge it, decide, fire hooks
//
// and then waits dec.Delay and loops, or stops. Begin refuses a done
// context, a deadline already passed, a full Limiter and — for the first
// attempt of a unit of work — a Budget that throttles originals; it folds
// the context's deadline and Policy.Timeout (from the first attempt) into
// Delivery.Deadline, counts the attempt in Delivery.Attempt and fires
// OnAttempt. End classifies the error once (the error's own class, then
// the Classifier, then Policy.Classify; an unclassed error from an attempt
// whose own timeout fired is retryable), tells the Budget whether the
// dependency served the attempt, releases the Limiter slot, makes the one
// decision (retry.Policy.Decide's rules) and fires OnSuccess, OnRetry or
// OnGiveUp.
//
// An attempt that fails with the end of the driver's context — its error
// is, or wraps, the context's error or cause, and the context has ended —
// is interrupted: the failure says nothing about the work, so it is not
// judged and no retry is decided. End then reports Decision.Interrupted
// with reason Canceled or Deadline (OnGiveUp sees that reason). An
// in-process driver gives up; a durable one (queue, broker) hands the work
// back to be run again rather than retry or dead-letter it. A failure of
// the work's own that comes while the context ends is judged as usual (its
// attempt happened and counts); the next Begin then refuses to start
// another.
//
// now is the driver's current time; it may be the zero time when NeedsNow
// reports false (no budget, no timeouts, no deadline), so a driver can skip
// its clock. A Step is used by one goroutine at a time; the zero value with
// a Policy set is ready to use, and after a stop it may be reused for
// another unit of work once Delivery is reset.
//
// Step runs the code retry.Do runs, not a copy: retry.Do keeps its Step in
// a local variable of the same layout.
type Step stepcore.Step[retry.Policy, retry.Delivery, retry.Class, retry.Reason]

// Classifier is a driver's own classifier ([Step]'s Classifier field): End
// asks it about an error that carries no class of its own, before
// Policy.Classify, so that one order holds for every driver.
type Classifier = func(err error) Verdict

// Verdict is what a driver's Classifier says of an attempt's error. Its
// fields:
//
//	Class   retry.Class    the error's class; retry.ClassUnknown leaves it
//	                       to Policy.Classify
//	After   time.Duration  the wait the dependency asked for (pushback), 0
//	                       when none
//	Ended   bool           the error is the driver's word for the end of a
//	                       context (a gRPC status CANCELLED or
//	                       DEADLINE_EXCEEDED), which wraps no context
//	                       error: when the driver's context has ended, the
//	                       attempt is interrupted, as one failing with the
//	                       context's own error is
//	Expired bool           the error reports a deadline that passed (a
//	                       gRPC status DEADLINE_EXCEEDED): when the attempt
//	                       ran under its own timeout and the driver's
//	                       context is live, the attempt expired — the
//	                       own-timeout rule, even if the answer came a
//	                       moment before the attempt's own timer fired
type Verdict = stepcore.Verdict[retry.Class]

type core = stepcore.Step[retry.Policy, retry.Delivery, retry.Class, retry.Reason]

// The methods below run retry's step on s: retry.Decision.Step converts s
// to it (its argument's type is internal, so only this package calls it),
// and the calls are direct, as retry.Do's are.

// NeedsNow reports whether Begin and End with ctx use their now argument:
// with no Budget, no timeouts and no deadline (carried or ctx's) they do
// not, and a driver may pass the zero time.
func (s *Step) NeedsNow(ctx context.Context) bool {
	return retry.Decision{}.Step((*core)(s)).NeedsNow(ctx)
}

// Begin asks whether attempt Delivery.Attempt+1 may start at now under ctx
// (context.Background for a driver without one, such as the simulator). It
// returns retry.NoReason and counts the attempt, or the reason the unit of
// work stops before it: Canceled or Deadline (ctx done, or the deadline
// passed or left no time for the attempt), Limited (no Limiter slot) or
// Budget (the Budget throttles an original; CircuitOpen for an open
// circuit breaker). A refusal holds nothing, fires OnGiveUp and leaves
// Delivery as it was.
//
// On the first attempt Begin sets Delivery.First to now; on every attempt
// it folds ctx's deadline and Policy.Timeout (from First) into
// Delivery.Deadline, so the deadline carried on never moves later.
func (s *Step) Begin(ctx context.Context, now time.Time) retry.Reason {
	return retry.Decision{}.Step((*core)(s)).Begin(ctx, now)
}

// Resume makes s the Step of an attempt that Begin started on another Step
// value of the same unit of work, for a driver that keeps only the
// Delivery while an attempt is in flight (the simulator keeps millions): s
// then holds the attempt's Limiter slot, and End judges the attempt.
func (s *Step) Resume() { retry.Decision{}.Step((*core)(s)).Resume() }

// Context returns the attempt's context: the ctx given to Begin, bounded
// by min(Policy.AttemptTimeout, time left before Delivery.Deadline) when
// either applies. End (or Release, after Hold) cancels it. Drivers that
// run no context-taking work (the simulator) need not call it.
func (s *Step) Context() context.Context { return retry.Decision{}.Step((*core)(s)).Context() }

// LazyContext is Context for a driver that hands the context to work it
// does not know (the queue's handlers): the same bounded context, ended
// the same way, whose timer, Done channel and place among the parent's
// children are made when the work first watches Done. Work that never
// does (a handler that computes, writes to memory or checks ctx.Err())
// saves them; work that does costs one allocation more than Context. A
// driver whose own work watches Done at once (a network call) calls
// Context.
func (s *Step) LazyContext() context.Context {
	return retry.Decision{}.Step((*core)(s)).LazyContext()
}

// Hold makes the next End keep the attempt's Limiter slot and context
// after judging it, for a driver that hands a result to the caller which
// still uses them (the HTTP transport's response body). Call Release when
// the caller is done.
func (s *Step) Hold() { retry.Decision{}.Step((*core)(s)).Hold() }

// Release gives back what an attempt ended under Hold kept: its Limiter
// slot (with the outcome End judged) and its context. It is idempotent.
func (s *Step) Release() { retry.Decision{}.Step((*core)(s)).Release() }

// Postpone ends an attempt whose work asked to run later instead of
// succeeding or failing (the queue's Snooze): nothing is judged, so no
// hook fires and the Budget is not told, and the Limiter slot is released
// as served (the dependency was not refused).
func (s *Step) Postpone() { retry.Decision{}.Step((*core)(s)).Postpone() }

// Abort ends an attempt that did not return (a panic): its Limiter slot is
// released as an overload sign and its context canceled. A driver defers
// it around the attempt; after End (or Release) it does nothing.
func (s *Step) Abort() { retry.Decision{}.Step((*core)(s)).Abort() }

// Resend counts a re-send of the current attempt that the driver could not
// prevent and that starts at once (net/http writes a request again on a
// fresh connection when a reused one closed before answering). It counts
// as a new attempt: it needs an attempt left (Delivery.MaxAttempts or the
// Policy's) and the Budget's permission for a retry, and fires OnRetry
// (delay 0) and OnAttempt. It returns false, counting nothing, when either
// refuses; the driver must then stop the re-send.
func (s *Step) Resend(now time.Time) bool { return retry.Decision{}.Step((*core)(s)).Resend(now) }

// Classify returns the class of an attempt's error and the wait it asks
// for by the order End applies: the error's own class (retry.Classify),
// then the Step's Classifier, then Policy.Classify. (The own-timeout and
// interrupted rules need the attempt's end: End applies them.) A driver
// that must know the class before End — to read a response's Retry-After
// only for a retryable answer — calls it, and End then does not ask
// Classifier or Policy.Classify about err again.
func (s *Step) Classify(err error) (retry.Class, time.Duration) {
	return retry.Decision{}.Step((*core)(s)).Classify(err)
}

// End judges the attempt Begin started, which ended at now with err, and
// returns the decision: the zero Decision for a success, Retry with the
// wait before the next attempt, or the reason the unit of work stops. See
// [Step] for the rules, and retry.Policy.Decide for the decision's.
func (s *Step) End(err error, now time.Time) retry.Decision {
	return retry.Decision{}.Step((*core)(s)).End(err, now)
}

// Do runs the attempts of the unit of work that are left in process, as
// retry.Do runs them: the Delivery carried in (attempts already made, the
// deadline, MaxAttempts, ID) counts, so work handed over from another
// driver continues with what is left rather than a fresh budget. fn is
// called once per attempt with the attempt's context and may read
// s.Delivery (the attempt number, the ID) for the attempt it runs.
func (s *Step) Do(ctx context.Context, fn func(context.Context) error) error {
	return retry.Decision{}.Step((*core)(s)).Do(ctx, fn)
}

// Err returns the error a driver returns when the unit of work stopped
// without success: a *retry.Error with the reason, the attempts made and
// the last attempt's error (errors.Is also matches the context's error
// when the context ended it), or the last error itself for UnknownError.
// It is nil while the work goes on or after a success.
func (s *Step) Err() error { return retry.Decision{}.Step((*core)(s)).Err() }

// Reason is why the unit of work stopped (retry.NoReason while it goes
// on).
func (s *Step) Reason() retry.Reason { return retry.Decision{}.Step((*core)(s)).Reason() }

// Judged returns the class the last attempt's error was judged by (every
// rule applied: its own class, the Classifier, Policy.Classify, the own
// timeout) and the wait it asked for, for a driver that hands that error
// on marked with its class (Retryable, Permanent, After), so a caller that
// retries in turn reads the same class. ClassUnknown before any attempt
// ended or after a success.
func (s *Step) Judged() (retry.Class, time.Duration) {
	return retry.Decision{}.Step((*core)(s)).Judged()
}

// MaxAttempts is the number of attempts the unit of work may make:
// Delivery.MaxAttempts when set, else the Policy's (0 there means
// retry.DefaultMaxAttempts).
func (s *Step) MaxAttempts() int { return retry.Decision{}.Step((*core)(s)).MaxAttempts() }
