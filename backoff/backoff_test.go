package backoff

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// seq is a deterministic source returning the given values in a loop.
type seq struct {
	v []uint64
	i int
}

func (s *seq) Uint64() uint64 { x := s.v[s.i%len(s.v)]; s.i++; return x }

func TestRetryDelaySeedNumbers(t *testing.T) {
	for _, c := range []struct {
		attempt   int
		base, cap time.Duration
		ratio     float64
		want      time.Duration
	}{
		// base=100, cap=1000, jitter=0.5: 50 ms after the 1st failure, 100 ms after the 2nd.
		{1, 100 * ms, 1000 * ms, 0.5, 50 * ms},
		{2, 100 * ms, 1000 * ms, 0.5, 100 * ms},
		// base=100, cap=250, attempt 3: window is 250 (not 400), delay 125 ms.
		{3, 100 * ms, 250 * ms, 0.5, 125 * ms},
		// Ratios 0 and 1 are the bounds.
		{1, 100 * ms, 1000 * ms, 0, 0},
		{1, 100 * ms, 1000 * ms, 1, 100 * ms},
		{4, 100 * ms, 1000 * ms, 1, 800 * ms},
		{5, 100 * ms, 1000 * ms, 1, 1000 * ms},
		{5, 100 * ms, 1000 * ms, 0, 0},
		// Fractions floor to whole milliseconds.
		{1, 100 * ms, 1000 * ms, 0.25, 25 * ms},
		{1, 3 * ms, 1000 * ms, 0.5, 1 * ms},                    // floor(1.5)
		{2, 3 * ms, 1000 * ms, 0.999, 5 * ms},                  // floor(5.994)
		{1, 10 * ms, 1000 * ms, 0.3, 3 * ms},                   // 10*0.3 == 3.0 in float64
		{1, 100 * ms, 1000 * ms, 0.29, 28 * ms},                // 100*0.29 == 28.999999999999996
		{2, 1500 * time.Microsecond, time.Second, 0.5, 1 * ms}, // window 3ms
		{1, 1500 * time.Microsecond, time.Second, 1, 1 * ms},   // fractional window 1.5ms floors to 1ms
		{3, 100 * ms, 1000 * ms, 0.123, 49 * ms},               // floor(49.2)
		// Sub-millisecond windows truncate to zero.
		{1, 500 * time.Microsecond, ms, 1, 0},
		// base == cap.
		{1, 100 * ms, 100 * ms, 1, 100 * ms},
		{9, 100 * ms, 100 * ms, 1, 100 * ms},
	} {
		got, err := RetryDelay(c.attempt, c.base, c.cap, c.ratio)
		if err != nil || got != c.want {
			t.Errorf("RetryDelay(%d, %v, %v, %v) = %v, %v; want %v", c.attempt, c.base, c.cap, c.ratio, got, err, c.want)
		}
	}
}

func TestRetryDelayNoOverflow(t *testing.T) {
	for _, attempt := range []int{62, 63, 64, 65, 100, 1 << 20, math.MaxInt32, math.MaxInt - 1, math.MaxInt} {
		got, err := RetryDelay(attempt, 100*ms, time.Hour, 1)
		if err != nil || got != time.Hour {
			t.Errorf("attempt %d: got %v, %v; want the cap 1h", attempt, got, err)
		}
	}
	// The largest representable cap.
	got, err := RetryDelay(math.MaxInt, 1, MaxDelay, 1)
	if err != nil || got != MaxDelay-MaxDelay%ms {
		t.Errorf("MaxDelay cap: got %v, %v", got, err)
	}
	got, err = RetryDelay(math.MaxInt, 1, MaxDelay, math.Nextafter(1, 0))
	if err != nil || got <= 0 || got > MaxDelay {
		t.Errorf("MaxDelay cap, ratio just below 1: got %v, %v", got, err)
	}
}

func TestRetryDelayErrors(t *testing.T) {
	for _, c := range []struct {
		attempt   int
		base, cap time.Duration
		ratio     float64
		field     string
	}{
		{0, ms, ms, 0.5, "attempt"},
		{-1, ms, ms, 0.5, "attempt"},
		{math.MinInt, ms, ms, 0.5, "attempt"},
		{1, 0, ms, 0.5, "base"},
		{1, -ms, ms, 0.5, "base"},
		{1, 2 * ms, ms, 0.5, "cap"},
		{1, ms, ms, math.NaN(), "ratio"},
		{1, ms, ms, math.Inf(1), "ratio"},
		{1, ms, ms, math.Inf(-1), "ratio"},
		{1, ms, ms, -0.01, "ratio"},
		{1, ms, ms, 1.0000001, "ratio"},
	} {
		d, err := RetryDelay(c.attempt, c.base, c.cap, c.ratio)
		if err == nil || d != 0 {
			t.Errorf("RetryDelay(%d, %v, %v, %v) = %v, nil; want an error", c.attempt, c.base, c.cap, c.ratio, d)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("error %q does not wrap ErrInvalid", err)
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("error %q does not name %q", err, c.field)
		}
	}
}

