package retry

import (
	"context"
	"errors"
	"time"
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
		// Lean first attempt: nothing to acquire, charge or bound. (A ctx
		// that is already done goes to run, which starts no attempt.)
		if h := p.Hooks.OnAttempt; h != nil {
			h(Event{Attempt: 1})
		}
		err := fn(ctx)
		if err == nil {
			if h := p.Hooks.OnSuccess; h != nil {
				h(Event{Attempt: 1})
			}
			return nil
		}
		return p.run(ctx, fn, err)
	}
	return p.run(ctx, fn, nil)
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

// run is the retry loop: Begin, the attempt, End and Decide per attempt,
// with real waits. A non-nil first is the error of a first attempt Do
// already made (only when the policy has no budget, limiter or timeouts).
func (p *Policy) run(ctx context.Context, fn func(context.Context) error, first error) error {
	var (
		deadline time.Time
		now      time.Time
		prev     time.Duration
		last     error
		w        Waiter
	)
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	if p.Timeout > 0 || p.NeedsNow() {
		now = p.now()
		if p.Timeout > 0 {
			if dl := now.Add(p.Timeout); deadline.IsZero() || dl.Before(deadline) {
				deadline = dl
			}
		}
	}
	deriveCtx := p.AttemptTimeout > 0 || p.Timeout > 0
	held := false // an attempt holds a Limiter slot that End has not released
	defer func() {
		w.Stop()
		if held { // fn panicked: free its slot before the panic goes on
			p.Limiter.Release(false)
		}
	}()

	for attempt := 1; ; attempt++ {
		err, expired := first, false
		if attempt > 1 || first == nil {
			if cerr := ctx.Err(); cerr != nil {
				return p.stopped(ctxReason(cerr), attempt-1, last, cerr)
			}
			if r := p.Begin(attempt, now); r != NoReason {
				return p.stopped(r, attempt-1, last, nil)
			}
			held = p.Limiter != nil
			if h := p.Hooks.OnAttempt; h != nil {
				h(Event{Attempt: attempt})
			}
			if deriveCtx {
				var stop bool
				if expired, stop, err = p.bounded(ctx, fn, deadline); stop {
					held = false
					if p.Limiter != nil {
						p.Limiter.Release(true) // nothing was sent
					}
					return p.stopped(Deadline, attempt-1, last, nil)
				}
			} else {
				err = fn(ctx)
			}
		}

		if err == nil {
			if p.NeedsNow() {
				now = p.now()
			}
			held = false
			p.end(true, now)
			if h := p.Hooks.OnSuccess; h != nil {
				h(Event{Attempt: attempt})
			}
			return nil
		}
		// One classification serves End and the decision.
		class, after := p.classify(err)
		if class == ClassUnknown && expired {
			class = ClassRetryable // the attempt's own timeout fired
		}
		if p.NeedsNow() || !deadline.IsZero() {
			now = p.now()
		}
		held = false
		p.end(class == ClassPermanent, now)
		if cerr := ctx.Err(); cerr != nil {
			return p.stopped(ctxReason(cerr), attempt, err, cerr)
		}
		dec := p.decide(attempt, class, after, now, deadline, prev)
		if !dec.Retry {
			return p.stopped(dec.Reason, attempt, err, nil)
		}
		if h := p.Hooks.OnRetry; h != nil {
			h(Event{Attempt: attempt, Delay: dec.Delay, Err: err})
		}
		last, prev = err, dec.Delay
		if dec.Delay > 0 && w.Wait(ctx, p.Clock, dec.Delay) != nil {
			return p.stopped(ctxReason(ctx.Err()), attempt, err, ctx.Err())
		}
	}
}

// bounded runs one attempt under min(AttemptTimeout, time left before the
// deadline). stop reports that no time was left to start it; expired that
// the attempt failed when its own timeout fired (ctx still live).
func (p *Policy) bounded(ctx context.Context, fn func(context.Context) error, deadline time.Time) (expired, stop bool, err error) {
	d := p.AttemptTimeout
	if !deadline.IsZero() {
		if left := deadline.Sub(p.now()); d == 0 || left < d {
			d = left
		}
	}
	if d <= 0 {
		return false, true, nil
	}
	actx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err = fn(actx)
	return err != nil && actx.Err() != nil && ctx.Err() == nil, false, err
}

// Waiter sleeps between attempts with one timer reused across the waits of
// a retry loop, on a policy's Clock (nil: the runtime's timers). The zero
// value is ready to use; call Stop when the loop ends. Drivers that wait in
// process (Do, the HTTP transport) share it.
type Waiter struct {
	timer  *time.Timer
	ctimer Timer
}

// Wait sleeps d on clk and returns nil, or ctx's error as soon as ctx ends.
func (w *Waiter) Wait(ctx context.Context, clk Clock, d time.Duration) error {
	var c <-chan time.Time
	if clk == nil {
		if w.timer == nil {
			w.timer = time.NewTimer(d)
		} else {
			w.timer.Reset(d)
		}
		c = w.timer.C
	} else {
		if w.ctimer == nil {
			w.ctimer = clk.NewTimer(d)
		} else {
			w.ctimer.Reset(d)
		}
		c = w.ctimer.C()
	}
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop releases the timer.
func (w *Waiter) Stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.ctimer != nil {
		w.ctimer.Stop()
	}
}

func ctxReason(err error) Reason {
	if errors.Is(err, context.DeadlineExceeded) {
		return Deadline
	}
	return Canceled
}

// stopped reports a give-up to the hook and builds the error.
func (p *Policy) stopped(r Reason, attempts int, last, ctxErr error) error {
	if h := p.Hooks.OnGiveUp; h != nil {
		h(Event{Attempt: attempts, Err: last, Reason: r})
	}
	if r == UnknownError {
		return last
	}
	return &Error{Reason: r, Attempts: attempts, Err: last, ctxErr: ctxErr}
}
