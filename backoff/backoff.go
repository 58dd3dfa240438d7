// Package backoff says how long to wait before trying again.
//
// A [Schedule] maps "attempt n just failed" to a wait. Schedules are plain
// values without hidden state, so one value can be shared by every goroutine
// of a process: the little state some schedules need (the previous delay for
// [Decorrelated]) is passed in by the caller, and randomness comes from an
// injectable [rand.Source] so that runs can be reproduced from a seed.
//
// The package also carries [RetryDelay], the durable queue's delay formula,
// with exact integer arithmetic for every attempt up to math.MaxInt.
package backoff

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"time"
)

// MaxDelay is the longest wait any schedule returns: the largest
// time.Duration. Exponential growth saturates here instead of wrapping.
const MaxDelay = time.Duration(math.MaxInt64)

// ErrInvalid is wrapped by every validation error of this package; the
// message names the offending field or argument and the rule it broke.
var ErrInvalid = errors.New("backoff: invalid argument")

// Schedule gives the wait between a failed attempt and the next one.
//
// Delay returns the wait after failed attempt n (n >= 1: n == 1 is the wait
// between the first and the second attempt). prev is the delay this schedule
// returned after attempt n-1 of the same operation (0 when n == 1); src is the
// random source for jitter, nil meaning the runtime's lock-free generator.
// Implementations must be safe for concurrent use and must never return a
// negative delay.
type Schedule interface {
	Delay(n int, prev time.Duration, src rand.Source) time.Duration
}

// Func adapts a function to a [Schedule].
type Func func(n int, prev time.Duration, src rand.Source) time.Duration

// Delay calls f and clamps a negative result to zero.
func (f Func) Delay(n int, prev time.Duration, src rand.Source) time.Duration {
	return max(0, f(n, prev, src))
}

// Constant waits the same time after every failure. The lab's "retry
// immediately" (nothing before the first attempt, 20 ms before each later
// one) is Constant(20 * time.Millisecond): the first attempt never waits.
type Constant time.Duration

// Delay returns the constant (zero when it is negative).
func (c Constant) Delay(int, time.Duration, rand.Source) time.Duration {
	return max(0, time.Duration(c))
}

// Validate reports a negative constant.
func (c Constant) Validate() error {
	if c < 0 {
		return fmt.Errorf("%w: Constant must be >= 0, got %v", ErrInvalid, time.Duration(c))
	}
	return nil
}

// Jitter selects how a window w is turned into a wait.
type Jitter uint8

const (
	// NoJitter waits exactly w. Callers that failed together come back
	// together.
	NoJitter Jitter = iota
	// Full waits uniformly in [0, w] (AWS "full jitter").
	Full
	// Equal waits w/2 plus uniformly [0, w/2].
	Equal
)

// String returns "none", "full" or "equal".
func (j Jitter) String() string {
	switch j {
	case NoJitter:
		return "none"
	case Full:
		return "full"
	case Equal:
		return "equal"
	}
	return fmt.Sprintf("Jitter(%d)", uint8(j))
}

// Exponential grows a window geometrically and jitters it:
//
//	window(n) = min(Cap, Base * Multiplier^(n-1))
//
// and the wait is drawn from the window according to Jitter, in whole
// multiples of Unit. "Full jitter over 60·2^(n−2) ms before attempt n"
// (Brooker 2015, "Exponential Backoff And Jitter") is
//
//	Exponential{Base: 60 * time.Millisecond, Jitter: Full, Unit: time.Millisecond}
//
// which draws a uniform integer number of milliseconds in [0, 60·2^(n−1)]
// after failed attempt n.
type Exponential struct {
	// Base is the window after the first failure. Must be > 0.
	Base time.Duration
	// Multiplier is the growth factor; 0 means 2. Must be >= 1 and finite.
	Multiplier float64
	// Cap bounds the window; 0 means no cap (MaxDelay).
	Cap time.Duration
	// Jitter is how the window becomes a wait; the zero value is NoJitter.
	Jitter Jitter
	// Unit is the granularity of waits; 0 means 1ns. Jittered waits are
	// uniform over the whole multiples of Unit inside the window.
	Unit time.Duration
}