func TestOutageSchedules(t *testing.T) {
	// "Retry immediately": 0 before attempt 1 (the loop never waits before
	// the first attempt), 20ms before every later one.
	imm := Constant(20 * ms)
	for n := 1; n < 20; n++ {
		if d := imm.Delay(n, 0, nil); d != 20*ms {
			t.Fatalf("Constant(20ms).Delay(%d) = %v", n, d)
		}
	}

	// "Full jitter over 60·2^(n−2) ms" before attempt n == after failure n-1:
	// a uniform integer number of ms in [0, 60·2^(k−1)] after failure k.
	s := Exponential{Base: 60 * ms, Jitter: Full, Unit: ms}
	src := rand.NewPCG(1, 2)
	for k := 1; k <= 5; k++ {
		window := 60 * ms << (k - 1)
		seen := map[time.Duration]bool{}
		for range 20000 {
			d := s.Delay(k, 0, src)
			if d < 0 || d > window || d%ms != 0 {
				t.Fatalf("failure %d: %v outside whole ms in [0, %v]", k, d, window)
			}
			seen[d] = true
		}
		// Every whole ms in the window, both ends included, is reachable.
		if k <= 2 && len(seen) != int(window/ms)+1 {
			t.Errorf("failure %d: saw %d distinct waits, want %d", k, len(seen), window/ms+1)
		}
	}
}

func TestJitterBounds(t *testing.T) {
	src := rand.NewPCG(3, 4)
	e := Exponential{Base: 100 * ms, Cap: time.Second}
	for n := 1; n <= 10; n++ {
		w := e.Window(n)
		if got := e.Delay(n, 0, src); got != w {
			t.Errorf("NoJitter: Delay(%d) = %v, want window %v", n, got, w)
		}
		full := e
		full.Jitter = Full
		eq := e
		eq.Jitter = Equal
		for range 1000 {
			if d := full.Delay(n, 0, src); d < 0 || d > w {
				t.Fatalf("Full: %v outside [0, %v]", d, w)
			}
			if d := eq.Delay(n, 0, src); d < w/2 || d > w {
				t.Fatalf("Equal: %v outside [%v, %v]", d, w/2, w)
			}
		}
	}
	if w := e.Window(4); w != 800*ms {
		t.Errorf("Window(4) = %v", w)
	}
	if w := e.Window(5); w != time.Second {
		t.Errorf("Window(5) = %v, want the cap", w)
	}
}

func TestExponentialMultiplier(t *testing.T) {
	e := Exponential{Base: 100 * ms, Multiplier: 1.5}
	want := []time.Duration{100 * ms, 150 * ms, 225 * ms, 337500 * time.Microsecond}
	for i, w := range want {
		if got := e.Window(i + 1); got != w {
			t.Errorf("Window(%d) = %v, want %v", i+1, got, w)
		}
	}
	// 1s, ×2, max 30s: 1, 2, 4, 8, 16, 30, 30.
	s := Exponential{Base: time.Second, Cap: 30 * time.Second}
	for i, w := range []time.Duration{1, 2, 4, 8, 16, 30, 30, 30} {
		if got := s.Delay(i+1, 0, nil); got != w*time.Second {
			t.Errorf("wait %d = %v, want %vs", i+1, got, w)
		}
	}
	// Growth never wraps.
	huge := Exponential{Base: time.Second, Multiplier: 1e300}
	for _, n := range []int{2, 3, 1000, math.MaxInt} {
		if got := huge.Window(n); got != MaxDelay {
			t.Errorf("Multiplier 1e300 Window(%d) = %v, want MaxDelay", n, got)
		}
	}
	for _, n := range []int{64, 65, math.MaxInt} {
		if got := (Exponential{Base: 1}).Window(n); got != MaxDelay {
			t.Errorf("Window(%d) = %v, want MaxDelay", n, got)
		}
	}
}

