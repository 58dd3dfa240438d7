package retry

import (
	"context"
	"errors"
	"time"
)

// Step is the per-attempt code every stagger driver runs: the in-process
// loop ([Do]), the HTTP transport, the broker processor, the durable queue
// and the simulator. A driver differs only in how it waits between attempts
// and where it keeps the [Delivery] (the ledger) between them: in a local
// variable, a queue row or message headers.
//
// Per attempt a driver calls, in this order:
//
//	r := s.Begin(ctx, now)   // may the attempt start? (NoReason: yes)
//	actx := s.Context()      // the attempt's context, bounded
//	err := work(actx)        // the attempt
//	dec := s.End(err, now)   // judge it, decide, fire hooks
//
// and then waits dec.Delay and loops, or stops. Begin refuses a done
// context, a deadline already passed, a full Limiter and — for the first
// attempt of a unit of work — a Budget that throttles originals; it counts
// the attempt in Delivery.Attempt and fires OnAttempt. End classifies the
// error once (an unclassed error from an attempt whose own timeout fired is
// retryable; Policy.Classify judges the rest), tells the Budget whether the
// dependency served the attempt, releases the Limiter slot, makes the one
// decision ([Policy.Decide]'s rules) and fires OnSuccess, OnRetry or
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
type Step struct {
	// Policy holds the rules; nil means the zero Policy.
	Policy *Policy
	// Delivery is the ledger of the unit of work: what the previous
	// attempts left (Attempt made so far, Prev, First, Deadline) going in,
	// and what the next attempt must carry on coming out. A driver that
	// persists attempts between processes stores it with the work.
	Delivery Delivery

	ctx    context.Context    // the driver's context of the attempt in flight
	actx   context.Context    // the attempt's own bounded context; nil when none
	cancel context.CancelFunc // cancels actx
	bound  time.Duration      // the attempt's bound, 0 when none
	held   bool               // a Limiter slot is held
	keep   bool               // End keeps the slot and actx (Hold)
	served bool               // the last attempt's outcome, as the Budget heard it
	reason Reason             // why the unit of work stopped; NoReason while it goes on
	last   error              // the last attempt's error
	ctxErr error              // the context's error when the context ended the work
	folded bool               // the context's deadline (dline) is folded into Delivery
	quiet  bool               // set by loop: its ctx's Done is nil, so the ctx is never done and Err need not be asked
	dline  time.Time
}

func (s *Step) policy() *Policy {
	if s.Policy == nil {
		return &defaultPolicy
	}
	return s.Policy
}

// NeedsNow reports whether Begin and End with ctx use their now argument:
// with no Budget, no timeouts and no deadline (carried or ctx's) they do
// not, and a driver may pass the zero time.
func (s *Step) NeedsNow(ctx context.Context) bool {
	if s.needsNow() {
		return true
	}
	if ctx != nil && ctx != s.ctx { // Begin folded s.ctx's deadline in already
		if _, ok := ctx.Deadline(); ok {
			return true
		}
	}
	return false
}

// needsNow is NeedsNow once Begin has folded ctx's deadline into
// Delivery.Deadline.
func (s *Step) needsNow() bool {
	p := s.policy()
	return p.Budget != nil || p.Timeout > 0 || !s.Delivery.Deadline.IsZero()
}

// Begin asks whether attempt Delivery.Attempt+1 may start at now under
// ctx (context.Background for a driver without one, such as the
// simulator). It returns
// NoReason and counts the attempt, or the reason the unit of work stops
// before it: Canceled or Deadline (ctx done, or the deadline passed or
// left no time for the attempt), Limited (no Limiter slot) or Budget (the
// Budget throttles an original; CircuitOpen for an open circuit breaker). A refusal holds nothing, fires OnGiveUp
// and leaves Delivery as it was.
//
// On the first attempt Begin sets Delivery.First to now; on every attempt
// it folds ctx's deadline and Policy.Timeout (from First) into
// Delivery.Deadline, so the deadline carried on never moves later.
func (s *Step) Begin(ctx context.Context, now time.Time) Reason {
	p := s.policy()
	d := &s.Delivery
	s.ctx, s.actx, s.cancel, s.bound, s.keep = ctx, nil, nil, 0, false
	if ctx != nil && !s.quiet {
		if err := ctx.Err(); err != nil {
			s.ctxErr = err
			return s.stop(ctxReason(err))
		}
	}
	if ctx != nil && (!s.folded || d.Attempt == 0) { // once per unit of work
		s.fold(ctx)
	}
	bound := p.AttemptTimeout
	if p.Timeout > 0 || !d.Deadline.IsZero() {
		var r Reason
		if bound, r = s.deadline(p, now, bound); r != NoReason {
			return r
		}
	}
	if p.Limiter != nil || d.Attempt == 0 && p.Budget != nil {
		if r := s.admit(p, now); r != NoReason {
			return r
		}
	}
	s.bound = bound
	if d.First.IsZero() {
		d.First = now
	}
	d.Attempt++
	p.Hooks.attempt(d.Attempt)
	return NoReason
}

