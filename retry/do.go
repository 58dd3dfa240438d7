package retry

import (
	"context"
	"errors"
	"time"

	"github.com/staggerhq/stagger/internal/wait"
)

var errNilFunc = errors.New("retry: nil function")

// Do calls fn until it succeeds or the policy says stop, and returns nil or
// the reason it stopped (see [Error]); a nil policy means the zero Policy.
//
// Every attempt gets ctx, or a child of it bounded by min(AttemptTimeout,
// time left before the deadline); the deadline is the earlier of ctx's and
// Timeout after the start. An attempt whose own timeout fired and whose error
// has no class counts as retryable. The concurrency slot is released before
// any wait; a wait uses one timer reused across attempts and ends at once
// when ctx is done. Errors of no class are returned unchanged and unretried.
// If fn panics, its concurrency slot is released (as an overload sign)
// before the panic goes on.
//
// No attempt starts once ctx is done: with a ctx already done, Do returns a
// Canceled (or Deadline) give-up after 0 attempts without calling fn.
//
// On the first-try success path Do does not allocate.
func Do(ctx context.Context, p *Policy, fn func(context.Context) error) error {
	if p == nil {
		p = &defaultPolicy
	}
	if err := p.Validate(); err != nil {
		return err
	}
	if fn == nil {
		return errNilFunc
	}
	if p.Budget == nil && p.Limiter == nil && p.AttemptTimeout == 0 && p.Timeout == 0 && ctx.Err() == nil {
		// A plain policy's first attempt: Begin would acquire, charge and
		// bound nothing, and End after a success release and tell nothing,
		// so only their hooks run. A failure goes on with the Step.
		p.Hooks.attempt(1)
		err := fn(ctx)
		if err == nil {
			p.Hooks.success(1)
			return nil
		}
		var s step // set field by field: a composite literal is built apart and copied
		s.Policy, s.Delivery.Attempt, s.st().Ctx = p, 1, ctx
		if ctx.Done() == nil { // never done: no deadline, nothing can interrupt
			s.st().Quiet = true
			var w wait.Waiter
			return s.plain(ctx, fn, err, &w)
		}
		return s.loop(ctx, fn, err) // folds ctx's deadline in, as Begin would have
	}
	var s step
	s.Policy = p
	return s.loop(ctx, fn, nil)
}

// DoValue is Do for functions that return a value: it returns the value of
// the last attempt made (the successful one, or whatever the last failing
// attempt returned with its error) and Do's error.
func DoValue[T any](ctx context.Context, p *Policy, fn func(context.Context) (T, error)) (T, error) {
	var v T
	if fn == nil {
		return v, errNilFunc
	}
	err := Do(ctx, p, func(ctx context.Context) error {
		var err error
		v, err = fn(ctx)
		return err
	})
	return v, err
}

func (p *Policy) now() time.Time {
	if p.Clock != nil {
		return p.Clock.Now()
	}
	return time.Now()
}

// loop is the in-process driver: the Step per attempt, with real waits on
// one reused timer. A non-nil first is the error of the first attempt,
// which Do already made (the Step holds its Begin).
func (s *step) loop(ctx context.Context, fn func(context.Context) error, first error) error {
	x := s.st()
	p := s.policy()
	var w wait.Waiter           // used once a wait is due; after a panic the runtime collects it
	defer s.abandon()           // fn panicked: free its slot before the panic goes on
	x.Quiet = ctx.Done() == nil // a context that is never done: Begin and End need not ask it
	if first != nil {
		s.fold(ctx) // Do made the first attempt: as its Begin would have
	}
	err := first
	// timed: Begin and End read now. It holds for the unit of work once
	// Begin folded ctx's deadline in (NeedsNow before that): a Budget and a
	// Timeout are the Policy's, and only Begin moves the deadline.
	timed := first != nil && s.needsNow()
	for {
		var now time.Time
		if first == nil {
			if d := &s.Delivery; d.Attempt == 0 || !x.Folded {
				timed = s.NeedsNow(ctx)
			}
			if timed {
				now = p.now()
			}
			if s.Begin(ctx, now) != NoReason {
				return s.leave(&w, s.Err())
			}
			timed = s.needsNow()
			actx := x.Ctx // s.Context(), inline
			if x.Bound > 0 {
				actx = bounded(x)
			}
			err = fn(actx)
		}
		if err != nil && timed || p.Budget != nil {
			now = p.now()
		}
		first = nil
		dec := s.end(p, nil, err, &now, judgeIt|concludeIt) // End
		if err == nil {
			return s.leave(&w, nil)
		}
		if !dec.Retry {
			return s.leave(&w, s.Err())
		}
		if dec.Delay > 0 {
			if werr := s.wait(&w, ctx, p, dec.Delay); werr != nil {
				return werr
			}
		}
	}
}

// plain is loop after Do's first attempt of a plain policy (no Budget, no
// Limiter, no timeouts) failed with err, under a context that is never
// done (so with no deadline; x.Quiet is set): no slot or bounded context
// is ever held, no Budget is told, the clock is not read (NeedsNow is
// false) and nothing can interrupt an attempt, so of Begin and End only
// these steps do anything: Begin counts the attempt (count); End
// classifies the error (ownClass, classify) and concludes (failed,
// succeeded). The others' conditions never hold here, and a panic leaves
// nothing to free in Do's own s.
func (s *step) plain(ctx context.Context, fn func(context.Context) error, err error, w *wait.Waiter) error {
	p := s.Policy
	var now time.Time
	for {
		class, after, ok := ownClass(err)
		if !ok {
			class, after, _ = s.classify(p, err)
		}
		dec := s.failed(p, err, class, after, &now)
		if !dec.Retry {
			return s.leave(w, s.Err())
		}
		if dec.Delay > 0 {
			if werr := s.wait(w, ctx, p, dec.Delay); werr != nil {
				return werr
			}
		}
		p.Hooks.attempt(s.count(now))
		if err = fn(ctx); err == nil {
			p.Hooks.success(s.succeeded(s.Delivery.Attempt))
			return s.leave(w, nil)
		}
	}
}

// wait waits d before the next attempt; when ctx ends first, it gives up
// (Canceled or Deadline) and returns loop's error.
func (s *step) wait(w *wait.Waiter, ctx context.Context, p *Policy, d time.Duration) error {
	if werr := w.Wait(ctx, p.Clock, d); werr != nil {
		s.st().CtxErr = werr
		s.stop(ctxReason(werr))
		return s.leave(w, s.Err())
	}
	return nil
}

// abandon is Abort after fn panicked, dropping loop's word for its
// context too: a caller that recovers may go on with s under another.
func (s *step) abandon() {
	s.st().Quiet = false
	s.Abort()
}

// leave ends loop with err: it stops the wait's timer and drops loop's
// word for its context, so that s may go on under another driver.
func (s *step) leave(w *wait.Waiter, err error) error {
	w.Stop()
	s.st().Quiet = false
	return err
}