func TestDecorrelated(t *testing.T) {
	d := Decorrelated{Base: 10 * ms, Cap: time.Second}
	src := rand.NewPCG(5, 6)
	prev := time.Duration(0)
	hitCap := false
	for n := 1; n <= 200; n++ {
		got := d.Delay(n, prev, src)
		hi := min(time.Second, max(prev, 10*ms)*3)
		if got < 10*ms || got > hi {
			t.Fatalf("Delay(%d, prev %v) = %v outside [10ms, %v]", n, prev, got, hi)
		}
		hitCap = hitCap || got == time.Second
		prev = got
	}
	if !hitCap {
		t.Error("200 decorrelated waits from 10ms under a 1s cap never equalled the cap")
	}
	// The state is the caller's: the same prev gives the same range.
	for range 100 {
		if got := d.Delay(1, 0, src); got < 10*ms || got > 30*ms {
			t.Fatalf("first decorrelated delay %v outside [10ms, 30ms]", got)
		}
	}
}

// TestDecorrelatedNearCap checks the distribution once prev has reached the
// cap: sleep = min(cap, uniform(base, 3·prev)) for base 5 ms, cap 2 s draws
// from [5 ms, 6 s], so a wait equals the cap with probability
// (6 s − 2 s)/(6 s − 5 ms) ≈ 0.667 and the mean is
// 0.333·(5 ms + 2 s)/2 + 0.667·2 s ≈ 1.668 s. The old draw,
// uniform(base, min(cap, 3·prev)), had a mean near 1.0 s and never equalled
// the cap.
func TestDecorrelatedNearCap(t *testing.T) {
	d := Decorrelated{Base: 5 * ms, Cap: 2 * time.Second}
	src := rand.NewPCG(11, 12)
	const n = 200000
	var sum float64
	atCap := 0
	for range n {
		got := d.Delay(5, 2*time.Second, src)
		if got < 5*ms || got > 2*time.Second {
			t.Fatalf("Delay(prev 2s) = %v outside [5ms, 2s]", got)
		}
		if got == 2*time.Second {
			atCap++
		}
		sum += got.Seconds()
	}
	mean := sum / n
	pCap := float64(atCap) / n
	wantP := (6.0 - 2.0) / (6.0 - 0.005)
	wantMean := (1-wantP)*(0.005+2)/2 + wantP*2
	if math.Abs(mean-wantMean) > 0.01 {
		t.Errorf("mean wait at the cap = %.4fs, want %.4fs ± 0.01", mean, wantMean)
	}
	if math.Abs(pCap-wantP) > 0.01 {
		t.Errorf("P(wait == cap) = %.4f, want %.4f ± 0.01", pCap, wantP)
	}
	// A caller's chain from prev = 0 reaches the cap too.
	atCap = 0
	for range 2000 {
		prev := time.Duration(0)
		for k := 1; k <= 50; k++ {
			prev = d.Delay(k, prev, src)
		}
		if prev == 2*time.Second {
			atCap++
		}
	}
	if atCap == 0 {
		t.Error("no 50th wait of 2000 chains equalled the cap")
	}
}

func TestSequenceCappedJittered(t *testing.T) {
	s := Sequence{0, 20 * ms, 50 * ms}
	for n, w := range map[int]time.Duration{1: 0, 2: 20 * ms, 3: 50 * ms, 4: 50 * ms, 100: 50 * ms} {
		if got := s.Delay(n, 0, nil); got != w {
			t.Errorf("Sequence.Delay(%d) = %v, want %v", n, got, w)
		}
	}
	c := Capped{Schedule: Exponential{Base: 100 * ms}, Max: 300 * ms}
	if got := c.Delay(3, 0, nil); got != 300*ms {
		t.Errorf("Capped = %v", got)
	}
	j := Jittered{Schedule: Constant(100 * ms), Jitter: Full, Unit: ms}
	src := rand.NewPCG(7, 8)
	distinct := map[time.Duration]bool{}
	for range 1000 {
		d := j.Delay(1, 0, src)
		if d < 0 || d > 100*ms {
			t.Fatalf("Jittered %v", d)
		}
		distinct[d] = true
	}
	if len(distinct) < 50 {
		t.Errorf("Jittered produced only %d distinct waits", len(distinct))
	}
}

func TestDeterministicWithSeed(t *testing.T) {
	s := Exponential{Base: 60 * ms, Jitter: Full, Unit: ms}
	a, b := rand.NewPCG(42, 42), rand.NewPCG(42, 42)
	for n := 1; n < 50; n++ {
		if x, y := s.Delay(n, 0, a), s.Delay(n, 0, b); x != y {
			t.Fatalf("same seed, different delays at %d: %v vs %v", n, x, y)
		}
	}
}

func TestUniformIsUniform(t *testing.T) {
	// A source whose outputs sit right at Lemire's rejection boundary must
	// not bias: with n = 3 every residue appears once per 3 draws on average.
	src := rand.NewPCG(9, 10)
	var counts [3]int
	for range 30000 {
		counts[uniformBelow(src, 3)]++
	}
	for i, c := range counts {
		if c < 9500 || c > 10500 {
			t.Errorf("value %d drawn %d times of 30000", i, c)
		}
	}
	// uniformUpTo covers both ends with a scripted source.
	if got := uniformUpTo(&seq{v: []uint64{1}}, 10); got != 0 {
		t.Errorf("low end: %d", got)
	}
	if got := uniformUpTo(&seq{v: []uint64{math.MaxUint64}}, 10); got != 10 {
		t.Errorf("high end: %d", got)
	}
}

