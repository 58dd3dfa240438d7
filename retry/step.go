package retry

import (
	"context"
	"errors"
	"time"

	"github.com/staggerhq/stagger/internal/attemptctx"
	"github.com/staggerhq/stagger/internal/stepcore"
)

// step is the per-attempt code every stagger driver runs: [Do], [Hedge],
// [Handler.Run] and, through package retry/retrydriver (which documents the
// protocol: Begin, Context, End …), the HTTP transport, the gRPC client,
// the broker processor, the durable queue and the simulator. Its layout is
// stepcore.Step, shared with retrydriver.Step, so a driver's Step converts
// to it without a copy; its exported methods are the protocol retrydriver
// calls (through Decision.Step, see bridge.go).
type step core

type (
	core      = stepcore.Step[Policy, Delivery, Class, Reason]
	stepState = stepcore.State[Class, Reason]
	verdict   = stepcore.Verdict[Class]
)

// st returns the state the step keeps between Begin and End.
func (s *step) st() *stepState { return (*core)(s).State() }

func (s *step) policy() *Policy {
	if s.Policy == nil {
		return &defaultPolicy
	}
	return s.Policy
}

// NeedsNow reports whether Begin and End with ctx use their now argument:
// with no Budget, no timeouts and no deadline (carried or ctx's) they do
// not, and a driver may pass the zero time.
func (s *step) NeedsNow(ctx context.Context) bool {
	x := s.st()
	if s.needsNow() {
		return true
	}
	if ctx != nil && ctx != x.Ctx { // Begin folded x.Ctx's deadline in already
		if _, ok := ctx.Deadline(); ok {
			return true
		}
	}
	return false
}

// needsNow is NeedsNow once Begin has folded ctx's deadline into
// Delivery.Deadline.
func (s *step) needsNow() bool {
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
func (s *step) Begin(ctx context.Context, now time.Time) Reason {
	x := s.st()
	p := s.policy()
	d := &s.Delivery
	x.Ctx, x.Actx, x.Cancel, x.Lazy, x.Bound, x.Keep, x.Pre = ctx, nil, nil, nil, 0, false, false
	if ctx != nil && (!x.Quiet || !x.Folded || d.Attempt == 0) {
		if !x.Quiet {
			if err := ctx.Err(); err != nil {
				x.CtxErr = err
				return s.stop(ctxReason(err))
			}
		}
		if !x.Folded || d.Attempt == 0 { // once per unit of work
			s.fold(ctx)
		}
	}
	if p.AttemptTimeout > 0 || p.Timeout > 0 || !d.Deadline.IsZero() || p.Limiter != nil || p.Budget != nil {
		if r := s.admitBound(p, now); r != NoReason {
			return r
		}
	}
	p.Hooks.attempt(s.count(now))
	return NoReason
}

// count is Begin's last step, once the attempt may start: it counts the
// attempt (the first sets Delivery.First) and returns its number, for
// OnAttempt (which the caller fires: count inlines).
func (s *step) count(now time.Time) int {
	d := &s.Delivery
	if d.First.IsZero() {
		d.First = now
	}
	d.Attempt++
	return d.Attempt
}

// BeginHedge begins an attempt that runs beside those already in flight
// (a hedged request), as Begin does, with two differences: the Budget
// must allow it as it allows a retry (gRPC A6 counts hedged attempts
// toward throttling), and a refusal is not a give-up — it fires no hook,
// records no reason, holds nothing and leaves Delivery as it was, so the
// driver may try again later. The attempt it begins is judged with Judge.
func (s *step) BeginHedge(ctx context.Context, now time.Time) Reason {
	x := s.st()
	x.Hedge = true
	r := s.Begin(ctx, now)
	x.Hedge = false
	return r
}

// admitBound is Begin's rules for a Policy with timeouts, a Limiter or a
// Budget, or a ledger with a deadline: the attempt's bound, the deadline's
// refusal, then admission.
func (s *step) admitBound(p *Policy, now time.Time) Reason {
	x := s.st()
	d := &s.Delivery
	bound := p.AttemptTimeout
	if p.Timeout > 0 || !d.Deadline.IsZero() {
		var r Reason
		if bound, r = s.deadline(p, now, bound); r != NoReason {
			return r
		}
	}
	if p.Limiter != nil || p.Budget != nil && (d.Attempt == 0 || x.Hedge) {
		if r := s.admit(p, now); r != NoReason {
			return r
		}
	}
	x.Bound = bound
	return NoReason
}

// fold folds ctx's deadline into the ledger's (Begin's first step of a
// unit of work).
func (s *step) fold(ctx context.Context) {
	x := s.st()
	x.Folded, x.Dline = true, time.Time{}
	if x.Quiet {
		return // a context that is never done has no deadline
	}
	if dl, ok := ctx.Deadline(); ok {
		x.Dline = dl
		s.Delivery.Deadline = earlier(s.Delivery.Deadline, dl)
	}
}

// deadline is Begin's rule for the deadline: Policy.Timeout from the
// first attempt folded into the ledger's deadline, and the attempt's bound
// (AttemptTimeout, given as bound) cut to the time left. It returns the
// bound, or Deadline (a give-up) when no time is left.
func (s *step) deadline(p *Policy, now time.Time, bound time.Duration) (time.Duration, Reason) {
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
		if (bound == 0 || left < bound) && !d.Deadline.Equal(s.st().Dline) {
			bound = left // ctx's own deadline needs no second timer
		}
	}
	return bound, NoReason
}

