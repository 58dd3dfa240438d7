package rabbitmq

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestHolder: held deliveries come out on ready when due, in due order;
// close hands over the rest at once, closes ready, and refuses new holds.
func TestHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHolder(3)
		a, b, c := &held{}, &held{}, &held{}
		start := time.Now()
		for _, x := range []struct {
			h  *held
			in time.Duration
		}{{b, 20 * time.Millisecond}, {a, 10 * time.Millisecond}, {c, time.Hour}} {
			if !h.hold(x.h, x.in) {
				t.Fatal("an open holder refused a hold")
			}
		}
		for _, want := range []struct {
			h  *held
			at time.Duration
		}{{a, 10 * time.Millisecond}, {b, 20 * time.Millisecond}} {
			if got := <-h.ready; got != want.h || time.Since(start) != want.at {
				t.Fatalf("got %p after %v, want %p after %v", got, time.Since(start), want.h, want.at)
			}
		}
		synctest.Wait()
		select {
		case x := <-h.ready:
			t.Fatalf("%p came out before it was due", x)
		default:
		}
		h.close()
		h.close() // idempotent
		if got, ok := <-h.ready; got != c || !ok || time.Since(start) != 20*time.Millisecond {
			t.Fatalf("close handed over %p (%v) after %v, want %p at once", got, ok, time.Since(start), c)
		}
		if _, ok := <-h.ready; ok {
			t.Fatal("ready is still open after close")
		}
		if h.hold(a, 0) {
			t.Fatal("a closed holder took a hold")
		}
		time.Sleep(2 * time.Hour) // c's stopped timer must not fire into the closed ready
		synctest.Wait()
	})
}
