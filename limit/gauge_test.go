package limit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/staggerhq/stagger/limit"
)

// Each limiter refuses exactly when its gauge says InFlight >= Limit.
func TestGaugeMatchesRefusal(t *testing.T) {
	bh, _ := limit.NewBulkhead(3)
	ai, _ := limit.NewAIMD(2, 1, 10, 0.5)
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	rt, _ := limit.NewRate(10, 4, clock) // 100ms between starts, bursts of 4
	for _, l := range []interface {
		limit.Limiter
		limit.Gauge
	}{bh, ai, rt} {
		if l.InFlight() != 0 {
			t.Fatalf("%T: in flight %d before any start", l, l.InFlight())
		}
		n := 0
		for l.TryAcquire() {
			n++
			if l.InFlight() != n {
				t.Fatalf("%T: in flight %d after %d starts", l, l.InFlight(), n)
			}
		}
		if n != l.Limit() || l.InFlight() != l.Limit() {
			t.Fatalf("%T: refused after %d starts with in flight %d, limit %d", l, n, l.InFlight(), l.Limit())
		}
	}
	now = now.Add(150 * time.Millisecond) // one start and a half earned back
	if got := rt.InFlight(); got != 3 || !rt.TryAcquire() || rt.TryAcquire() {
		t.Fatalf("rate in flight %d after 150ms, want 3 (a partly earned start still counts) and one more start", got)
	}
	now = now.Add(time.Hour)
	if got := rt.InFlight(); got != 0 {
		t.Fatalf("rate in flight %d after a quiet hour, want 0", got)
	}
	bh.Release(true)
	if bh.InFlight() != 2 || bh.Limit() != bh.Size() {
		t.Fatalf("bulkhead in flight %d limit %d size %d", bh.InFlight(), bh.Limit(), bh.Size())
	}
}

func TestGaugeAllocs(t *testing.T) {
	bh, _ := limit.NewBulkhead(3)
	ai, _ := limit.NewAIMD(2, 1, 10, 0.5)
	rt, _ := limit.NewRate(10, 4, nil)
	n := 0
	if a := testing.AllocsPerRun(100, func() {
		n += bh.InFlight() + bh.Limit() + ai.InFlight() + ai.Limit() + rt.InFlight() + rt.Limit()
	}); a != 0 {
		t.Fatalf("%v allocations per read, want 0", a)
	}
}

// A gauge reads what a limiter holds: here 2 of a bulkhead's 3 slots.
func ExampleGauge() {
	b, _ := limit.NewBulkhead(3)
	b.TryAcquire()
	b.TryAcquire()
	var g limit.Gauge = b
	fmt.Println(g.InFlight(), "of", g.Limit())
	// Output: 2 of 3
}
