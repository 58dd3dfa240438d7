package budget_test

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/staggerhq/stagger/budget"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestLevelTokenBucket(t *testing.T) {
	now := time.Unix(0, 0)
	b := &budget.TokenBucket{}
	if l := b.Level(now); l != 1 {
		t.Fatalf("full bucket level %v, want 1", l)
	}
	for b.Retry(now) {
	}
	if l := b.Level(now); !near(l, 0) {
		t.Fatalf("drained level %v (credits %d), want 0", l, b.Credits())
	}
	for range 50 {
		b.Request(now)
	}
	if l := b.Level(now); !near(l, 0.25) {
		t.Fatalf("level %v after 50 earned of 200, want 0.25", l)
	}
}

func TestLevelGRPC(t *testing.T) {
	g, _ := budget.NewGRPC(10, 0.1)
	now := time.Unix(0, 0)
	if l := g.Level(now); l != 1 {
		t.Fatalf("level %v, want 1", l)
	}
	for range 5 {
		g.Result(now, false)
	}
	if l := g.Level(now); !near(l, 0.5) || g.Retry(now) {
		t.Fatalf("level %v retry %v; want 0.5 and refused (A6: tokens must exceed half)", l, g.Retry(now))
	}
	g.Result(now, true)
	if l := g.Level(now); !near(l, 0.51) || !g.Retry(now) {
		t.Fatalf("level %v, want 0.51 and allowed", l)
	}
}

func TestLevelRatio(t *testing.T) {
	r, _ := budget.NewRatio(0.1, time.Minute)
	now := time.Unix(0, 0)
	if l := r.Level(now); l != 0 {
		t.Fatalf("level with no originals %v, want 0 (no retry allowed)", l)
	}
	for range 40 {
		r.Request(now)
	}
	if l := r.Level(now); l != 1 {
		t.Fatalf("level %v, want 1", l)
	}
	r.Retry(now)
	if l := r.Level(now); !near(l, 0.75) {
		t.Fatalf("level %v after 1 of 4 retries, want 0.75", l)
	}
	for r.Retry(now) {
	}
	if l := r.Level(now); l != 0 {
		t.Fatalf("level %v when refusing, want 0", l)
	}
	if l := r.Level(now.Add(2 * time.Minute)); l != 0 {
		t.Fatalf("level %v after the window, want 0", l)
	}
}

func TestLevelAdaptive(t *testing.T) {
	a, _ := budget.NewAdaptive(2, time.Minute, nil)
	now := time.Unix(0, 0)
	if l := a.Level(now); l != 1 {
		t.Fatalf("level %v, want 1", l)
	}
	for range 99 {
		a.Request(now)
	}
	// 99 requests, 0 accepts: reject probability 99/100.
	if l := a.Level(now); !near(l, 1-a.RejectProbability(now)) || !near(l, 0.01) {
		t.Fatalf("level %v, want 0.01", l)
	}
}

// The retry breaker reports its state as a Circuit: open after a refused
// retry, closed again once a retry is allowed.
func TestBreakerState(t *testing.T) {
	b, _ := budget.NewBreaker(0.5, 2, time.Second)
	now := time.Unix(0, 0)
	if b.State() != budget.CircuitClosed {
		t.Fatal("new breaker not closed")
	}
	b.Result(now, false)
	b.Result(now, false)
	if b.Retry(now) || b.State() != budget.CircuitOpen {
		t.Fatalf("retry allowed or state %v after 2 of 2 failed", b.State())
	}
	later := now.Add(2 * time.Second)
	if !b.Retry(later) || b.State() != budget.CircuitClosed {
		t.Fatalf("retry refused or state %v after the window", b.State())
	}
}

// Levels are read while other goroutines spend and earn (run with -race),
// and always stay within [0, 1].
func TestLevelConcurrent(t *testing.T) {
	now := time.Unix(0, 0)
	g, _ := budget.NewGRPC(10, 0.5)
	r, _ := budget.NewRatio(0.5, time.Minute)
	a, _ := budget.NewAdaptive(2, time.Minute, nil)
	bs := []interface {
		budget.Budget
		budget.Leveler
	}{&budget.TokenBucket{Empty: true}, g, r, a}
	var wg sync.WaitGroup
	for _, b := range bs {
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 2000 {
					b.Request(now)
					b.Retry(now)
					b.Result(now, (i+w)%3 == 0)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				if l := b.Level(now); l < 0 || l > 1 || math.IsNaN(l) {
					t.Errorf("%T level %v out of [0, 1]", b, l)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestLevelAllocs(t *testing.T) {
	now := time.Unix(0, 0)
	g, _ := budget.NewGRPC(10, 0.5)
	r, _ := budget.NewRatio(0.5, time.Minute)
	a, _ := budget.NewAdaptive(2, time.Minute, nil)
	br, _ := budget.NewBreaker(0.5, 2, time.Second)
	cb, _ := budget.NewCircuitBreaker(budget.CircuitConfig{})
	tb := &budget.TokenBucket{}
	var sink float64
	if n := testing.AllocsPerRun(100, func() {
		sink += tb.Level(now) + g.Level(now) + r.Level(now) + a.Level(now) + float64(br.State()+cb.State())
	}); n != 0 {
		t.Fatalf("%v allocations per read of every gauge, want 0", n)
	}
	_ = sink
}

// A gauge reads a budget's level without changing it: 1 is full, 0 is
// empty.
func ExampleLeveler() {
	b := &budget.TokenBucket{} // starts full: 200 credits
	now := time.Now()
	b.Retry(now) // spends 10
	var l budget.Leveler = b
	fmt.Printf("%.2f\n", l.Level(now))
	// Output: 0.95
}