// fold folds ctx's deadline into the ledger's (Begin's first step of a
// unit of work).
func (s *Step) fold(ctx context.Context) {
	s.folded, s.dline = true, time.Time{}
	if dl, ok := ctx.Deadline(); ok {
		s.dline = dl
		s.Delivery.Deadline = earlier(s.Delivery.Deadline, dl)
	}
}

// deadline is Begin's rule for the deadline: Policy.Timeout from the
// first attempt folded into the ledger's deadline, and the attempt's bound
// (AttemptTimeout, given as bound) cut to the time left. It returns the
// bound, or Deadline (a give-up) when no time is left.
func (s *Step) deadline(p *Policy, now time.Time, bound time.Duration) (time.Duration, Reason) {
	d := &s.Delivery
	if p.Timeout > 0 {
		first := d.First
		if first.IsZero() {
			first = now
		}
		if !first.IsZero() {
			d.Deadline = earlier(d.Deadline, first.Add(p.Timeout))
		}
	}
	if !d.Deadline.IsZero() {
		left := d.Deadline.Sub(now)
		if left <= 0 {
			return 0, s.stop(Deadline)
		}
		if (bound == 0 || left < bound) && !d.Deadline.Equal(s.dline) {
			bound = left // ctx's own deadline needs no second timer
		}
	}
	return bound, NoReason
}

// admit is Begin's admission: a Limiter slot, then for an original the
// Budget's permission. It returns the refusal's reason, holding nothing,
// or NoReason with the slot held.
func (s *Step) admit(p *Policy, now time.Time) Reason {
	if p.Limiter != nil && !p.Limiter.TryAcquire() {
		return s.stop(Limited)
	}
	if s.Delivery.Attempt == 0 && p.Budget != nil && !p.Budget.Request(now) {
		if p.Limiter != nil {
			p.Limiter.Release(true) // nothing was sent
		}
		return s.stop(p.refused())
	}
	s.held = p.Limiter != nil
	return NoReason
}

// Resume makes s the Step of an attempt that Begin started on another
// Step value of the same unit of work, for a driver that keeps only the
// Delivery while an attempt is in flight (the simulator keeps millions):
// s then holds the attempt's Limiter slot, and End judges the attempt.
func (s *Step) Resume() { s.held = s.policy().Limiter != nil }

// Context returns the attempt's context: the ctx given to Begin, bounded
// by min(Policy.AttemptTimeout, time left before Delivery.Deadline) when
// either applies. End (or Release, after Hold) cancels it. Drivers that
// run no context-taking work (the simulator) need not call it.
func (s *Step) Context() context.Context {
	if s.bound <= 0 {
		return s.ctx
	}
	return s.bounded()
}

// bounded makes the attempt's bounded context (Context's slow path, apart
// so that Context inlines).
//
//go:noinline
func (s *Step) bounded() context.Context {
	s.actx, s.cancel = context.WithTimeout(s.ctx, s.bound)
	return s.actx
}

// Hold makes the next End keep the attempt's Limiter slot and context
// after judging it, for a driver that hands a result to the caller which
// still uses them (the HTTP transport's response body). Call Release when
// the caller is done.
func (s *Step) Hold() { s.keep = true }

// Release gives back what an attempt ended under Hold kept: its Limiter
// slot (with the outcome End judged) and its context. It is idempotent.
func (s *Step) Release() {
	if s.cancel != nil || s.held {
		s.free(s.served)
	}
}

// free, the work of Release, Abort and Postpone (apart so that they
// inline), cancels the attempt's context and gives back its Limiter slot, as
// served or not.
func (s *Step) free(served bool) {
	if s.cancel != nil {
		s.cancel()
		s.cancel = nil
	}
	if s.held {
		s.held = false
		s.policy().Limiter.Release(served)
	}
}

// Postpone ends an attempt whose work asked to run later instead of
// succeeding or failing (the queue's Snooze): nothing is judged, so no hook
// fires and the Budget is not told, and the Limiter slot is released as
// served (the dependency was not refused).
func (s *Step) Postpone() {
	s.free(true)
	s.actx = nil
}

// Abort ends an attempt that did not return (a panic): its Limiter slot is
// released as an overload sign and its context canceled. A driver defers
// it around the attempt; after End (or Release) it does nothing.
func (s *Step) Abort() {
	if s.cancel != nil || s.held {
		s.free(false)
	}
}

