package backoff

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// FuzzRetryDelay: for any inputs RetryDelay never panics, and either returns
// an ErrInvalid error or a whole-millisecond delay in [0, cap].
func FuzzRetryDelay(f *testing.F) {
	f.Add(1, int64(100*ms), int64(1000*ms), 0.5)
	f.Add(3, int64(100*ms), int64(250*ms), 0.5)
	f.Add(math.MaxInt, int64(1), int64(math.MaxInt64), 1.0)
	f.Add(64, int64(ms), int64(time.Hour), 0.999999)
	f.Add(0, int64(-1), int64(-2), math.NaN())
	f.Fuzz(func(t *testing.T, attempt int, base, cap int64, ratio float64) {
		d, err := RetryDelay(attempt, time.Duration(base), time.Duration(cap), ratio)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || d != 0 {
				t.Fatalf("error %v with delay %v", err, d)
			}
			return
		}
		if d < 0 || d > time.Duration(cap) || d%ms != 0 {
			t.Fatalf("RetryDelay(%d, %d, %d, %v) = %v: outside whole ms in [0, cap]", attempt, base, cap, ratio, d)
		}
		if ratio == 1 && attempt < 63 && time.Duration(base) <= time.Duration(cap)>>(attempt-1) {
			w := time.Duration(base) << (attempt - 1)
			if d != w-w%ms {
				t.Fatalf("ratio 1: got %v, want window %v", d, w)
			}
		}
	})
}

// FuzzSchedules: every schedule, with any fields and any attempt number,
// never panics and never returns a negative wait or one above its cap.
func FuzzSchedules(f *testing.F) {
	f.Add(int64(60*ms), 2.0, int64(0), uint8(1), int64(ms), 5, int64(0), uint64(1))
	f.Add(int64(1), 1e300, int64(math.MaxInt64), uint8(2), int64(0), math.MaxInt, int64(math.MaxInt64), uint64(7))
	f.Add(int64(-5), math.NaN(), int64(-1), uint8(9), int64(-3), -4, int64(-9), uint64(0))
	f.Fuzz(func(t *testing.T, base int64, mult float64, cap int64, jit uint8, unit int64, n int, prev int64, seed uint64) {
		src := rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
		limit := time.Duration(cap)
		if limit <= 0 {
			limit = MaxDelay
		}
		e := Exponential{Base: time.Duration(base), Multiplier: mult, Cap: time.Duration(cap), Jitter: Jitter(jit % 4), Unit: time.Duration(unit)}
		if d := e.Delay(n, time.Duration(prev), src); d < 0 || (e.Validate() == nil && d > limit) {
			t.Fatalf("%+v.Delay(%d) = %v", e, n, d)
		}
		dc := Decorrelated{Base: time.Duration(base), Cap: time.Duration(cap), Unit: time.Duration(unit)}
		if d := dc.Delay(n, time.Duration(prev), src); d < 0 || (dc.Validate() == nil && d > limit) {
			t.Fatalf("%+v.Delay(%d, %d) = %v", dc, n, prev, d)
		}
		r := Ratio{Base: time.Duration(base), Cap: time.Duration(cap)}
		if d := r.Delay(n, 0, src); d < 0 || (r.Validate() == nil && d > time.Duration(cap)) {
			t.Fatalf("%+v.Delay(%d) = %v", r, n, d)
		}
		j := Jittered{Schedule: Constant(base), Jitter: Jitter(jit % 4), Unit: time.Duration(unit)}
		if d := j.Delay(n, 0, src); d < 0 || d > max(time.Duration(base), 0) {
			t.Fatalf("%+v.Delay(%d) = %v", j, n, d)
		}
	})
}
