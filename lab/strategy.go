package lab

import (
	"fmt"
	"strings"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
)

// Defaults of [StrategyOptions].
const (
	// DefaultBase is the base of the backoff strategies: 60 ms.
	DefaultBase = 60 * time.Millisecond
	// ImmediateWait is what "retry immediately" waits before every attempt
	// but the first (0, then 20 ms).
	ImmediateWait = 20 * time.Millisecond
	// DefaultBudgetInitial is the credit the +budget token bucket holds when
	// a run starts: a full reserve (budget.DefaultMax = 200 credits, that
	// is 20 retries at 10 credits each), as a service has after at least
	// 200 healthy requests. Starting empty, as the zero TokenBucket
	// does, 4 callers earn 4 credits and no retry is ever allowed.
	DefaultBudgetInitial = budget.DefaultMax
	// DefaultBulkhead is the number of slots +bulkhead shares among the
	// callers of a run.
	DefaultBulkhead = 2
	// DefaultHedge is how long an attempt of +hedge runs before a second
	// one is sent.
	DefaultHedge = 100 * time.Millisecond
)

// Strategy is a named way of retrying: the schedule every caller uses, and
// optionally a budget and a bulkhead shared by all callers of one run.
type Strategy struct {
	// Name is the command-line name, e.g. "expo-full+budget".
	Name string
	// Title heads the strategy's log, e.g. "EXPONENTIAL + JITTER".
	Title string
	// Schedule gives the wait after each failed attempt.
	Schedule backoff.Schedule
	// Jittered says the schedule draws random waits, so a run's waits
	// must take at least 2 distinct values (see [Result.CheckJitter]).
	Jittered bool
	// NewBudget, if set, returns the retry budget shared by the callers of
	// one run (a fresh one per run).
	NewBudget func() budget.Budget
	// Bulkhead, when > 0, is the size of a limit.Bulkhead shared by the
	// callers of one run: an attempt that finds no free slot is not sent
	// and its caller gives up at once (reason "limited").
	Bulkhead int
	// Hedge, when > 0, sends another attempt when one has not answered
	// after Hedge (retry.Hedge, one per run, at most 2 in flight); the
	// first answer wins and the other is canceled.
	Hedge time.Duration
}

// StrategyOptions are the parameters of named strategies.
type StrategyOptions struct {
	// Base is the wait (constant) or the first window (expo*, decorrelated);
	// 0 means DefaultBase. Waits are drawn in whole milliseconds, so a
	// base under 1 ms jitters nothing.
	Base time.Duration
	// Cap bounds the windows of expo* and decorrelated; 0 means no cap.
	Cap time.Duration
	// NewBudget returns the budget of "+budget"; nil means a
	// budget.TokenBucket (its default credits) starting with
	// DefaultBudgetInitial credits. A run with that bucket makes at most
	// (200 + credits its originals earn) / 10 retries in all: each original
	// earns 1 credit while the reserve is below 200.
	NewBudget func() budget.Budget
	// Bulkhead is the size of "+bulkhead"; 0 means DefaultBulkhead.
	Bulkhead int
	// Hedge is the delay of "+hedge"; 0 means DefaultHedge.
	Hedge time.Duration
}

// StrategyNames lists the base strategy names ParseStrategy knows; each may
// be followed by "+budget" and/or "+bulkhead".
var StrategyNames = []string{"immediate", "constant", "expo", "expo-full", "expo-equal", "decorrelated"}