func TestValidate(t *testing.T) {
	bad := []struct {
		s     Schedule
		field string
	}{
		{Constant(-1), "Constant"},
		{Exponential{}, "Base"},
		{Exponential{Base: ms, Multiplier: 0.5}, "Multiplier"},
		{Exponential{Base: ms, Multiplier: math.NaN()}, "Multiplier"},
		{Exponential{Base: ms, Multiplier: math.Inf(1)}, "Multiplier"},
		{Exponential{Base: ms, Cap: -1}, "Cap"},
		{Exponential{Base: 2 * ms, Cap: ms}, "Cap"},
		{Exponential{Base: ms, Jitter: 9}, "Jitter"},
		{Exponential{Base: ms, Unit: -1}, "Unit"},
		{Decorrelated{}, "Base"},
		{Decorrelated{Base: 2 * ms, Cap: ms}, "Cap"},
		{Sequence{ms, -ms}, "Sequence[1]"},
		{Capped{Schedule: Constant(1), Max: -1}, "Max"},
		{Capped{}, "Schedule"},
		{Jittered{Schedule: Constant(1), Jitter: 7}, "Jitter"},
		{Ratio{Base: ms}, "Cap"},
		{Ratio{}, "Base"},
		{nil, "nil"},
	}
	for _, c := range bad {
		err := Validate(c.s)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Validate(%#v) = %v; want ErrInvalid naming %q", c.s, err, c.field)
		}
	}
	for _, s := range []Schedule{Constant(0), Exponential{Base: ms}, Decorrelated{Base: ms}, Sequence{}, Ratio{Base: ms, Cap: ms}, Func(func(int, time.Duration, rand.Source) time.Duration { return 0 })} {
		if err := Validate(s); err != nil {
			t.Errorf("Validate(%#v) = %v", s, err)
		}
	}
}

func TestRatioSchedule(t *testing.T) {
	r := Ratio{Base: 100 * ms, Cap: 250 * ms}
	src := rand.NewPCG(11, 12)
	for n := 1; n <= 70; n++ {
		w := min(250*ms, 100*ms<<min(n-1, 10))
		for range 100 {
			d := r.Delay(n, 0, src)
			if d < 0 || d > w || d%ms != 0 {
				t.Fatalf("Ratio.Delay(%d) = %v outside whole ms in [0, %v]", n, d, w)
			}
		}
	}
	if d := (Ratio{}).Delay(1, 0, nil); d != 0 {
		t.Errorf("invalid Ratio gives %v, want 0", d)
	}
}

func TestFuncClampsNegative(t *testing.T) {
	f := Func(func(int, time.Duration, rand.Source) time.Duration { return -5 })
	if d := f.Delay(1, 0, nil); d != 0 {
		t.Errorf("Func negative: %v", d)
	}
	if d := Constant(-5).Delay(1, 0, nil); d != 0 {
		t.Errorf("Constant negative: %v", d)
	}
}

// TestDecorrelatedExtremes: a Base or Unit near MaxDelay does not overflow
// the rounding of Base up to a whole unit: every wait stays in
// [Base, limit] and is never negative.
func TestDecorrelatedExtremes(t *testing.T) {
	src := rand.NewPCG(1, 2)
	for _, d := range []Decorrelated{
		{Base: MaxDelay, Unit: ms},
		{Base: MaxDelay - 5, Unit: time.Hour},
		{Base: time.Hour, Unit: MaxDelay},
		{Base: time.Hour, Cap: MaxDelay, Unit: MaxDelay},
		{Base: MaxDelay / 2, Cap: MaxDelay - 1, Unit: MaxDelay / 3},
	} {
		if err := d.Validate(); err != nil {
			t.Fatalf("%+v: %v", d, err)
		}
		limit := d.Cap
		if limit == 0 {
			limit = MaxDelay
		}
		prev := time.Duration(0)
		for n := 1; n <= 5; n++ {
			for _, p := range []time.Duration{prev, MaxDelay / 2, MaxDelay} {
				got := d.Delay(n, p, src)
				if got < d.Base || got > limit {
					t.Errorf("%+v: Delay(%d, prev %v) = %v, want in [%v, %v]", d, n, p, got, d.Base, limit)
				}
			}
			prev = d.Delay(n, prev, src)
		}
	}
}
