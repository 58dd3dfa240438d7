package budget

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var _ = []Budget{&TokenBucket{}, &Ratio{}, &Adaptive{}, &GRPC{}, &Breaker{}}

func TestTokenBucketEarnAndSpend(t *testing.T) {
	b := &TokenBucket{Empty: true}
	if b.Retry(t0) {
		t.Fatal("an empty bucket allowed a retry")
	}
	for i := 1; i <= 9; i++ {
		b.Request(t0)
	}
	if b.Retry(t0) {
		t.Fatal("9 originals allowed a retry")
	}
	b.Request(t0)
	if !b.Retry(t0) {
		t.Fatal("10 originals did not earn a retry")
	}
	if b.Retry(t0) || b.Credits() != 0 {
		t.Fatalf("second retry allowed or credits %d", b.Credits())
	}
	// Cap 200: 1,000 originals earn 20 retries, not 100.
	for range 1000 {
		b.Request(t0)
	}
	if b.Credits() != 200 {
		t.Fatalf("credits %d, want the cap 200", b.Credits())
	}
	n := 0
	for b.Retry(t0) {
		n++
	}
	if n != 20 {
		t.Fatalf("a full reserve allowed %d retries, want 20", n)
	}
}

func TestTokenBucketFractionalVariant(t *testing.T) {
	// "+0.1 per call, cap 5, a retry needs > 1 then spends 1", in tenths.
	b := &TokenBucket{Max: 50, PerRequest: 1, PerRetry: 10, MinToRetry: 11, Empty: true}
	for range 10 {
		b.Request(t0)
	}
	if b.Retry(t0) {
		t.Fatal("exactly 1.0 token must not allow a retry (needs > 1)")
	}
	b.Request(t0)
	if !b.Retry(t0) || b.Credits() != 1 {
		t.Fatalf("1.1 tokens: retry refused or credits %d", b.Credits())
	}
	for range 100 {
		b.Request(t0)
	}
	if b.Credits() != 50 {
		t.Fatalf("cap 5.0: credits %d", b.Credits())
	}
}

func TestTokenBucketInitialAndValidate(t *testing.T) {
	b := &TokenBucket{Initial: 30}
	if b.Credits() != 30 || !b.Retry(t0) || b.Credits() != 20 {
		t.Fatalf("Initial 30: credits %d", b.Credits())
	}
	nb, err := NewTokenBucket(20, 1, 10)
	if err != nil || nb.Credits() != 20 {
		t.Fatal("NewTokenBucket must start full", err)
	}
	// The zero value starts full: the first failures of a healthy
	// dependency may be retried.
	z := &TokenBucket{}
	if z.Credits() != DefaultMax || !z.Retry(t0) || z.Credits() != DefaultMax-DefaultPerRetry {
		t.Fatalf("zero value: credits %d", z.Credits())
	}
	for _, c := range []struct {
		b     *TokenBucket
		field string
	}{
		{&TokenBucket{Max: -1}, "Max"},
		{&TokenBucket{PerRequest: -1}, "PerRequest"},
		{&TokenBucket{PerRetry: -1}, "PerRetry"},
		{&TokenBucket{MinToRetry: -1}, "MinToRetry"},
		{&TokenBucket{MinToRetry: 5}, "MinToRetry"},
		{&TokenBucket{Initial: 201}, "Initial"},
		{&TokenBucket{Initial: 5, Empty: true}, "Initial"},
		{&TokenBucket{Max: 5}, "PerRetry"},
	} {
		if err := c.b.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: %v, want ErrInvalid naming %s", c.b, err, c.field)
		}
	}
	if _, err := NewTokenBucket(0, 1, 10); err == nil {
		t.Error("NewTokenBucket(0, …) accepted")
	}
}

