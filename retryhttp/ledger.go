package retryhttp

import (
	"github.com/staggerhq/stagger/internal/wire"
	"github.com/staggerhq/stagger/retry"
)

// MaxAttemptsHeader carries the logical request's attempt budget: the
// highest attempt number any hop may make for it (the ledger's
// MaxAttempts). A Transport sends it on every attempt — the policy's
// MaxAttempts for a call that starts the work, or the budget of the work
// its context carries ([retry.DeliveryFrom]) for a call that carries it
// on. [Guard] reads it as a decimal integer of at least 1, clamped to
// Guard.MaxAttempts, and puts it in the handler's Delivery, so work
// handed on (queue.Handoff, a broker's publisher) keeps the attempts that
// are left; anything else is ignored.
const MaxAttemptsHeader = "Stagger-Max-Attempts"

// DefaultMaxBudget is the largest attempt budget a request's
// MaxAttemptsHeader can give the work when Guard.MaxAttempts is not set.
const DefaultMaxBudget = wire.DefaultMaxBudget

// ledger continues the work ctx carries (prev): a call inside work that
// has an attempt budget (prev.MaxAttempts > 0) is the next hop of that
// work — its attempts count on from prev.Attempt, up to the smaller of
// the Policy's MaxAttempts and prev's budget, so a hand-over never starts
// the budget over. It sets the MaxAttemptsHeader value the call sends.
func (c *call) ledger(prev retry.Delivery) {
	d := &c.step.Delivery
	own := c.step.Policy.MaxAttempts
	if own <= 0 {
		own = retry.DefaultMaxAttempts
	}
	budget := own
	switch {
	case c.upstream > 0:
		// One attempt, numbered as the upstream owner's: its budget.
		budget = prev.MaxAttempts
	case c.t.NestedRetries && upstream(c):
		// Every layer its own owner, asked for: a budget of its own.
	case prev.MaxAttempts > 0 && prev.Attempt > 0:
		budget = prev.MaxAttempts
		d.Attempt = prev.Attempt
		if d.MaxAttempts == 0 { // not capped to one attempt (a body that cannot be replayed)
			d.MaxAttempts = min(own, budget)
		} else {
			d.MaxAttempts = min(d.Attempt+d.MaxAttempts, min(own, budget))
		}
	}
	if budget > 0 {
		c.budget = attemptValue(budget)
	}
}

func upstream(c *call) bool {
	_, ok := UpstreamAttempt(c.ctx)
	return ok
}

// exhausted is the error of a call whose carried ledger has no attempt
// left: nothing is sent.
func (c *call) exhausted() error {
	d := &c.step.Delivery
	if c.upstream > 0 || d.Attempt == 0 || d.Attempt < d.MaxAttempts {
		return nil
	}
	return &retry.Error{Reason: retry.Exhausted, Attempts: d.Attempt}
}

// setBudget sets the attempt's MaxAttemptsHeader in h.
func (c *call) setBudget(h map[string][]string) {
	if c.budget != nil {
		h[MaxAttemptsHeader] = c.budget
	}
}
