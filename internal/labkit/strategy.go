package labkit

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
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
	// 200 healthy requests, and as the zero TokenBucket starts. Starting
	// empty (TokenBucket.Empty), 4 callers earn 4 credits and no retry is
	// ever allowed.
	DefaultBudgetInitial = budget.DefaultMax
	// DefaultBulkhead is the number of slots +bulkhead shares among the
	// callers of a run.
	DefaultBulkhead = 2
	// DefaultRate is the starts per second +rate allows all the callers of
	// a run together.
	DefaultRate = 20
	// DefaultBurst is the burst of +rate: the starts it admits at once.
	DefaultBurst = 4
	// DefaultHedge is how long an attempt of +hedge runs before a second
	// one is sent.
	DefaultHedge = 100 * time.Millisecond
)

// DefaultBreaker is the circuit breaker of +breaker, sized for a run of a
// few callers: it opens when half of at least 4 outcomes in the last second
// failed and admits one trial 250 ms later.
var DefaultBreaker = budget.CircuitConfig{FailureRatio: 0.5, MinCalls: 4, Window: time.Second,
	CoolDown: 250 * time.Millisecond, TrialCalls: 1}

// Strategy is a named way of retrying: the schedule every caller uses, and
// optionally a budget (or circuit breaker), a bulkhead and a rate limit
// shared by all callers of one run.
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
	// NewLimiter, if set, returns a limiter shared by the callers of one
	// run (a fresh one per run), checked after the bulkhead: an attempt it
	// refuses is not sent and its caller gives up at once ("limited").
	NewLimiter func() limit.Limiter
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
	// Breaker configures the budget.CircuitBreaker of "+breaker"; the
	// zero value means DefaultBreaker (a config with any field set takes
	// budget's defaults for its zero fields). With "+budget" too, the
	// circuit is asked first and an attempt it refuses costs no credit.
	Breaker budget.CircuitConfig
	// Rate is the starts per second of "+rate" (a limit.Rate shared by the
	// callers); 0 means DefaultRate.
	Rate float64
	// Burst is the burst of "+rate"; 0 means DefaultBurst.
	Burst int
	// Hedge is the delay of "+hedge"; 0 means DefaultHedge.
	Hedge time.Duration
}

// StrategyNames lists the base strategy names ParseStrategy knows; each may
// be followed by any of "+budget", "+bulkhead", "+breaker", "+rate" and "+hedge".
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
// shared concurrency limit), "+breaker" (a shared circuit breaker, which
// refuses original requests too while open; refusals give up with reason
// "circuit-open"), "+rate" (a shared limit of starts per second) and
// "+hedge" (a second attempt after Options.Hedge without an answer; hedges
// spend the budget), each at most once.
func ParseStrategy(name string, o StrategyOptions) (Strategy, error) {
	opt, err := resolveStrategyOptions(o)
	if err != nil {
		return Strategy{}, err
	}
	parts := strings.Split(name, "+")
	s, err := baseStrategy(name, parts[0], opt)
	if err != nil {
		return Strategy{}, err
	}
	seen := map[string]bool{}
	for _, p := range parts[1:] {
		if seen[p] {
			return Strategy{}, fmt.Errorf("%w: strategy %q names +%s twice", ErrInvalid, name, p)
		}
		seen[p] = true
		if err := s.addSuffix(name, p, opt); err != nil {
			return Strategy{}, err
		}
	}
	if seen["breaker"] {
		// After the loop: +budget may come before or after +breaker.
		s.guardWithBreaker(opt.breaker)
	}
	if err := backoff.Validate(s.Schedule); err != nil {
		return Strategy{}, fmt.Errorf("%w: strategy %q: %w", ErrInvalid, name, err)
	}
	return s, nil
}

// strategyOptions are StrategyOptions checked, with the defaults put in
// for the zero values the suffixes read.
type strategyOptions struct {
	StrategyOptions
	base    time.Duration
	rate    float64
	burst   int
	breaker budget.CircuitConfig
}