func TestTokenBucketConservedUnderRace(t *testing.T) {
	b := &TokenBucket{Max: 1 << 40, Empty: true}
	var earned, spent atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				if (g+i)%4 == 0 {
					if b.Retry(t0) {
						spent.Add(1)
					}
				} else {
					b.Request(t0)
					earned.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got, want := b.Credits(), earned.Load()-10*spent.Load(); got != want || got < 0 {
		t.Fatalf("credits %d, want earned %d − 10×spent %d = %d", got, earned.Load(), spent.Load(), want)
	}
	if spent.Load() == 0 {
		t.Fatal("no retries: the test proves nothing")
	}
	// With the cap in play credits never leave [0, Max].
	c := &TokenBucket{Empty: true}
	var neg atomic.Bool
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10000 {
				if i%5 == 0 {
					c.Retry(t0)
				} else {
					c.Request(t0)
				}
				if v := c.Credits(); v < 0 || v > 200 {
					neg.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	if neg.Load() {
		t.Fatal("credits left [0, 200]")
	}
}

func TestWindowSlides(t *testing.T) {
	w := newWindow(10*time.Second, 10)
	w.add(t0, 5)
	w.add(t0.Add(3*time.Second), 2)
	if s := w.sum(t0.Add(5 * time.Second)); s != 7 {
		t.Fatalf("sum %d", s)
	}
	if s := w.sum(t0.Add(10*time.Second + 500*time.Millisecond)); s != 2 {
		t.Fatalf("after 10.5s the first slot left: sum %d, want 2", s)
	}
	if s := w.sum(t0.Add(time.Hour)); s != 0 {
		t.Fatalf("an hour later: sum %d", s)
	}
	// A slot is reused after a full turn.
	w.add(t0.Add(time.Hour), 4)
	if s := w.sum(t0.Add(time.Hour)); s != 4 {
		t.Fatalf("reused slot: %d", s)
	}
	// Times before the origin count in the first slot.
	w2 := newWindow(time.Second, 4)
	w2.add(t0, 1)
	w2.add(t0.Add(-time.Hour), 1)
	if s := w2.sum(t0); s != 2 {
		t.Fatalf("before origin: %d", s)
	}
}

func TestRatio(t *testing.T) {
	r, err := NewRatio(0.1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		r.Request(t0)
	}
	n := 0
	for r.Retry(t0) {
		n++
	}
	if n != 10 {
		t.Fatalf("100 originals allowed %d retries, want 10", n)
	}
	// A minute later the window is empty again.
	later := t0.Add(2 * time.Minute)
	if r.Retry(later) {
		t.Fatal("retry allowed with no originals in the window")
	}
	for range 20 {
		r.Request(later)
	}
	allowed := 0
	for range 5 {
		if r.Retry(later) {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("20 originals allowed %d retries, want 2", allowed)
	}
	for _, bad := range []float64{0, -0.1, 1.1, math.NaN(), math.Inf(1)} {
		if _, err := NewRatio(bad, time.Minute); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "ratio") {
			t.Errorf("NewRatio(%v): %v", bad, err)
		}
	}
	if _, err := NewRatio(0.1, 0); err == nil || !strings.Contains(err.Error(), "span") {
		t.Errorf("NewRatio span 0: %v", err)
	}
}

func TestAdaptive(t *testing.T) {
	a, err := NewAdaptive(2, 2*time.Minute, rand.NewPCG(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	// Healthy: every request accepted → never throttled.
	for range 1000 {
		if !a.Request(t0) {
			t.Fatal("a healthy client was throttled")
		}
		a.Result(t0, true)
	}
	// The dependency stops accepting: the rejection probability rises to
	// (requests − 2·accepts)/(requests+1).
	b, _ := NewAdaptive(2, 2*time.Minute, rand.NewPCG(3, 4))
	for range 100 {
		b.Request(t0)
		b.Result(t0, true)
	}
	sent := 0
	for range 10000 {
		if b.Request(t0) {
			sent++
		}
	}
	req, acc := float64(10100), float64(100)
	if p := b.RejectProbability(t0); math.Abs(p-(req-2*acc)/(req+1)) > 1e-12 {
		t.Fatalf("probability %v", p)
	}
	// With nothing accepted most attempts are rejected locally.
	if sent > 2500 || sent < 50 {
		t.Fatalf("sent %d of 10000 to a dependency that accepts nothing", sent)
	}
	if !b.Request(t0.Add(time.Hour)) {
		t.Fatal("after the window passed the client must send again")
	}
	for _, bad := range []float64{0.5, math.NaN(), math.Inf(1)} {
		if _, err := NewAdaptive(bad, time.Minute, nil); err == nil || !strings.Contains(err.Error(), "k") {
			t.Errorf("NewAdaptive(%v): %v", bad, err)
		}
	}
}

func TestGRPC(t *testing.T) {
	g, err := NewGRPC(10, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	if g.Tokens() != 10 || !g.Retry(t0) {
		t.Fatal("starts full and allows retries")
	}
	for range 5 {
		g.Result(t0, false)
	}
	if g.Tokens() != 5 || g.Retry(t0) {
		t.Fatalf("at exactly max/2 (%v) retries must stop", g.Tokens())
	}
	g.Result(t0, true)
	if g.Tokens() != 5.1 || !g.Retry(t0) {
		t.Fatalf("tokens %v", g.Tokens())
	}
	for range 100 {
		g.Result(t0, false)
	}
	if g.Tokens() != 0 {
		t.Fatalf("floor 0: %v", g.Tokens())
	}
	for range 1000 {
		g.Result(t0, true)
	}
	if g.Tokens() != 10 {
		t.Fatalf("cap: %v", g.Tokens())
	}
	for _, c := range [][2]float64{{0, 0.1}, {1001, 0.1}, {math.NaN(), 1}, {10, 0}, {10, math.Inf(1)}} {
		if _, err := NewGRPC(c[0], c[1]); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewGRPC(%v, %v): %v", c[0], c[1], err)
		}
	}
}

func TestBreaker(t *testing.T) {
	b, err := NewBreaker(0.5, 10, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for range 9 {
		b.Result(t0, false)
	}
	if !b.Retry(t0) {
		t.Fatal("below minCalls the breaker stays closed")
	}
	b.Result(t0, false)
	if b.Retry(t0) || !b.Request(t0) {
		t.Fatal("all failing: retries refused, originals allowed")
	}
	for range 11 {
		b.Result(t0, true)
	}
	if !b.Retry(t0) {
		t.Fatal("failure rate 10/21 < 0.5: closed")
	}
	if !b.Retry(t0.Add(time.Minute)) {
		t.Fatal("empty window: closed")
	}
	if _, err := NewBreaker(0.5, 0, time.Second); err == nil {
		t.Error("minCalls 0 accepted")
	}
}

func BenchmarkTokenBucket(b *testing.B) {
	b.Run("original/parallel", func(b *testing.B) {
		tb := &TokenBucket{}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tb.Request(t0)
			}
		})
	})
	b.Run("mixed-10pct-retries/parallel", func(b *testing.B) {
		tb := &TokenBucket{}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				if i%10 == 0 {
					tb.Retry(t0)
				} else {
					tb.Request(t0)
				}
			}
		})
	})
}

func BenchmarkRatio(b *testing.B) {
	r, _ := NewRatio(0.1, time.Minute)
	now := t0
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Request(now)
		}
	})
}

func BenchmarkGRPC(b *testing.B) {
	g, _ := NewGRPC(100, 0.1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g.Request(t0)
			g.Result(t0, true)
		}
	})
}
