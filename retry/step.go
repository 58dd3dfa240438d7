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
	// Classifier, if set, is the driver's own classifier, for the errors
	// of its wire (HTTP statuses, gRPC codes): End asks it about an error
	// that carries no class of its own, before Policy.Classify, so that
	// one order holds for every driver. nil: none.
	Classifier Classifier

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
	hedge  bool               // BeginHedge: a refusal is no give-up
	pre    bool               // Classify judged the error End gets: End takes preC, preA, preE and preX for it when it carries no class
	preE   bool               // its Verdict's Ended
	preX   bool               // its Verdict's Expired
	preC   Class
	preA   time.Duration
	lastC  Class         // the class the last attempt was judged by
	lastA  time.Duration // and the wait it asked for
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
	s.ctx, s.actx, s.cancel, s.bound, s.keep, s.pre = ctx, nil, nil, 0, false, false
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
	if p.Limiter != nil || p.Budget != nil && (d.Attempt == 0 || s.hedge) {
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

// BeginHedge begins an attempt that runs beside those already in flight
// (a hedged request), as Begin does, with two differences: the Budget
// must allow it as it allows a retry (gRPC A6 counts hedged attempts
// toward throttling), and a refusal is not a give-up — it fires no hook,
// records no reason, holds nothing and leaves Delivery as it was, so the
// driver may try again later. The attempt it begins is judged with Judge.
func (s *Step) BeginHedge(ctx context.Context, now time.Time) Reason {
	s.hedge = true
	r := s.Begin(ctx, now)
	s.hedge = false
	return r
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
	if p.Budget != nil && (s.Delivery.Attempt == 0 && !p.Budget.Request(now) || s.hedge && !p.Budget.Retry(now)) {
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

// Classifier is a driver's own classifier ([Step.Classifier]).
type Classifier func(err error) Verdict

// Verdict is what a driver's Classifier says of an attempt's error.
type Verdict struct {
	// Class is the error's class; ClassUnknown leaves it to
	// Policy.Classify.
	Class Class
	// After is the wait the dependency asked for (pushback), 0 when none.
	After time.Duration
	// Ended: the error is the driver's word for the end of a context (a
	// gRPC status CANCELLED or DEADLINE_EXCEEDED), which wraps no context
	// error: when the driver's context has ended, the attempt is
	// interrupted, as one failing with the context's own error is.
	Ended bool
	// Expired: the error reports a deadline that passed (a gRPC status
	// DEADLINE_EXCEEDED). When the attempt ran under its own timeout and
	// the driver's context is live, the attempt expired — the own-timeout
	// rule, even if the answer came a moment before the attempt's own
	// timer fired.
	Expired bool
}

// Judgement is what Judge found of an attempt: the input of Conclude.
type Judgement struct {
	// Err is the attempt's error; nil for a success.
	Err error
	// Attempt is the attempt's number.
	Attempt int
	// Class and After are the error's class (after every rule: its own,
	// the driver's Classifier, Policy.Classify, the own timeout) and the
	// wait it asks for.
	Class Class
	After time.Duration
	// Interrupted: the attempt failed with the end of the driver's
	// context; Reason is Canceled or Deadline.
	Interrupted bool
	Reason      Reason
	ctxErr      error
}

// Classify returns the class of an attempt's error and the wait it asks
// for by the order End applies: the error's own class (see the package
// function Classify), then the Step's Classifier, then Policy.Classify.
// (The own-timeout and interrupted rules need the attempt's end: End
// applies them.) A driver that must know the class before End — to read a
// response's Retry-After only for a retryable answer — calls it, and End
// then does not ask Classifier or Policy.Classify about err again.
func (s *Step) Classify(err error) (Class, time.Duration) {
	class, after, v := s.classify(s.policy(), err)
	s.pre, s.preC, s.preA, s.preE, s.preX = true, class, after, v.Ended, v.Expired
	return class, after
}

// classify is Classify's order, with the Classifier's verdict.
func (s *Step) classify(p *Policy, err error) (Class, time.Duration, Verdict) {
	if c, ok := err.(*classified); ok { // Retryable, Permanent, After: no call
		return c.class, c.after, Verdict{}
	}
	class, after := Classify(err)
	if class != ClassUnknown {
		return class, after, Verdict{}
	}
	if s.pre {
		s.pre = false
		return s.preC, s.preA, Verdict{Ended: s.preE, Expired: s.preX}
	}
	var v Verdict
	if s.Classifier != nil {
		v = s.Classifier(err)
		class, after = v.Class, v.After
	}
	if class == ClassUnknown && p.Classify != nil {
		class = p.Classify(err)
	}
	return class, after, v
}

// End judges the attempt Begin started, which ended at now with err, and
// returns the decision: the zero Decision for a success, Retry with the
// wait before the next attempt, or the reason the unit of work stops. See
// [Step] for the rules, and [Policy.Decide] for the decision's. End is
// Judge followed by Conclude.
func (s *Step) End(err error, now time.Time) Decision {
	class, after, intr := s.judge(err, now)
	return s.conclude(err, s.Delivery.Attempt, class, after, intr, s.ctxErr, &now)
}

// Judge ends the attempt Begin (or BeginHedge) started, which ended at now
// with err, as End does — the error classified once, the Budget told
// whether the dependency served it, the Limiter slot released (Hold keeps
// it) — but decides nothing and fires no hook. It is End's first half, for
// a driver whose attempts run side by side (a hedge): it judges each as it
// ends, and calls Conclude, on the Step holding the unit of work's ledger,
// when one ends the work or the last in flight has failed.
func (s *Step) Judge(err error, now time.Time) Judgement {
	class, after, intr := s.judge(err, now)
	j := Judgement{Err: err, Attempt: s.Delivery.Attempt, Class: class, After: after}
	if intr != NoReason {
		j.Interrupted, j.Reason, j.ctxErr = true, intr, s.ctxErr
	}
	return j
}

// judge is Judge's work: the class and wait of err, and the reason (Canceled
// or Deadline, with s.ctxErr set) when the attempt was interrupted.
func (s *Step) judge(err error, now time.Time) (class Class, after time.Duration, intr Reason) {
	p := s.policy()
	if err != nil {
		var v Verdict
		if c, ok := err.(*classified); ok { // Retryable, Permanent, After: no call
			class, after = c.class, c.after
		} else {
			class, after, v = s.classify(p, err)
		}
		live := s.quiet || s.ctx == nil || s.ctx.Err() == nil
		if class == ClassUnknown && s.actx != nil && live && (v.Expired || s.actx.Err() != nil) {
			class = ClassRetryable // the attempt's own timeout fired
		}
		if !live {
			cerr := s.ctx.Err()
			if v.Ended || errors.Is(err, cerr) || errors.Is(err, context.Cause(s.ctx)) {
				intr, s.ctxErr = ctxReason(cerr), cerr
			}
		}
	}
	s.pre, s.lastC, s.lastA = false, class, after
	s.served = err == nil || class == ClassPermanent
	if p.Budget != nil {
		p.Budget.Result(now, s.served)
	}
	if !s.keep {
		s.Release()
	}
	s.actx = nil
	return class, after, intr
}

// Conclude makes the decision of the unit of work whose ledger s holds on
// an attempt Judge judged at now (on s, or on another Step of the same
// unit of work), and fires its hook: OnSuccess for a success, then as End:
// no retry for an interrupted attempt (Canceled or Deadline), else the
// Policy's decision — OnRetry, with Delivery.Prev set, or OnGiveUp.
func (s *Step) Conclude(j Judgement, now time.Time) Decision {
	intr := NoReason
	if j.Interrupted {
		intr = j.Reason
	}
	return s.conclude(j.Err, j.Attempt, j.Class, j.After, intr, j.ctxErr, &now)
}

func (s *Step) conclude(err error, attempt int, class Class, after time.Duration, intr Reason, ctxErr error, now *time.Time) Decision {
	p := s.policy()
	d := &s.Delivery
	if err == nil {
		s.reason, s.last = NoReason, nil
		p.Hooks.success(attempt)
		return Decision{}
	}
	s.last = err
	if intr != NoReason {
		s.ctxErr = ctxErr
		s.stop(intr)
		return Decision{Reason: s.reason, Interrupted: true}
	}
	dec := p.decideD(d, s.maxAttempts(p), class, after, now)
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
	if s.hedge {
		return r // BeginHedge: not sent, no give-up
	}
	s.reason = r
	if h := s.policy().Hooks.OnGiveUp; h != nil {
		h(Event{Attempt: s.Delivery.Attempt, Err: s.last, Reason: r})
	}
	return r
}

// Judged returns the class the last attempt's error was judged by (every
// rule applied: its own class, the Classifier, Policy.Classify, the own
// timeout) and the wait it asked for, for a driver that hands that error
// on marked with its class (Retryable, Permanent, After), so a caller that
// retries in turn reads the same class. ClassUnknown before any attempt
// ended or after a success.
func (s *Step) Judged() (Class, time.Duration) { return s.lastC, s.lastA }

// MaxAttempts is the number of attempts the unit of work may make:
// Delivery.MaxAttempts when set, else the Policy's (0 there means
// DefaultMaxAttempts).
func (s *Step) MaxAttempts() int { return s.maxAttempts(s.policy()) }

func (s *Step) maxAttempts(p *Policy) int {
	if s.Delivery.MaxAttempts > 0 {
		return s.Delivery.MaxAttempts
	}
	return p.maxAttempts()
}

// classify is Classify, with Policy.Classify judging errors of no class:
// Decide's order (a Step adds its driver's Classifier between the two).
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
