package limit

import (
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var _ Limiter = &Rate{}

// fakeClock is an injected clock the test moves by hand.
type fakeClock struct{ ns atomic.Int64 }

var t0 = time.Unix(1_700_000_000, 0)

func (c *fakeClock) now() time.Time          { return t0.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func mustRate(t testing.TB, perSecond float64, burst int, clock func() time.Time) *Rate {
	t.Helper()
	r, err := NewRate(perSecond, burst, clock)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// take counts the starts TryAcquire admits in a row.
func take(r *Rate) int {
	n := 0
	for r.TryAcquire() {
		n++
		if n > 1e6 {
			panic("no limit")
		}
	}
	return n
}

func TestRateBurstThenRate(t *testing.T) {
	var c fakeClock
	r := mustRate(t, 10, 5, c.now) // one start per 100 ms, bursts of 5
	if r.Interval() != 100*time.Millisecond || r.Burst() != 5 {
		t.Fatalf("interval %v burst %d", r.Interval(), r.Burst())
	}
	if n := take(r); n != 5 {
		t.Fatalf("a fresh limit admitted %d at once, want the burst of 5", n)
	}
	if w := r.Wait(); w != 100*time.Millisecond {
		t.Fatalf("Wait after the burst: %v, want 100ms", w)
	}
	c.advance(99 * time.Millisecond)
	if r.TryAcquire() {
		t.Fatal("a start was admitted 1 ms early")
	}
	if w := r.Wait(); w != time.Millisecond {
		t.Fatalf("Wait 1 ms before the next start: %v", w)
	}
	c.advance(time.Millisecond)
	if !r.TryAcquire() || r.TryAcquire() {
		t.Fatal("want exactly one start after one interval")
	}
	// Sustained: over 10 s at one try per ms, 10/s is 100 starts.
	admitted := 0
	for range 10_000 {
		c.advance(time.Millisecond)
		if r.TryAcquire() {
			admitted++
		}
	}
	if admitted != 100 {
		t.Fatalf("sustained: %d starts in 10 s, want 100", admitted)
	}
	// A quiet spell refills the burst and no more.
	c.advance(time.Hour)
	if w := r.Wait(); w != 0 {
		t.Fatalf("Wait after a quiet hour: %v", w)
	}
	if n := take(r); n != 5 {
		t.Fatalf("after an hour %d at once, want 5", n)
	}
	r.Release(true) // a no-op: the start stays spent
	r.Release(false)
	if r.TryAcquire() {
		t.Fatal("Release gave a start back")
	}
}

func TestRateAt(t *testing.T) {
	r := mustRate(t, 1, 1, func() time.Time { t.Fatal("the clock was read"); return time.Time{} })
	if !r.TryAcquireAt(t0) || r.TryAcquireAt(t0.Add(999*time.Millisecond)) || !r.TryAcquireAt(t0.Add(time.Second)) {
		t.Fatal("1/s with a burst of 1: want starts at 0 and 1 s only")
	}
	if w := r.WaitAt(t0.Add(1500 * time.Millisecond)); w != 500*time.Millisecond {
		t.Fatalf("WaitAt: %v", w)
	}
	// A time before the first one seen (a caller that read its clock just
	// before another) is not a start taken from the future.
	if r.TryAcquireAt(t0.Add(-time.Hour)) {
		t.Fatal("an earlier time was admitted")
	}
}

func TestRateDefaultClock(t *testing.T) {
	r := mustRate(t, 1e-3, 3, nil) // one start per 1000 s after the burst
	if n := take(r); n != 3 {
		t.Fatalf("real clock: %d at once, want 3", n)
	}
}

// TestRateRace: at each tick of the clock, goroutines race on one limit
// with more tries than there are starts due; the total admitted is exactly
// what the algorithm allows for the time that passed, burst +
// elapsed/interval: never more, and no due start left untaken.
func TestRateRace(t *testing.T) {
	var c fakeClock
	r := mustRate(t, 1000, 50, c.now) // one start per ms
	var admitted atomic.Int64
	for k := 1; k <= 2000; k++ {
		c.advance(100 * time.Microsecond)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 8 {
					if r.TryAcquire() {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		// Time counts from the first call, at tick 1.
		if got, want := admitted.Load(), int64(50+(k-1)/10); got != want {
			t.Fatalf("at %v: admitted %d, want %d", time.Duration(c.ns.Load()), got, want)
		}
	}
}

func TestRateInvalid(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		burst int
		want  string
	}{
		{math.NaN(), 1, "perSecond must be a finite number, got NaN"},
		{math.Inf(1), 1, "perSecond must be a finite number, got +Inf"},
		{math.Inf(-1), 1, "perSecond must be a finite number, got -Inf"},
		{0, 1, "perSecond must be in (0, 1e+09], got 0"},
		{-3, 1, "perSecond must be in (0, 1e+09], got -3"},
		{2e9, 1, "perSecond must be in (0, 1e+09], got 2e+09"},
		{10, 0, "burst must be >= 1, got 0"},
		{10, -1, "burst must be >= 1, got -1"},
		{1e-300, 1, "burst / perSecond must be at most"},
	} {
		_, err := NewRate(c.rate, c.burst, nil)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Rate "+c.want) && !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewRate(%v, %d) = %v, want %q", c.rate, c.burst, err, c.want)
		}
	}
}

func BenchmarkRate(b *testing.B) {
	b.Run("admit", func(b *testing.B) {
		// A rate no benchmark reaches: every call admits.
		r := mustRate(b, MaxRate, 1<<20, nil)
		b.ReportAllocs()
		for b.Loop() {
			if !r.TryAcquire() {
				b.Fatal("refused")
			}
		}
	})
	b.Run("refuse", func(b *testing.B) {
		r := mustRate(b, 1e-3, 1, nil)
		r.TryAcquire()
		b.ReportAllocs()
		for b.Loop() {
			if r.TryAcquire() {
				b.Fatal("admitted")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		r := mustRate(b, MaxRate, 1<<20, nil)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.TryAcquire()
			}
		})
	})
}