// Resend counts a re-send of the current attempt that the driver could not
// prevent and that starts at once (net/http writes a request again on a
// fresh connection when a reused one closed before answering). It counts
// as a new attempt: it needs an attempt left (Delivery.MaxAttempts or the
// Policy's) and the Budget's permission for a retry, and fires OnRetry
// (delay 0) and OnAttempt. It returns false, counting nothing, when either
// refuses; the driver must then stop the re-send.
func (s *Step) Resend(now time.Time) bool {
	p := s.policy()
	d := &s.Delivery
	if d.Attempt >= s.maxAttempts(p) {
		return false
	}
	if p.Budget != nil && !p.Budget.Retry(now) {
		return false
	}
	if h := p.Hooks.OnRetry; h != nil {
		h(Event{Attempt: d.Attempt, Err: errResent})
	}
	d.Attempt++
	d.Prev = 0
	p.Hooks.attempt(d.Attempt)
	return true
}

var errResent = errors.New("retry: re-sent at once on a new connection")

// End judges the attempt Begin started, which ended at now with err, and
// returns the decision: the zero Decision for a success, Retry with the
// wait before the next attempt, or the reason the unit of work stops. See
// [Step] for the rules, and [Policy.Decide] for the decision's.
func (s *Step) End(err error, now time.Time) Decision {
	p := s.policy()
	d := &s.Delivery
	expired := err != nil && s.actx != nil && s.actx.Err() != nil && (s.quiet || s.ctx.Err() == nil)
	var (
		class Class
		after time.Duration
	)
	if err != nil {
		if c, ok := err.(*classified); ok { // Retryable, Permanent, After: no call
			class, after = c.class, c.after
		} else {
			class, after = p.classify(err)
		}
		if class == ClassUnknown && expired {
			class = ClassRetryable // the attempt's own timeout fired
		}
	}
	s.served = err == nil || class == ClassPermanent
	if p.Budget != nil {
		p.Budget.Result(now, s.served)
	}
	if !s.keep {
		s.Release()
	}
	s.actx = nil
	if err == nil {
		s.reason, s.last = NoReason, nil
		p.Hooks.success(d.Attempt)
		return Decision{}
	}
	s.last = err
	if s.ctx != nil && !s.quiet {
		if cerr := s.ctx.Err(); cerr != nil && (errors.Is(err, cerr) || errors.Is(err, context.Cause(s.ctx))) {
			s.ctxErr = cerr
			s.stop(ctxReason(cerr))
			return Decision{Reason: s.reason, Interrupted: true}
		}
	}
	dec := p.decideD(d, s.maxAttempts(p), class, after, &now)
	if !dec.Retry {
		s.stop(dec.Reason)
		return dec
	}
	if h := p.Hooks.OnRetry; h != nil {
		h(Event{Attempt: d.Attempt, Delay: dec.Delay, Err: err})
	}
	d.Prev = dec.Delay
	return dec
}

// Do runs the attempts of the unit of work that are left in process, as
// [Do] runs them: the Delivery carried in (attempts already made, the
// deadline, MaxAttempts, ID) counts, so work handed over from another
// driver continues with what is left rather than a fresh budget. fn is
// called once per attempt with the attempt's context and may read
// s.Delivery (the attempt number, the ID) for the attempt it runs.
func (s *Step) Do(ctx context.Context, fn func(context.Context) error) error {
	if err := s.policy().Validate(); err != nil {
		return err
	}
	if fn == nil {
		return errNilFunc
	}
	return s.loop(ctx, fn, nil)
}

// Err returns the error a driver returns when the unit of work stopped
// without success: a [*Error] with the reason, the attempts made and the
// last attempt's error (errors.Is also matches the context's error when
// the context ended it), or the last error itself for UnknownError. It is
// nil while the work goes on or after a success.
func (s *Step) Err() error {
	switch s.reason {
	case NoReason:
		return nil
	case UnknownError:
		if s.last != nil {
			return s.last
		}
	}
	return &Error{Reason: s.reason, Attempts: s.Delivery.Attempt, Err: s.last, ctxErr: s.ctxErr}
}

// Reason is why the unit of work stopped (NoReason while it goes on).
func (s *Step) Reason() Reason { return s.reason }

// stop records a give-up for r and fires OnGiveUp.
func (s *Step) stop(r Reason) Reason {
	s.reason = r
	if h := s.policy().Hooks.OnGiveUp; h != nil {
		h(Event{Attempt: s.Delivery.Attempt, Err: s.last, Reason: r})
	}
	return r
}

func (s *Step) maxAttempts(p *Policy) int {
	if s.Delivery.MaxAttempts > 0 {
		return s.Delivery.MaxAttempts
	}
	return p.maxAttempts()
}

// classify is Classify, with Policy.Classify judging errors of no class.
func (p *Policy) classify(err error) (Class, time.Duration) {
	class, after := Classify(err)
	if class == ClassUnknown && p.Classify != nil {
		class = p.Classify(err)
	}
	return class, after
}

func earlier(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func ctxReason(err error) Reason {
	if errors.Is(err, context.DeadlineExceeded) {
		return Deadline
	}
	return Canceled
}
