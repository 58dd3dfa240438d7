package rabbitmq

import (
	"context"
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

// TestHolderRoom: a session's holder has room for Prefetch held
// deliveries when holding is on, and allocates none when it is off
// (WaitInPlace negative): 512 KB a session at MaxPrefetch otherwise.
func TestHolderRoom(t *testing.T) {
	for _, c := range []struct {
		wait time.Duration
		want int
	}{{0, MaxPrefetch}, {MaxWaitInPlace, MaxPrefetch}, {-1, 0}} {
		cons, err := NewConsumer(Options{URL: "amqp://127.0.0.1/", Topology: NewTopology("q", nil),
			Handler: func(context.Context, []byte) error { return nil }, Prefetch: MaxPrefetch, WaitInPlace: c.wait})
		if err != nil {
			t.Fatal(err)
		}
		if got := cap(cons.newHolder().ready); got != c.want {
			t.Errorf("WaitInPlace %v: the holder has room for %d deliveries, want %d", c.wait, got, c.want)
		}
	}
}
