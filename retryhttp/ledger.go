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
// has an attempt budget is the next hop of that work (retry's
// Delivery.CountOn), so a hand-over never starts the budget over. A call
// under an upstream owner makes one attempt numbered as the owner's and
// carries its budget; with NestedRetries it has a budget of its own. It
// sets the MaxAttemptsHeader value the call sends.
func (c *call) ledger(prev retry.Delivery) {
	var budget int
	switch {
	case c.upstream > 0:
		// One attempt, numbered as the upstream owner's: its budget.
		budget = prev.MaxAttempts
	case c.t.NestedRetries && upstream(c):
		// Every layer its own owner, asked for: a budget of its own.
		budget = c.step.Delivery.CountOn(retry.Delivery{}, c.step.Policy.MaxAttempts)
	default:
		budget = c.step.Delivery.CountOn(prev, c.step.Policy.MaxAttempts)
	}
	if budget > 0 {
		c.budget = attemptValue(budget)
	}
}

func upstream(c *call) bool {
	_, ok := UpstreamAttempt(c.ctx)
	return ok
}

// setBudget sets the attempt's MaxAttemptsHeader in h.
func (c *call) setBudget(h map[string][]string) {
	if c.budget != nil {
		h[MaxAttemptsHeader] = c.budget
	}
}