// ParseStrategy turns a command-line name into a strategy:
//
//	immediate     backoff.Constant(20ms) — nothing before the first attempt
//	constant      backoff.Constant(Base)
//	expo          backoff.Exponential{Base, Cap, NoJitter, ms}
//	expo-full     backoff.Exponential{Base, Cap, Full, ms} — uniform whole ms in [0, 60·2^(n−2)] before attempt n
//	expo-equal    backoff.Exponential{Base, Cap, Equal, ms}
//	decorrelated  backoff.Decorrelated{Base, Cap, ms}
//
// followed by any of "+budget" (a shared retry budget), "+bulkhead" (a
// shared concurrency limit) and "+hedge" (a second attempt after
// Options.Hedge without an answer; hedges spend the budget), each at most
// once.
func ParseStrategy(name string, o StrategyOptions) (Strategy, error) {
	if o.Base < 0 {
		return Strategy{}, fmt.Errorf("%w: strategy base must be > 0, got %v", ErrInvalid, o.Base)
	}
	if o.Cap < 0 {
		return Strategy{}, fmt.Errorf("%w: strategy cap must be >= 0 (0 means none), got %v", ErrInvalid, o.Cap)
	}
	if o.Bulkhead < 0 {
		return Strategy{}, fmt.Errorf("%w: bulkhead size must be >= 1, got %d", ErrInvalid, o.Bulkhead)
	}
	if o.Hedge < 0 {
		return Strategy{}, fmt.Errorf("%w: hedge delay must be > 0, got %v", ErrInvalid, o.Hedge)
	}
	base := o.Base
	if base == 0 {
		base = DefaultBase
	}
	if o.Cap != 0 && o.Cap < base {
		return Strategy{}, fmt.Errorf("%w: strategy cap (%v) must be >= base (%v)", ErrInvalid, o.Cap, base)
	}
	parts := strings.Split(name, "+")
	s := Strategy{Name: name}
	switch parts[0] {
	case "immediate":
		s.Title, s.Schedule = "RETRY IMMEDIATELY", backoff.Constant(ImmediateWait)
	case "constant":
		s.Title, s.Schedule = "CONSTANT BACKOFF", backoff.Constant(base)
	case "expo":
		s.Title = "EXPONENTIAL"
		s.Schedule = backoff.Exponential{Base: base, Cap: o.Cap, Jitter: backoff.NoJitter, Unit: time.Millisecond}
	case "expo-full":
		s.Title, s.Jittered = "EXPONENTIAL + JITTER", true
		s.Schedule = backoff.Exponential{Base: base, Cap: o.Cap, Jitter: backoff.Full, Unit: time.Millisecond}
	case "expo-equal":
		s.Title, s.Jittered = "EXPONENTIAL + EQUAL JITTER", true
		s.Schedule = backoff.Exponential{Base: base, Cap: o.Cap, Jitter: backoff.Equal, Unit: time.Millisecond}
	case "decorrelated":
		s.Title, s.Jittered = "DECORRELATED JITTER", true
		s.Schedule = backoff.Decorrelated{Base: base, Cap: o.Cap, Unit: time.Millisecond}
	default:
		return Strategy{}, fmt.Errorf("%w: unknown strategy %q (want one of %s, optionally followed by +budget and/or +bulkhead)",
			ErrInvalid, parts[0], strings.Join(StrategyNames, ", "))
	}
	seen := map[string]bool{}
	for _, p := range parts[1:] {
		if seen[p] {
			return Strategy{}, fmt.Errorf("%w: strategy %q names +%s twice", ErrInvalid, name, p)
		}
		seen[p] = true
		switch p {
		case "budget":
			s.Title += " + BUDGET"
			s.NewBudget = o.NewBudget
			if s.NewBudget == nil {
				s.NewBudget = func() budget.Budget { return &budget.TokenBucket{Initial: DefaultBudgetInitial} } // full
			}
		case "bulkhead":
			s.Title += " + BULKHEAD"
			s.Bulkhead = o.Bulkhead
			if s.Bulkhead == 0 {
				s.Bulkhead = DefaultBulkhead
			}
		case "hedge":
			s.Title += " + HEDGE"
			s.Hedge = o.Hedge
			if s.Hedge == 0 {
				s.Hedge = DefaultHedge
			}
		default:
			return Strategy{}, fmt.Errorf("%w: unknown strategy suffix %q in %q (want +budget, +bulkhead or +hedge)", ErrInvalid, "+"+p, name)
		}
	}
	if err := backoff.Validate(s.Schedule); err != nil {
		return Strategy{}, fmt.Errorf("%w: strategy %q: %w", ErrInvalid, name, err)
	}
	return s, nil
}
