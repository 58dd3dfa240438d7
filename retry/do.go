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
	if p.Budget == nil && p.Limiter == nil && p.AttemptTimeout == 0 && p.Timeout == 0 {
		// Lean first attempt: nothing to acquire, charge or bound.
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

// run is the retry loop. A non-nil first is the error of a first attempt Do
// already made (only when the policy has no budget, limiter or timeouts).
func (p *Policy) run(ctx context.Context, fn func(context.Context) error, first error) error {
	var (
		deadline time.Time
		now      time.Time
		prev     time.Duration
		last     error
		timer    *time.Timer
		ctimer   Timer
	)
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	if p.Timeout > 0 || p.Budget != nil {
		now = p.now()
		if p.Timeout > 0 {
			if dl := now.Add(p.Timeout); deadline.IsZero() || dl.Before(deadline) {
				deadline = dl
			}
		}
	}
	deriveCtx := p.AttemptTimeout > 0 || p.Timeout > 0
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if ctimer != nil {
			ctimer.Stop()
		}
	}()

	for attempt := 1; ; attempt++ {
		var err error
		expired := false
		if attempt == 1 && first != nil {
			err = first
			goto classify
		}
		if err := ctx.Err(); err != nil {
			return p.stopped(ctxReason(err), attempt-1, last, err)
		}
		if p.Limiter != nil && !p.Limiter.TryAcquire() {
			return p.stopped(Limited, attempt-1, last, nil)
		}
		if attempt == 1 && p.Budget != nil && !p.Budget.Request(now) {
			if p.Limiter != nil {
				p.Limiter.Release(true)
			}
			return p.stopped(Budget, 0, nil, nil)
		}
		if h := p.Hooks.OnAttempt; h != nil {
			h(Event{Attempt: attempt})
		}

		if deriveCtx {
			d := p.AttemptTimeout
			if !deadline.IsZero() {
				if left := deadline.Sub(p.now()); d == 0 || left < d {
					d = left
				}
			}
			if d <= 0 {
				if p.Limiter != nil {
					p.Limiter.Release(true)
				}
				return p.stopped(Deadline, attempt-1, last, nil)
			}
			actx, cancel := context.WithTimeout(ctx, d)
			err = fn(actx)
			expired = err != nil && actx.Err() != nil && ctx.Err() == nil
			cancel()
		} else {
			err = fn(ctx)
		}

	classify:
		class, after := ClassUnknown, time.Duration(0)
		if err != nil {
			class, after = Classify(err)
			if class == ClassUnknown && p.Classify != nil {
				class = p.Classify(err)
			}
			if class == ClassUnknown && expired {
				class = ClassRetryable // the attempt's own timeout fired
			}
		}
		ok := err == nil || class == ClassPermanent
		if p.Limiter != nil {
			p.Limiter.Release(ok)
		}
		if p.Budget != nil || (err != nil && !deadline.IsZero()) {
			now = p.now()
		}
		if p.Budget != nil {
			p.Budget.Result(now, ok)
		}
		if err == nil {
			if h := p.Hooks.OnSuccess; h != nil {
				h(Event{Attempt: attempt})
			}
			return nil
		}
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
		if dec.Delay <= 0 {
			continue
		}
		var c <-chan time.Time
		if p.Clock == nil {
			if timer == nil {
				timer = time.NewTimer(dec.Delay)
			} else {
				timer.Reset(dec.Delay)
			}
			c = timer.C
		} else {
			if ctimer == nil {
				ctimer = p.Clock.NewTimer(dec.Delay)
			} else {
				ctimer.Reset(dec.Delay)
			}
			c = ctimer.C()
		}
		select {
		case <-c:
		case <-ctx.Done():
			return p.stopped(ctxReason(ctx.Err()), attempt, err, ctx.Err())
		}
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
