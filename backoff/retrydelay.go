package backoff

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// RetryDelay is the durable queue's delay:
//
//	window = min(cap, base·2^(attempt−1))
//	delay  = floor(window·ratio), truncated to whole milliseconds
//
// attempt counts from 1 (the delay after the first failure); ratio is the
// caller-chosen jitter ratio in [0, 1]. The cap is applied before the ratio,
// so base 100ms, cap 250ms, attempt 3, ratio 0.5 gives 125ms (not 200ms).
//
// The window saturates at cap for every attempt up to math.MaxInt: no shift
// wraps to zero (a plain 1<<(attempt-1) wraps past attempt 63). The product
// is the window in milliseconds (exact in a float64 for every Duration)
// times ratio, one IEEE multiplication, then floor — so RetryDelay agrees bit
// for bit with floor(window_ms * ratio) in float64 arithmetic: base 10ms, ratio 0.3 gives 3ms, and base 100ms,
// ratio 0.29 gives 28ms (100*0.29 is 28.999999999999996 in binary floating
// point). A window that is not a whole number of milliseconds takes its
// fractional part into the product.
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
	window := shiftWindow(attempt, base, cap)
	whole, frac := window/time.Millisecond, window%time.Millisecond
	windowMS := float64(whole) + float64(frac)/float64(time.Millisecond)
	d := time.Duration(math.Floor(windowMS * ratio))
	return min(d, whole) * time.Millisecond, nil
}

// Ratio is RetryDelay as a [Schedule]: after failed attempt n it
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
