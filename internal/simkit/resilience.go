package simkit

import (
	"time"

	"github.com/staggerhq/stagger/budget"
	"github.com/staggerhq/stagger/limit"
)

// The circuit breaker and the rate limit as simulator strategies: the
// shipped budget.CircuitBreaker and limit.Rate, on the run's virtual clock.

// Herd's "+rate": starts per second and burst of the limit.Rate the
// workers share (a tenth of the default database host's 50,000 per
// second would not bind; this one does, and lets a first wave of one
// attempt per default worker through at once).
const (
	HerdRate  = 200
	HerdBurst = 100
)

// newCircuit returns the budget of "+breaker": budget.CircuitBreaker with
// its defaults (half of at least 20 outcomes in 10 s failed → open for 5 s,
// then one trial).
func newCircuit() budget.Budget {
	cb, err := budget.NewCircuitBreaker(budget.CircuitConfig{})
	if err != nil {
		panic(err) // the defaults are valid
	}
	return cb
}

// virtualRate is a limit.Rate read at the virtual time of the engine it is
// bound to: limit.Limiter's TryAcquire takes no time, so a model binds the
// limiter to its engine before the first event (see bindClock).
type virtualRate struct {
	r *limit.Rate
	e *Engine
}

// newVirtualRate returns an unbound rate limit of perSecond starts per
// second with bursts of burst.
func newVirtualRate(perSecond float64, burst int) *virtualRate {
	r, err := limit.NewRate(perSecond, burst, func() time.Time { panic("sim: a rate limit read the wall clock") })
	if err != nil {
		panic(err) // the callers pass constants
	}
	return &virtualRate{r: r}
}

func (v *virtualRate) TryAcquire() bool { return v.r.TryAcquireAt(v.e.Time()) }
func (v *virtualRate) Release(bool)     {}

// bindClock binds l to e when it is a limiter on virtual time.
func bindClock(l limit.Limiter, e *Engine) {
	if v, ok := l.(*virtualRate); ok {
		v.e = e
	}
}
