package rabbitmq

import (
	"context"
	"strings"
	"sync"
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

// TestAllStacksWhole: allStacks returns every goroutine's stack however
// long the dump is (here several MB, beyond the buffer it starts with),
// so consumerGoroutines sees every Consumer goroutine.
func TestAllStacksWhole(t *testing.T) {
	const fillers = 500
	release := make(chan struct{})
	var started, done sync.WaitGroup
	for range fillers {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			fillStack(40, &started, release)
		}()
	}
	defer func() { close(release); done.Wait() }()
	started.Wait()
	dump := allStacks()
	seen := 0
	for _, g := range strings.Split(string(dump), "\n\n") {
		if strings.Contains(g, "broker/rabbitmq.fillStack") {
			seen++
		}
	}
	if seen != fillers {
		t.Fatalf("a %d-byte dump shows %d of the %d goroutines", len(dump), seen, fillers)
	}
	if len(dump) <= 1<<20 {
		t.Fatalf("the dump is %d bytes, within the first buffer: the test exercised nothing", len(dump))
	}
}

// fillStack blocks on release depth frames deep, after started.Done.
func fillStack(depth int, started *sync.WaitGroup, release <-chan struct{}) {
	if depth == 0 {
		started.Done()
		<-release
		return
	}
	fillStack(depth-1, started, release)
}
