package retry

import "time"

// Begin takes what attempt number attempt needs before it starts: a slot
// from the Limiter and, for the first attempt (an original request), the
// Budget's permission. It returns NoReason when the attempt may start, or
// Limited / Budget when it may not — and then holds nothing. A retry's
// budget charge is not taken here: Decide took it when it said Retry.
//
// Begin, End and Decide are the steps of every stagger driver, in this
// order per attempt: Begin, run the attempt, End, and — for a failure —
// Decide. Do is these steps with real waits; the simulator, the queue, the
// HTTP transport and the broker adapters call the same steps.
func (p *Policy) Begin(attempt int, now time.Time) Reason {
	if p.Limiter != nil && !p.Limiter.TryAcquire() {
		return Limited
	}
	if attempt <= 1 && p.Budget != nil && !p.Budget.Request(now) {
		if p.Limiter != nil {
			p.Limiter.Release(true)
		}
		return Budget
	}
	return NoReason
}

// End gives back what Begin took and records the attempt's outcome: the
// Limiter's slot is released and the Budget told whether the dependency
// served the attempt. An attempt counts as served when err is nil or
// permanent — marked [Permanent], or of no class and made permanent by
// Policy.Classify, as Decide judges it (the dependency answered; the
// content was wrong); retryable and unknown errors count as failures of the
// dependency.
func (p *Policy) End(err error, now time.Time) {
	if p.Limiter == nil && p.Budget == nil {
		return
	}
	p.end(p.served(err), now)
}

// Result is End's first half, for a driver that must hold the Limiter slot
// past the decision (the HTTP transport keeps it until a delivered
// response's body is closed): it tells the Budget the attempt's outcome,
// as End does, so that Decide sees it, and reports whether the dependency
// served the attempt. Release, with that report, is the other half.
func (p *Policy) Result(err error, now time.Time) (served bool) {
	served = err == nil || p.Budget == nil && p.Limiter == nil || p.served(err)
	if p.Budget != nil {
		p.Budget.Result(now, served)
	}
	return served
}

// Release is End's second half: it gives back the Limiter slot Begin
// took, with served as Result reported it.
func (p *Policy) Release(served bool) {
	if p.Limiter != nil {
		p.Limiter.Release(served)
	}
}

// served reports whether the dependency served an attempt that ended with
// err (nil or permanent), as End judges it.
func (p *Policy) served(err error) bool {
	if err == nil {
		return true
	}
	c, _ := p.classify(err)
	return c == ClassPermanent
}

// end is End once the outcome is judged: ok means the dependency served
// the attempt.
func (p *Policy) end(ok bool, now time.Time) {
	if p.Limiter != nil {
		p.Limiter.Release(ok)
	}
	if p.Budget != nil {
		p.Budget.Result(now, ok)
	}
}

// classify is Classify, with Policy.Classify judging errors of no class.
func (p *Policy) classify(err error) (Class, time.Duration) {
	class, after := Classify(err)
	if class == ClassUnknown && p.Classify != nil {
		class = p.Classify(err)
	}
	return class, after
}

// NeedsNow reports whether Begin and End use their now argument, so a
// driver can skip reading its clock when they do not (no Budget).
func (p *Policy) NeedsNow() bool { return p.Budget != nil }
