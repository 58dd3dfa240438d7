package budget

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Defaults of [CircuitConfig]'s zero fields.
const (
	DefaultFailureRatio  = 0.5              // CircuitConfig.FailureRatio
	DefaultMinCalls      = 20               // CircuitConfig.MinCalls
	DefaultCircuitWindow = 10 * time.Second // CircuitConfig.Window
	DefaultCoolDown      = 5 * time.Second  // CircuitConfig.CoolDown
	DefaultTrialCalls    = 1                // CircuitConfig.TrialCalls
	// MaxTrialCalls bounds CircuitConfig.TrialCalls.
	MaxTrialCalls = 1<<16 - 1
)

// CircuitState is the state of a [CircuitBreaker].
type CircuitState uint8

const (
	// CircuitClosed admits every attempt and counts outcomes.
	CircuitClosed CircuitState = iota
	// CircuitOpen refuses every attempt until its cool-down has passed.
	CircuitOpen
	// CircuitHalfOpen admits a bounded number of trial attempts; the
	// first trial outcome closes the circuit (served) or opens it again.
	CircuitHalfOpen
)

var circuitNames = [...]string{"closed", "open", "half-open"}

// String returns "closed", "open" or "half-open".
func (s CircuitState) String() string {
	if int(s) < len(circuitNames) {
		return circuitNames[s]
	}
	return fmt.Sprintf("CircuitState(%d)", uint8(s))
}

// Circuit is implemented by budgets that refuse because a circuit is not
// closed, so that a driver can give such refusals a reason of their own
// (retry.CircuitOpen) instead of calling them a spent budget.
type Circuit interface {
	Budget
	// State returns the circuit's state as of the last call that changed it.
	State() CircuitState
}

// CircuitConfig configures a [CircuitBreaker]. Zero fields take the
// defaults above.
type CircuitConfig struct {
	// FailureRatio opens the circuit when failures / calls over Window
	// reaches it, in (0, 1]; 0 means DefaultFailureRatio.
	FailureRatio float64
	// MinCalls is how many outcomes Window must hold before the ratio is
	// judged (>= 1); 0 means DefaultMinCalls.
	MinCalls int
	// Window is the span of the sliding window of outcomes (10 slots);
	// 0 means DefaultCircuitWindow.
	Window time.Duration
	// CoolDown is how long the circuit stays open before it admits trials
	// (whole milliseconds; a part is rounded up); 0 means DefaultCoolDown.
	// A half-open circuit whose trials all went out without an outcome
	// (their callers gave up) admits new ones one CoolDown later.
	CoolDown time.Duration
	// TrialCalls bounds the attempts admitted while half-open, in
	// [1, MaxTrialCalls]; 0 means DefaultTrialCalls.
	TrialCalls int
	// OnStateChange, if set, is called after every change of state by the
	// goroutine that made it, with the time it was made at (feed it to
	// logs or metrics; it must not block). Changes are serialized, but
	// calls for successive changes may overlap.
	OnStateChange func(from, to CircuitState, now time.Time)
}

// CircuitBreaker is a circuit breaker as a [Budget]: unlike [Breaker],
// which stops only retries, it refuses original requests too while open,
// so a dependency that is down receives (almost) nothing until it is
// likely to be back.
//
//   - Closed: every attempt is admitted; outcomes are counted over a
//     sliding window, and once it holds MinCalls outcomes of which at
//     least FailureRatio failed, the circuit opens.
//   - Open: Request and Retry refuse, until CoolDown has passed; the
//     next Request or Retry then turns it half-open.
//   - Half-open: Request and Retry admit at most TrialCalls attempts. The
//     first outcome reported (Result) closes the circuit, with a fresh
//     window, if the dependency served it, and opens it again if not.
//
// Outcomes reported while open are ignored. The closed path is lock-free:
// Request and Retry load one atomic word, Result counts in the window's
// slot with one atomic add and, after a failure, sums the window.
// State changes are compare-and-swaps on one word; none allocates but
// closing (a fresh window). Nothing reads the clock: callers pass now.
type CircuitBreaker struct {
	// word packs the state (2 bits), the trials admitted while half-open
	// (16 bits) and the time of the last change in whole ms since origin,
	// rounded up (46 bits: about 2,000 years).
	word atomic.Uint64
	_    [56]byte // keep the state word on its own cache line

	counts   atomic.Pointer[circuitCounts]
	origin   origin
	ratio    float64
	minCalls uint64
	span     time.Duration
	coolDown time.Duration
	trials   uint64
	onChange func(from, to CircuitState, now time.Time)
}

