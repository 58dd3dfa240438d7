package backoff

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"time"
)

// RetryDelay is the durable-queue delay of seed 002:
//
//	window = min(cap, base·2^(attempt−1))
//	delay  = floor(window·ratio), truncated to whole milliseconds
//
// attempt counts from 1 (the delay after the first failure); ratio is the
// caller-chosen jitter ratio in [0, 1]. The cap is applied before the ratio,
// so base 100ms, cap 250ms, attempt 3, ratio 0.5 gives 125ms (not 200ms).
//
// The arithmetic is exact: the window saturates at cap for every attempt up to
// math.MaxInt (no shift wraps to zero), and window·ratio is computed as the
// exact product of the integer window and the binary value of ratio before
// flooring, so no rounding can push a delay across a millisecond boundary.
//
// Errors wrap [ErrInvalid] and name the argument: attempt < 1, base <= 0,
// cap < base, ratio NaN, ±Inf or outside [0, 1].
func RetryDelay(attempt int, base, cap time.Duration, ratio float64) (time.Duration, error) {
	switch {
	case attempt < 1:
		return 0, fmt.Errorf("%w: attempt must be >= 1, got %d", ErrInvalid, attempt)
	case base <= 0:
		return 0, fmt.Errorf("%w: base must be > 0, got %v", ErrInvalid, base)
	case cap < base:
		return 0, fmt.Errorf("%w: cap (%v) must be >= base (%v)", ErrInvalid, cap, base)
	case math.IsNaN(ratio):
		return 0, fmt.Errorf("%w: ratio must be a number in [0, 1], got NaN", ErrInvalid)
	case math.IsInf(ratio, 0):
		return 0, fmt.Errorf("%w: ratio must be finite and in [0, 1], got %v", ErrInvalid, ratio)
	case ratio < 0 || ratio > 1:
		return 0, fmt.Errorf("%w: ratio must be in [0, 1], got %v", ErrInvalid, ratio)
	}
	d := mulFloor(shiftWindow(attempt, base, cap), ratio)
	return d - d%time.Millisecond, nil
}

// mulFloor returns floor(w·r) exactly for w >= 0 and r in [0, 1].
func mulFloor(w time.Duration, r float64) time.Duration {
	if r == 1 {
		return w
	}
	if r == 0 || w <= 0 {
		return 0
	}
	frac, exp := math.Frexp(r) // r = frac·2^exp, frac in [0.5, 1), exp <= 0
	mant := uint64(frac * (1 << 53))
	shift := uint(53 - exp) // r = mant·2^-shift, shift >= 53
	hi, lo := bits.Mul64(uint64(w), mant)
	switch {
	case shift >= 128:
		return 0
	case shift >= 64:
		return time.Duration(hi >> (shift - 64))
	default:
		return time.Duration(hi<<(64-shift) | lo>>shift)
	}
}

// Ratio is the seed-002 schedule as a [Schedule]: after failed attempt n it
// waits RetryDelay(n, Base, Cap, ratio) with a fresh uniform ratio in [0, 1)
// drawn from the random source for every retry. It is what the durable queue
// uses; a fixed ratio (every worker passing 0.5) would spread nothing.
type Ratio struct {
	Base time.Duration // must be > 0
	Cap  time.Duration // must be >= Base
}

// Delay draws a ratio and applies [RetryDelay]; invalid fields give 0.
func (r Ratio) Delay(n int, _ time.Duration, src rand.Source) time.Duration {
	d, err := RetryDelay(max(n, 1), r.Base, r.Cap, Float64(src))
	if err != nil {
		return 0
	}
	return d
}

// Validate checks Base and Cap.
func (r Ratio) Validate() error {
	if r.Base <= 0 {
		return fmt.Errorf("%w: Ratio.Base must be > 0, got %v", ErrInvalid, r.Base)
	}
	if r.Cap < r.Base {
		return fmt.Errorf("%w: Ratio.Cap (%v) must be >= Base (%v)", ErrInvalid, r.Cap, r.Base)
	}
	return nil
}