// admit is Begin's admission: a Limiter slot, then for an original the
// Budget's permission. It returns the refusal's reason, holding nothing,
// or NoReason with the slot held.
func (s *step) admit(p *Policy, now time.Time) Reason {
	x := s.st()
	if p.Limiter != nil && !p.Limiter.TryAcquire() {
		return s.stop(Limited)
	}
	if p.Budget != nil && (s.Delivery.Attempt == 0 && !p.Budget.Request(now) || x.Hedge && !p.Budget.Retry(now)) {
		if p.Limiter != nil {
			p.Limiter.Release(true) // nothing was sent
		}
		return s.stop(p.refused())
	}
	x.Held = p.Limiter != nil
	return NoReason
}

// Resume makes s the Step of an attempt that Begin started on another
// Step value of the same unit of work, for a driver that keeps only the
// Delivery while an attempt is in flight (the simulator keeps millions):
// s then holds the attempt's Limiter slot, and End judges the attempt.
func (s *step) Resume() { s.st().Held = s.policy().Limiter != nil }

// Context returns the attempt's context: the ctx given to Begin, bounded
// by min(Policy.AttemptTimeout, time left before Delivery.Deadline) when
// either applies. End (or Release, after Hold) cancels it. Drivers that
// run no context-taking work (the simulator) need not call it.
func (s *step) Context() context.Context {
	x := s.st()
	if x.Bound > 0 {
		return bounded(x)
	}
	return x.Ctx
}

// bounded makes the attempt's bounded context (Context's slow path, apart
// so that Context inlines).
//
//go:noinline
func bounded(x *stepState) context.Context {
	x.Actx, x.Cancel = context.WithTimeout(x.Ctx, x.Bound)
	return x.Actx
}

// LazyContext is Context made lazily (package attemptctx): the bounded
// context's timer, Done channel and place among the parent's children
// are made when the work first watches Done, not before. For a driver
// that hands the context to work it does not know (the queue's
// handlers): work that never watches Done — a handler that computes,
// writes to memory or checks ctx.Err() — saves them (3 allocations,
// about 0.5 µs); work that does pays one allocation more than Context.
func (s *step) LazyContext() context.Context {
	x := s.st()
	if x.Bound > 0 {
		c := attemptctx.New(x.Ctx, time.Now().Add(x.Bound))
		x.Actx, x.Lazy = c, c
		return c
	}
	return x.Ctx
}

// Hold makes the next End keep the attempt's Limiter slot and context
// after judging it, for a driver that hands a result to the caller which
// still uses them (the HTTP transport's response body). Call Release when
// the caller is done.
func (s *step) Hold() { s.st().Keep = true }

// Release gives back what an attempt ended under Hold kept: its Limiter
// slot (with the outcome End judged) and its context. It is idempotent.
func (s *step) Release() {
	x := s.st()
	if x.Cancel != nil || x.Lazy != nil || x.Held {
		s.free(x.Served)
	}
}

// free, the work of Release, Abort and Postpone (apart so that they
// inline), cancels the attempt's context and gives back its Limiter slot, as
// served or not.
func (s *step) free(served bool) {
	x := s.st()
	if x.Cancel != nil {
		x.Cancel()
		x.Cancel = nil
	}
	if x.Lazy != nil {
		x.Lazy.End()
		x.Lazy = nil
	}
	if x.Held {
		x.Held = false
		s.policy().Limiter.Release(served)
	}
}

// Postpone ends an attempt whose work asked to run later instead of
// succeeding or failing (the queue's Snooze): nothing is judged, so no hook
// fires and the Budget is not told, and the Limiter slot is released as
// served (the dependency was not refused).
func (s *step) Postpone() {
	s.free(true)
	s.st().Actx = nil
}