// Validate checks every field and names the first one that is wrong.
func (e Exponential) Validate() error {
	switch {
	case e.Base <= 0:
		return fmt.Errorf("%w: Exponential.Base must be > 0, got %v", ErrInvalid, e.Base)
	case e.Multiplier != 0 && (math.IsNaN(e.Multiplier) || math.IsInf(e.Multiplier, 0) || e.Multiplier < 1):
		return fmt.Errorf("%w: Exponential.Multiplier must be finite and >= 1 (0 means 2), got %v", ErrInvalid, e.Multiplier)
	case e.Cap < 0:
		return fmt.Errorf("%w: Exponential.Cap must be >= 0 (0 means none), got %v", ErrInvalid, e.Cap)
	case e.Cap != 0 && e.Cap < e.Base:
		return fmt.Errorf("%w: Exponential.Cap (%v) must be >= Base (%v)", ErrInvalid, e.Cap, e.Base)
	case e.Jitter > Equal:
		return fmt.Errorf("%w: Exponential.Jitter must be NoJitter, Full or Equal, got %d", ErrInvalid, e.Jitter)
	case e.Unit < 0:
		return fmt.Errorf("%w: Exponential.Unit must be >= 0, got %v", ErrInvalid, e.Unit)
	}
	return nil
}

// Window returns min(Cap, Base·Multiplier^(n-1)) without overflow; n < 1 is
// treated as 1.
func (e Exponential) Window(n int) time.Duration {
	limit := e.Cap
	if limit <= 0 {
		limit = MaxDelay
	}
	base := max(e.Base, 0)
	if base >= limit {
		return limit
	}
	if n < 1 {
		n = 1
	}
	m := e.Multiplier
	if m == 0 || m == 2 {
		return shiftWindow(n, base, limit)
	}
	if !(m > 1) || math.IsInf(m, 0) { // NaN, < 1 or +Inf: no sensible growth
		if m > 1 {
			return limit
		}
		return base
	}
	w := float64(base) * math.Pow(m, float64(n-1))
	if !(w < float64(limit)) { // also catches +Inf
		return limit
	}
	return time.Duration(w)
}

// shiftWindow is min(limit, base<<(n-1)) for positive base < limit.
func shiftWindow(n int, base, limit time.Duration) time.Duration {
	shift := n - 1
	if shift >= 63 || base > limit>>uint(shift) {
		return limit
	}
	return base << uint(shift)
}

// Delay returns the jittered wait after failed attempt n.
func (e Exponential) Delay(n int, _ time.Duration, src rand.Source) time.Duration {
	return jitter(e.Window(n), e.Jitter, e.Unit, src)
}

// jitter turns a window into a wait in whole units.
func jitter(w time.Duration, j Jitter, unit time.Duration, src rand.Source) time.Duration {
	if w <= 0 {
		return 0
	}
	if unit <= 0 {
		unit = 1
	}
	k := uint64(w / unit) // whole units inside the window
	switch j {
	case Full:
		return time.Duration(uniformUpTo(src, k)) * unit
	case Equal:
		half := k / 2
		return time.Duration(k-half+uniformUpTo(src, half)) * unit
	default:
		return time.Duration(k) * unit
	}
}

// Decorrelated is AWS's "decorrelated jitter":
//
//	wait = min(Cap, uniform(Base, prev*3))
//
// with prev = Base before the first retry. The state (prev) belongs to each
// caller and is passed to Delay, so one value serves many callers.
type Decorrelated struct {
	// Base is the smallest wait. Must be > 0.
	Base time.Duration
	// Cap bounds the wait; 0 means no cap.
	Cap time.Duration
	// Unit is the granularity; 0 means 1ns.
	Unit time.Duration
}

// Validate checks every field and names the first one that is wrong.
func (d Decorrelated) Validate() error {
	switch {
	case d.Base <= 0:
		return fmt.Errorf("%w: Decorrelated.Base must be > 0, got %v", ErrInvalid, d.Base)
	case d.Cap < 0:
		return fmt.Errorf("%w: Decorrelated.Cap must be >= 0 (0 means none), got %v", ErrInvalid, d.Cap)
	case d.Cap != 0 && d.Cap < d.Base:
		return fmt.Errorf("%w: Decorrelated.Cap (%v) must be >= Base (%v)", ErrInvalid, d.Cap, d.Base)
	case d.Unit < 0:
		return fmt.Errorf("%w: Decorrelated.Unit must be >= 0, got %v", ErrInvalid, d.Unit)
	}
	return nil
}

// Delay returns min(Cap, uniform(Base, 3·prev)) in whole units, with prev
// raised to Base: the draw spans [Base, 3·prev] whatever the cap, and a draw
// above Cap waits exactly Cap, so once prev reaches the cap about two thirds
// of the waits equal it (AWS's formula; for Base 5 ms, Cap 2 s the mean
// wait there is about 1.67 s).
func (d Decorrelated) Delay(_ int, prev time.Duration, src rand.Source) time.Duration {
	limit := d.Cap
	if limit <= 0 {
		limit = MaxDelay
	}
	base := min(max(d.Base, 0), limit)
	prev = max(prev, base)
	hi := MaxDelay
	if prev <= MaxDelay/3 {
		hi = prev * 3
	}
	unit := d.Unit
	if unit <= 0 {
		unit = 1
	}
	lo := base / unit // first whole unit >= base, without overflowing base+unit-1
	if base%unit != 0 {
		lo++
	}
	top := hi / unit
	if top <= lo {
		if lo > limit/unit { // no whole unit in [base, limit]
			return limit
		}
		return min(lo*unit, limit)
	}
	w := time.Duration(uint64(lo)+uniformUpTo(src, uint64(top-lo))) * unit
	return min(w, limit)
}