// resolveStrategyOptions checks every option, whichever suffixes the name
// turns out to have, so a bad option is reported the same way for all.
func resolveStrategyOptions(o StrategyOptions) (strategyOptions, error) {
	r := strategyOptions{StrategyOptions: o}
	if o.Base < 0 {
		return r, fmt.Errorf("%w: strategy base must be > 0, got %v", ErrInvalid, o.Base)
	}
	if o.Cap < 0 {
		return r, fmt.Errorf("%w: strategy cap must be >= 0 (0 means none), got %v", ErrInvalid, o.Cap)
	}
	if o.Bulkhead < 0 {
		return r, fmt.Errorf("%w: bulkhead size must be >= 1, got %d", ErrInvalid, o.Bulkhead)
	}
	r.rate, r.burst = cmp.Or(o.Rate, DefaultRate), cmp.Or(o.Burst, DefaultBurst)
	if _, err := limit.NewRate(r.rate, r.burst, nil); err != nil {
		return r, fmt.Errorf("%w: +rate: %w", ErrInvalid, err)
	}
	r.breaker = o.Breaker
	if b := r.breaker; b.FailureRatio == 0 && b.MinCalls == 0 && b.Window == 0 && b.CoolDown == 0 && b.TrialCalls == 0 {
		r.breaker.FailureRatio, r.breaker.MinCalls, r.breaker.Window, r.breaker.CoolDown, r.breaker.TrialCalls =
			DefaultBreaker.FailureRatio, DefaultBreaker.MinCalls, DefaultBreaker.Window, DefaultBreaker.CoolDown, DefaultBreaker.TrialCalls
	}
	if _, err := budget.NewCircuitBreaker(r.breaker); err != nil {
		return r, fmt.Errorf("%w: +breaker: %w", ErrInvalid, err)
	}
	if o.Hedge < 0 {
		return r, fmt.Errorf("%w: hedge delay must be > 0, got %v", ErrInvalid, o.Hedge)
	}
	r.base = o.Base
	if r.base == 0 {
		r.base = DefaultBase
	}
	if o.Cap != 0 && o.Cap < r.base {
		return r, fmt.Errorf("%w: strategy cap (%v) must be >= base (%v)", ErrInvalid, o.Cap, r.base)
	}
	return r, nil
}

// baseStrategy is the strategy the name's first part names, before any
// suffix.
func baseStrategy(name, first string, o strategyOptions) (Strategy, error) {
	s, base := Strategy{Name: name}, o.base
	switch first {
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
		return Strategy{}, fmt.Errorf("%w: unknown strategy %q (want one of %s, optionally followed by +budget, +bulkhead, +breaker, +rate or +hedge)",
			ErrInvalid, first, strings.Join(StrategyNames, ", "))
	}
	return s, nil
}

// addSuffix adds what the suffix p ("budget", "bulkhead", ...) of the
// strategy name stands for; "+breaker" is finished by guardWithBreaker.
func (s *Strategy) addSuffix(name, p string, o strategyOptions) error {
	switch p {
	case "budget":
		s.Title += " + BUDGET"
		s.NewBudget = o.NewBudget
		if s.NewBudget == nil {
			s.NewBudget = func() budget.Budget { return &budget.TokenBucket{Initial: DefaultBudgetInitial} } // full
		}
	case "bulkhead":
		s.Title += " + BULKHEAD"
		s.Bulkhead = cmp.Or(o.Bulkhead, DefaultBulkhead)
	case "breaker":
		s.Title += " + BREAKER"
	case "rate":
		s.Title += " + RATE"
		rate, burst := o.rate, o.burst
		s.NewLimiter = func() limit.Limiter {
			r, _ := limit.NewRate(rate, burst, nil) // validated above
			return r
		}
	case "hedge":
		s.Title += " + HEDGE"
		s.Hedge = cmp.Or(o.Hedge, DefaultHedge)
	default:
		return fmt.Errorf("%w: unknown strategy suffix %q in %q (want +budget, +bulkhead, +breaker, +rate or +hedge)", ErrInvalid, "+"+p, name)
	}
	return nil
}

// guardWithBreaker puts the circuit breaker in front of the budget, if
// there is one.
func (s *Strategy) guardWithBreaker(breaker budget.CircuitConfig) {
	behind := s.NewBudget
	s.NewBudget = func() budget.Budget {
		cb, _ := budget.NewCircuitBreaker(breaker) // validated above
		if behind == nil {
			return cb
		}
		return cb.Guard(behind())
	}
}