// Abort ends an attempt that did not return (a panic): its Limiter slot is
// released as an overload sign and its context canceled. A driver defers
// it around the attempt; after End (or Release) it does nothing.
func (s *step) Abort() {
	x := s.st()
	if x.Cancel != nil || x.Lazy != nil || x.Held {
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
func (s *step) Resend(now time.Time) bool {
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

// judgement is what Judge found of an attempt: the input of Conclude.
type judgement struct {
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
func (s *step) Classify(err error) (Class, time.Duration) {
	x := s.st()
	class, after, v := s.classify(s.policy(), err)
	x.Pre, x.PreC, x.PreA, x.PreE, x.PreX = true, class, after, v.Ended, v.Expired
	return class, after
}

// classify is Classify's order, with the Classifier's verdict.
func (s *step) classify(p *Policy, err error) (Class, time.Duration, verdict) {
	x := s.st()
	if c, ok := err.(*classified); ok { // Retryable, Permanent, After: no call
		return c.class, c.after, verdict{}
	}
	class, after := Classify(err)
	if class != ClassUnknown {
		return class, after, verdict{}
	}
	if x.Pre {
		x.Pre = false
		return x.PreC, x.PreA, verdict{Ended: x.PreE, Expired: x.PreX}
	}
	var v verdict
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
func (s *step) End(err error, now time.Time) Decision {
	return s.end(s.policy(), nil, err, &now, judgeIt|concludeIt)
}

// Judge ends the attempt Begin (or BeginHedge) started, which ended at now
// with err, as End does — the error classified once, the Budget told
// whether the dependency served it, the Limiter slot released (Hold keeps
// it) — but decides nothing and fires no hook. It is End's first half, for
// a driver whose attempts run side by side (a hedge): it judges each as it
// ends, and calls Conclude, on the Step holding the unit of work's ledger,
// when one ends the work or the last in flight has failed.
func (s *step) Judge(err error, now time.Time) judgement {
	var j judgement
	s.end(s.policy(), &j, err, &now, judgeIt)
	return j
}

// Conclude makes the decision of the unit of work whose ledger s holds on
// an attempt Judge judged at now (on s, or on another Step of the same
// unit of work), and fires its hook: OnSuccess for a success, then as End:
// no retry for an interrupted attempt (Canceled or Deadline), else the
// Policy's decision — OnRetry, with Delivery.Prev set, or OnGiveUp.
func (s *step) Conclude(j judgement, now time.Time) Decision {
	return s.end(s.policy(), &j, j.Err, &now, concludeIt)
}

// The halves of end.
const (
	judgeIt    = 1 << iota // Judge: fill j
	concludeIt             // Conclude: decide on j, fire the hook
)

// end is End, Judge and Conclude (which halves, by what), in one function
// so that End, the hot one, makes one call. p is s's Policy; j is what
// Judge fills and Conclude reads (End needs none).
//
// Judging fills j with the attempt, its error's class and wait, and
// whether the attempt was interrupted (Reason Canceled or Deadline, with
// x.CtxErr set); tells the Budget; releases the slot (unless Hold).
func (s *step) end(p *Policy, j *judgement, err error, now *time.Time, what uint8) Decision {
	x := s.st()
	d := &s.Delivery
	var (
		class   Class
		after   time.Duration
		intr    Reason // Canceled or Deadline: the attempt was interrupted
		ctxErr  error  // the context's error, when interrupted
		attempt = d.Attempt
	)
	if what&judgeIt != 0 {
		if err != nil {
			var v verdict
			var ok bool
			if class, after, ok = ownClass(err); !ok {
				class, after, v = s.classify(p, err)
			}
			if x.Actx != nil || !x.Quiet && x.Ctx != nil { // a context that may have ended
				live := x.Quiet || x.Ctx == nil || x.Ctx.Err() == nil
				if !live || x.Actx != nil && class == ClassUnknown {
					class, intr, ctxErr = s.ended(err, class, v, live)
				}
			}
		}
		x.Pre, x.LastC, x.LastA = false, class, after
		x.Served = err == nil || class == ClassPermanent
		if p.Budget != nil {
			p.Budget.Result(*now, x.Served)
		}
		if !x.Keep && (x.Cancel != nil || x.Lazy != nil || x.Held) { // Release, inline
			s.free(x.Served)
		}
		if x.Actx != nil {
			x.Actx = nil
		}
		if what&concludeIt == 0 {
			*j = judgement{Err: err, Attempt: attempt, Class: class, After: after,
				Interrupted: intr != NoReason, Reason: intr, ctxErr: ctxErr}
			return Decision{}
		}
	} else {
		class, after, ctxErr, attempt = j.Class, j.After, j.ctxErr, j.Attempt
		if j.Interrupted {
			intr = j.Reason
		}
	}
	if err == nil {
		p.Hooks.success(s.succeeded(attempt))
		return Decision{}
	}
	if intr != NoReason {
		x.Last, x.CtxErr = err, ctxErr
		s.stop(intr)
		return Decision{Reason: x.Reason, Interrupted: true}
	}
	return s.failed(p, err, class, after, now)
}

// ownClass is judging's first look at a failed attempt's error: the
// class of Retryable, Permanent and After, without a call (ok); for any
// other error s.classify applies Classify's order.
func ownClass(err error) (c Class, after time.Duration, ok bool) {
	if e, ok := err.(*classified); ok {
		return e.class, e.after, true
	}
	return ClassUnknown, 0, false
}

// succeeded concludes on a success of attempt number attempt: no give-up.
// It returns attempt, for OnSuccess (which the caller fires: succeeded
// inlines).
func (s *step) succeeded(attempt int) int {
	x := s.st()
	x.Reason, x.Last = NoReason, nil
	return attempt
}

// failed concludes on a failure judged of class, asking for after, that
// was not interrupted: the Policy's decision, then OnRetry with
// Delivery.Prev set, or the give-up.
func (s *step) failed(p *Policy, err error, class Class, after time.Duration, now *time.Time) Decision {
	d := &s.Delivery
	s.st().Last = err
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

// ended is judging's rules for an attempt that failed with err, of
// class, under a context that may have ended (live: the driver's context
// has not): an error of no class from an
// attempt whose own timeout fired (or that the Classifier says expired) is
// retryable; one that fails with the end of the driver's context is
// interrupted (Canceled or Deadline, with the context's error, also kept
// in x.CtxErr).
func (s *step) ended(err error, class Class, v verdict, live bool) (Class, Reason, error) {
	x := s.st()
	if class == ClassUnknown && x.Actx != nil && live && (v.Expired || x.Actx.Err() != nil) {
		class = ClassRetryable // the attempt's own timeout fired
	}
	if !live {
		cerr := x.Ctx.Err()
		if v.Ended || errors.Is(err, cerr) || errors.Is(err, context.Cause(x.Ctx)) {
			x.CtxErr = cerr
			return class, ctxReason(cerr), cerr
		}
	}
	return class, NoReason, nil
}

// Do runs the attempts of the unit of work that are left in process, as
// [Do] runs them: the Delivery carried in (attempts already made, the
// deadline, MaxAttempts, ID) counts, so work handed over from another
// driver continues with what is left rather than a fresh budget. fn is
// called once per attempt with the attempt's context and may read
// s.Delivery (the attempt number, the ID) for the attempt it runs.
func (s *step) Do(ctx context.Context, fn func(context.Context) error) error {
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
func (s *step) Err() error {
	x := s.st()
	switch x.Reason {
	case NoReason:
		return nil
	case UnknownError:
		if x.Last != nil {
			return x.Last
		}
	}
	return &Error{Reason: x.Reason, Attempts: s.Delivery.Attempt, Err: x.Last, ctxErr: x.CtxErr}
}

// Reason is why the unit of work stopped (NoReason while it goes on).
func (s *step) Reason() Reason { return s.st().Reason }

// stop records a give-up for r and fires OnGiveUp.
func (s *step) stop(r Reason) Reason {
	x := s.st()
	if x.Hedge {
		return r // BeginHedge: not sent, no give-up
	}
	x.Reason = r
	if h := s.policy().Hooks.OnGiveUp; h != nil {
		h(Event{Attempt: s.Delivery.Attempt, Err: x.Last, Reason: r})
	}
	return r
}

// Judged returns the class the last attempt's error was judged by (every
// rule applied: its own class, the Classifier, Policy.Classify, the own
// timeout) and the wait it asked for, for a driver that hands that error
// on marked with its class (Retryable, Permanent, After), so a caller that
// retries in turn reads the same class. ClassUnknown before any attempt
// ended or after a success.
func (s *step) Judged() (Class, time.Duration) { return s.st().LastC, s.st().LastA }

// MaxAttempts is the number of attempts the unit of work may make:
// Delivery.MaxAttempts when set, else the Policy's (0 there means
// DefaultMaxAttempts).
func (s *step) MaxAttempts() int { return s.maxAttempts(s.policy()) }

func (s *step) maxAttempts(p *Policy) int {
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