type circuitCounts struct{ calls, failures *window }

const (
	stateBits  = 2
	trialBits  = 16
	trialShift = stateBits
	atShift    = stateBits + trialBits
	stateMask  = 1<<stateBits - 1
	trialMask  = 1<<trialBits - 1
)

func pack(s CircuitState, trials uint64, at uint64) uint64 {
	return uint64(s) | trials<<trialShift | at<<atShift
}

func unpack(w uint64) (s CircuitState, trials uint64, at uint64) {
	return CircuitState(w & stateMask), w >> trialShift & trialMask, w >> atShift
}

// NewCircuitBreaker returns a closed circuit breaker configured by c. An
// error names the first field that is wrong.
func NewCircuitBreaker(c CircuitConfig) (*CircuitBreaker, error) {
	const name = "CircuitConfig."
	switch {
	case math.IsNaN(c.FailureRatio) || math.IsInf(c.FailureRatio, 0):
		return nil, fmt.Errorf("%w: %sFailureRatio must be a finite number, got %v", ErrInvalid, name, c.FailureRatio)
	case c.FailureRatio < 0 || c.FailureRatio > 1:
		return nil, fmt.Errorf("%w: %sFailureRatio must be in (0, 1] (0 means %v), got %v", ErrInvalid, name, DefaultFailureRatio, c.FailureRatio)
	case c.MinCalls < 0:
		return nil, fmt.Errorf("%w: %sMinCalls must be >= 1 (0 means %d), got %d", ErrInvalid, name, DefaultMinCalls, c.MinCalls)
	case c.MinCalls > math.MaxUint32:
		return nil, fmt.Errorf("%w: %sMinCalls must be <= %d, got %d", ErrInvalid, name, uint32(math.MaxUint32), c.MinCalls)
	case c.Window < 0:
		return nil, fmt.Errorf("%w: %sWindow must be > 0 (0 means %v), got %v", ErrInvalid, name, DefaultCircuitWindow, c.Window)
	case c.CoolDown < 0:
		return nil, fmt.Errorf("%w: %sCoolDown must be > 0 (0 means %v), got %v", ErrInvalid, name, DefaultCoolDown, c.CoolDown)
	case c.TrialCalls < 0 || c.TrialCalls > MaxTrialCalls:
		return nil, fmt.Errorf("%w: %sTrialCalls must be in [1, %d] (0 means %d), got %d", ErrInvalid, name, MaxTrialCalls, DefaultTrialCalls, c.TrialCalls)
	}
	b := &CircuitBreaker{
		ratio: orDefault(c.FailureRatio, DefaultFailureRatio), minCalls: uint64(orDefault(c.MinCalls, DefaultMinCalls)),
		span: orDefault(c.Window, DefaultCircuitWindow), coolDown: orDefault(c.CoolDown, DefaultCoolDown),
		trials: uint64(orDefault(c.TrialCalls, DefaultTrialCalls)), onChange: c.OnStateChange,
	}
	b.counts.Store(b.fresh())
	return b, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (b *CircuitBreaker) fresh() *circuitCounts {
	return &circuitCounts{calls: newWindow(b.span, 10), failures: newWindow(b.span, 10)}
}

// State returns the circuit's state. An open circuit whose cool-down has
// passed reports open until a Request or Retry turns it half-open.
func (b *CircuitBreaker) State() CircuitState {
	s, _, _ := unpack(b.word.Load())
	return s
}

// Counts returns the outcomes and the failures in the window ending at
// now, as the closed circuit judges them (both 0 right after closing).
func (b *CircuitBreaker) Counts(now time.Time) (calls, failures uint64) {
	c := b.counts.Load()
	return c.calls.sum(now), c.failures.sum(now)
}

// Request admits an original request unless the circuit refuses it: open,
// or half-open with its trials taken.
func (b *CircuitBreaker) Request(now time.Time) bool {
	w := b.word.Load()
	if CircuitState(w&stateMask) == CircuitClosed {
		return true
	}
	return b.admit(w, now)
}

// Retry admits a retry under the same rule as Request.
func (b *CircuitBreaker) Retry(now time.Time) bool { return b.Request(now) }

// ms returns now in whole milliseconds since the origin, rounded up.
func (b *CircuitBreaker) ms(now time.Time) uint64 {
	d := b.origin.since(now)
	if d <= 0 {
		return 0
	}
	return uint64((d + time.Millisecond - 1) / time.Millisecond)
}

// cooled reports whether the cool-down since the change at at has passed.
func (b *CircuitBreaker) cooled(at uint64, now time.Time) bool {
	return b.origin.since(now) >= time.Duration(at)*time.Millisecond+b.coolDown
}

// admit is Request off the closed path.
func (b *CircuitBreaker) admit(w uint64, now time.Time) bool {
	for {
		s, taken, at := unpack(w)
		switch {
		case s == CircuitClosed:
			return true
		case s == CircuitOpen || taken >= b.trials:
			// Open, or half-open with every trial out: a trial that never
			// reported back frees the circuit one cool-down later.
			if !b.cooled(at, now) {
				return false
			}
			if b.word.CompareAndSwap(w, pack(CircuitHalfOpen, 1, b.ms(now))) {
				if s == CircuitOpen {
					b.changed(CircuitOpen, CircuitHalfOpen, now)
				}
				return true
			}
		default: // half-open with a trial left
			if b.word.CompareAndSwap(w, pack(CircuitHalfOpen, taken+1, at)) {
				return true
			}
		}
		w = b.word.Load()
	}
}

// Result records an outcome: ok means the dependency served the attempt.
func (b *CircuitBreaker) Result(now time.Time, ok bool) {
	for {
		w := b.word.Load()
		switch s, _, _ := unpack(w); s {
		case CircuitClosed:
			c := b.counts.Load()
			c.calls.add(now, 1)
			if ok {
				return
			}
			c.failures.add(now, 1)
			calls, failures := c.calls.sum(now), c.failures.sum(now)
			if calls >= b.minCalls && float64(failures) >= b.ratio*float64(calls) &&
				b.word.CompareAndSwap(w, pack(CircuitOpen, 0, b.ms(now))) {
				b.changed(CircuitClosed, CircuitOpen, now)
			}
			return
		case CircuitOpen:
			return
		case CircuitHalfOpen:
			if ok {
				// A fresh window before the state says closed, so no
				// failure that opened the circuit counts again.
				b.counts.Store(b.fresh())
				if b.word.CompareAndSwap(w, pack(CircuitClosed, 0, b.ms(now))) {
					b.changed(CircuitHalfOpen, CircuitClosed, now)
					return
				}
			} else if b.word.CompareAndSwap(w, pack(CircuitOpen, 0, b.ms(now))) {
				b.changed(CircuitHalfOpen, CircuitOpen, now)
				return
			}
		}
	}
}

func (b *CircuitBreaker) changed(from, to CircuitState, now time.Time) {
	if b.onChange != nil {
		b.onChange(from, to, now)
	}
}

// Guard returns a budget with the circuit in front of b, for a policy that
// wants both (retry.Policy has one Budget): Request and Retry ask the
// circuit first, so an attempt it refuses costs b nothing, and both hear
// every Result. The result is a [Circuit] with this circuit's state, so a
// driver gives refusals while the circuit is not closed its circuit-open
// reason — a refusal by b while the circuit is half-open included; a
// trial admitted by the circuit and then refused by b is replaced one
// cool-down later.
func (cb *CircuitBreaker) Guard(b Budget) Circuit { return guarded{cb, b} }

type guarded struct {
	cb     *CircuitBreaker
	behind Budget
}

func (g guarded) Request(now time.Time) bool { return g.cb.Request(now) && g.behind.Request(now) }
func (g guarded) Retry(now time.Time) bool   { return g.cb.Retry(now) && g.behind.Retry(now) }
func (g guarded) State() CircuitState        { return g.cb.State() }
func (g guarded) Result(now time.Time, ok bool) {
	g.cb.Result(now, ok)
	g.behind.Result(now, ok)
}
