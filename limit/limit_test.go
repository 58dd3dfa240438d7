package limit

import (
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

var _ = []Limiter{&Bulkhead{}, &AIMD{}}

func TestBulkheadExact(t *testing.T) {
	b, err := NewBulkhead(3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if !b.TryAcquire() {
			t.Fatalf("slot %d refused while free", i)
		}
	}
	if b.TryAcquire() {
		t.Fatal("a 4th slot was granted")
	}
	if err := Do(b, func() error { t.Fatal("ran without a slot"); return nil }); !errors.Is(err, ErrLimited) {
		t.Fatalf("Do on a full bulkhead: %v", err)
	}
	b.Release(true)
	if b.InFlight() != 2 || !b.TryAcquire() {
		t.Fatal("a released slot is free again")
	}
}

func TestBulkheadRace(t *testing.T) {
	b, _ := NewBulkhead(5)
	var cur, peak, admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				err := Do(b, func() error {
					n := cur.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					cur.Add(-1)
					admitted.Add(1)
					return nil
				})
				if err != nil {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if peak.Load() > 5 || b.InFlight() != 0 {
		t.Fatalf("peak %d (size 5), in flight after %d", peak.Load(), b.InFlight())
	}
	if admitted.Load()+refused.Load() != 32*2000 || admitted.Load() == 0 {
		t.Fatalf("admitted %d refused %d", admitted.Load(), refused.Load())
	}
}

func TestBulkheadReleaseWithoutAcquirePanics(t *testing.T) {
	b, _ := NewBulkhead(1)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	b.Release(true)
}

func TestAIMD(t *testing.T) {
	a, err := NewAIMD(4, 2, 8, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if !a.TryAcquire() {
			t.Fatal("refused below the limit")
		}
	}
	if a.TryAcquire() {
		t.Fatal("admitted above the limit")
	}
	// Four successes at limit 4 add one slot (additive increase).
	for range 4 {
		a.Release(true)
	}
	if a.Limit() != 4 && a.Limit() != 5 {
		t.Fatalf("limit %d after one limit's worth of successes", a.Limit())
	}
	for range 100 {
		if a.TryAcquire() {
			a.Release(true)
		}
	}
	if a.Limit() != 8 {
		t.Fatalf("limit %d, want the max 8", a.Limit())
	}
	// Overload halves it, never below min.
	a.TryAcquire()
	a.Release(false)
	if a.Limit() != 4 {
		t.Fatalf("limit %d after one overload, want 4", a.Limit())
	}
	for range 10 {
		a.TryAcquire()
		a.Release(false)
	}
	if a.Limit() != 2 || a.InFlight() != 0 {
		t.Fatalf("limit %d (min 2), in flight %d", a.Limit(), a.InFlight())
	}
}

func TestValidation(t *testing.T) {
	if _, err := NewBulkhead(0); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "size") {
		t.Errorf("NewBulkhead(0): %v", err)
	}
	for _, c := range []struct {
		init, min, max int
		backoff        float64
		field          string
	}{
		{1, 0, 5, 0.5, "min"},
		{1, 3, 2, 0.5, "max"},
		{1, 2, 5, 0.5, "initial"},
		{6, 2, 5, 0.5, "initial"},
		{3, 2, 5, 1, "backoff"},
		{3, 2, 5, 0, "backoff"},
		{3, 2, 5, math.NaN(), "backoff"},
		{3, 2, math.MaxInt, 0.5, "max"},
	} {
		if _, err := NewAIMD(c.init, c.min, c.max, c.backoff); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("NewAIMD(%d, %d, %d, %v): %v, want an error naming %s", c.init, c.min, c.max, c.backoff, err, c.field)
		}
	}
}

func BenchmarkBulkhead(b *testing.B) {
	bh, _ := NewBulkhead(1 << 20)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if bh.TryAcquire() {
				bh.Release(true)
			}
		}
	})
}

// TestDoReleasesOnPanic: a panicking fn gives its slot back (as overload),
// so a recovered panic does not shrink a bulkhead for good.
func TestDoReleasesOnPanic(t *testing.T) {
	b, _ := NewBulkhead(1)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic must go on")
			}
		}()
		_ = Do(b, func() error { panic("handler bug") })
	}()
	if b.InFlight() != 0 {
		t.Fatalf("in flight after a panic: %d", b.InFlight())
	}
	if err := Do(b, func() error { return nil }); err != nil {
		t.Errorf("Do after a panic: %v", err)
	}
	a, _ := NewAIMD(4, 1, 8, 0.5)
	func() {
		defer func() { _ = recover() }()
		_ = Do(a, func() error { panic("handler bug") })
	}()
	if a.InFlight() != 0 || a.Limit() != 2 {
		t.Errorf("AIMD after a panic: in flight %d, limit %d; want 0, 2 (released as overload)", a.InFlight(), a.Limit())
	}
}

// TestJoin: a joined limiter needs a slot of each; a refusal by a later
// one gives back the earlier slots; nil entries are skipped.
func TestJoin(t *testing.T) {
	if Join() != nil || Join(nil, nil) != nil {
		t.Fatal("Join of nothing must be nil")
	}
	b, _ := NewBulkhead(3)
	if Join(nil, b) != Limiter(b) {
		t.Fatal("Join of one limiter must be that limiter")
	}
	small, _ := NewBulkhead(1)
	j := Join(b, small)
	if !j.TryAcquire() || b.InFlight() != 1 || small.InFlight() != 1 {
		t.Fatal("first acquire")
	}
	if j.TryAcquire() || b.InFlight() != 1 {
		t.Fatalf("the second limiter refused, yet the first holds %d slots", b.InFlight())
	}
	j.Release(true)
	if b.InFlight() != 0 || small.InFlight() != 0 {
		t.Fatal("Release must release every limiter")
	}
}