// Sequence waits ds[n-1] after failed attempt n and repeats the last value
// once the list runs out. An empty Sequence never waits.
type Sequence []time.Duration

// Delay returns the n-th entry (or the last).
func (s Sequence) Delay(n int, _ time.Duration, _ rand.Source) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := min(max(n, 1), len(s)) - 1
	return max(0, s[i])
}

// Validate rejects negative entries.
func (s Sequence) Validate() error {
	for i, d := range s {
		if d < 0 {
			return fmt.Errorf("%w: Sequence[%d] must be >= 0, got %v", ErrInvalid, i, d)
		}
	}
	return nil
}

// Capped bounds another schedule.
type Capped struct {
	// Schedule is the bounded schedule; it must not be nil.
	Schedule Schedule
	// Max is the longest wait returned; must be >= 0.
	Max time.Duration
}

// Delay returns min(Max, Schedule.Delay(...)).
func (c Capped) Delay(n int, prev time.Duration, src rand.Source) time.Duration {
	if c.Schedule == nil {
		return 0
	}
	return min(max(c.Max, 0), c.Schedule.Delay(n, prev, src))
}

// Validate checks Max and the wrapped schedule.
func (c Capped) Validate() error {
	if c.Schedule == nil {
		return fmt.Errorf("%w: Capped.Schedule must not be nil", ErrInvalid)
	}
	if c.Max < 0 {
		return fmt.Errorf("%w: Capped.Max must be >= 0, got %v", ErrInvalid, c.Max)
	}
	return Validate(c.Schedule)
}

// Jittered applies a jitter mode to any schedule's delay, treating that
// delay as the window.
type Jittered struct {
	// Schedule gives the window; it must not be nil.
	Schedule Schedule
	// Jitter is how the window becomes a wait.
	Jitter Jitter
	// Unit is the granularity of waits; 0 means 1ns.
	Unit time.Duration
}

// Delay jitters the wrapped schedule's delay.
func (j Jittered) Delay(n int, prev time.Duration, src rand.Source) time.Duration {
	if j.Schedule == nil {
		return 0
	}
	return jitter(j.Schedule.Delay(n, prev, src), j.Jitter, j.Unit, src)
}

// Validate checks the jitter mode, the unit and the wrapped schedule.
func (j Jittered) Validate() error {
	switch {
	case j.Schedule == nil:
		return fmt.Errorf("%w: Jittered.Schedule must not be nil", ErrInvalid)
	case j.Jitter > Equal:
		return fmt.Errorf("%w: Jittered.Jitter must be NoJitter, Full or Equal, got %d", ErrInvalid, j.Jitter)
	case j.Unit < 0:
		return fmt.Errorf("%w: Jittered.Unit must be >= 0, got %v", ErrInvalid, j.Unit)
	}
	return Validate(j.Schedule)
}

// Validate validates s when it knows how (it has a Validate() error method)
// and rejects a nil schedule.
func Validate(s Schedule) error {
	if s == nil {
		return fmt.Errorf("%w: schedule must not be nil", ErrInvalid)
	}
	if v, ok := s.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}

// uniformUpTo returns a uniform integer in [0, n] (inclusive) using Lemire's
// nearly-divisionless method on src (nil: the runtime generator).
func uniformUpTo(src rand.Source, n uint64) uint64 {
	if n == 0 {
		return 0
	}
	if n == math.MaxUint64 {
		return next(src)
	}
	return uniformBelow(src, n+1)
}

// uniformBelow returns a uniform integer in [0, n) for n > 0.
func uniformBelow(src rand.Source, n uint64) uint64 {
	hi, lo := bits.Mul64(next(src), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(next(src), n)
		}
	}
	return hi
}

func next(src rand.Source) uint64 {
	if src == nil {
		return rand.Uint64()
	}
	return src.Uint64()
}

// Float64 returns a uniform float in [0, 1) from src (nil: the runtime
// generator). It is the ratio drawn by [Ratio] and by the durable queue.
func Float64(src rand.Source) float64 {
	return float64(next(src)>>11) / (1 << 53)
}
