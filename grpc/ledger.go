package staggergrpc

import (
	"context"
	"strconv"

	"github.com/staggerhq/stagger/internal/wire"
	"github.com/staggerhq/stagger/retry"
)

// MaxAttemptsKey carries the logical request's attempt budget: the highest
// attempt number any hop may make for it (the ledger's MaxAttempts). A
// [Client] sends it on every attempt — its Policy's MaxAttempts for a call
// that starts the work, the budget of the work its context carries for a
// call that carries it on — and a [Server] reads it, clamped to
// Server.MaxAttempts, into the handler's retry.Delivery.
const MaxAttemptsKey = "stagger-max-attempts"

// DefaultMaxBudget is the largest attempt budget a client's
// stagger-max-attempts gives the work when Server.MaxAttempts is not set.
const DefaultMaxBudget = wire.DefaultMaxBudget

// ledger continues the work ctx carries. Inside a Server's handler or under
// WithUpstreamAttempt (an upstream owner retries, NestedRetries unset) the
// call makes one attempt numbered as the upstream one, with the budget of
// the work ctx carries; inside other work that has a budget (a queue job,
// a broker message: retry.DeliveryFrom) the call is the next hop of that
// work (retry's Delivery.CountOn).
func (k *call) ledger(ctx context.Context) {
	d := &k.s.Delivery
	prev, hasPrev := retry.DeliveryFrom(ctx)
	if d.ID == "" && hasPrev && wire.ValidID(prev.ID) {
		d.ID = prev.ID
	}
	var budget int
	if n, ok := UpstreamAttempt(ctx); ok && !k.c.NestedRetries {
		d.Attempt, d.MaxAttempts = n-1, n
		budget = prev.MaxAttempts
	} else {
		if ok { // every layer its own owner, asked for: nothing to count on
			prev = retry.Delivery{}
		}
		budget = d.CountOn(prev, k.s.Policy.MaxAttempts)
	}
	if budget > 0 {
		k.budget = budgetValue(budget)
	}
}

// budgets are the MaxAttemptsKey values of small budgets, made once.
var budgets = func() (v [17]string) {
	for i := 1; i < len(v); i++ {
		v[i] = strconv.Itoa(i)
	}
	return v
}()

func budgetValue(n int) string {
	if n > 0 && n < len(budgets) {
		return budgets[n]
	}
	return strconv.Itoa(n)
}

// delivery is the ledger of an incoming call as the handler gets it
// ([retry.DeliveryFrom], Source "grpc"): the request ID when it is one
// readable value, the attempt number n (1 for an unmarked call), the
// budget clamped to MaxAttempts, and the handler's deadline (grpc-timeout
// clamped to MaxTimeout). It also counts the call against the repeat table.
func (s *Server) delivery(ctx context.Context, l ledgerMD, n int) retry.Delivery {
	d := retry.Delivery{Attempt: max(n, 1), Source: "grpc"}
	if len(l.id) == 1 && wire.ValidID(l.id[0]) {
		d.ID = l.id[0]
	}
	if len(l.budget) == 1 {
		d.MaxAttempts, _ = wire.ParseMaxAttempts(l.budget[0], s.MaxAttempts)
	}
	d.Deadline, _ = ctx.Deadline()
	if d.ID != "" && s.MaxIDs >= 0 {
		s.ids.Seen(d.ID, n, s.MaxIDs)
	}
	return d
}
