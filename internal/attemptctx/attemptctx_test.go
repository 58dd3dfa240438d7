package attemptctx_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/internal/attemptctx"
)

type key struct{}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// ended checks, in this order, that c's Err is want, its Done is closed
// and its Cause is want.
func ended(t *testing.T, c *attemptctx.Ctx, want error) {
	t.Helper()
	if err := c.Err(); err != want {
		t.Fatalf("Err = %v, want %v", err, want)
	}
	if !closed(c.Done()) {
		t.Fatal("Done open after Err reported the end")
	}
	if err := context.Cause(c); err != want {
		t.Fatalf("Cause = %v, want %v", err, want)
	}
}

// TestDeadlineWithoutDone: a context nobody watched still ends at its
// deadline (Err, Cause and a late Done agree), and its Deadline is the
// earlier of its own and the parent's.
func TestDeadlineWithoutDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent := context.WithValue(context.Background(), key{}, "v")
		c := attemptctx.New(parent, time.Now().Add(time.Second))
		defer c.End()
		if d, ok := c.Deadline(); !ok || !d.Equal(time.Now().Add(time.Second)) {
			t.Fatalf("Deadline = %v, %v", d, ok)
		}
		if c.Value(key{}) != "v" {
			t.Fatalf("Value = %v, want the parent's", c.Value(key{}))
		}
		if err := c.Err(); err != nil {
			t.Fatalf("Err before the deadline = %v", err)
		}
		time.Sleep(time.Second)               // virtual time: the bubble's clock, no timer of c's runs
		ended(t, c, context.DeadlineExceeded) // Err first: it makes the context
	})
}

// TestDoneFiresAtDeadline: a watched context's Done closes at the
// deadline by itself (its timer), and a child registered on it ends too.
func TestDoneFiresAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := attemptctx.New(context.Background(), time.Now().Add(time.Second))
		defer c.End()
		child, stop := context.WithCancel(c)
		defer stop()
		after := make(chan struct{})
		context.AfterFunc(c, func() { close(after) })
		start := time.Now()
		<-c.Done()
		if got := time.Since(start); got != time.Second {
			t.Fatalf("Done closed after %v, want 1s", got)
		}
		synctest.Wait()
		if child.Err() != context.DeadlineExceeded {
			t.Fatalf("child Err = %v, want DeadlineExceeded", child.Err())
		}
		if !closed(after) {
			t.Fatal("AfterFunc did not run at the deadline")
		}
	})
}

// TestEndWithoutDone: End before anything watched leaves a context that
// reports Canceled to every method, and runs no timer.
func TestEndWithoutDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := attemptctx.New(context.Background(), time.Now().Add(time.Hour))
		c.End()
		c.End() // idempotent
		ended(t, c, context.Canceled)
		child, stop := context.WithCancel(c)
		defer stop()
		if child.Err() != context.Canceled {
			t.Fatalf("a child of an ended context: Err = %v", child.Err())
		}
	})
}

// TestEndAfterDone: End cancels a context already made: Canceled, not
// the deadline an hour later.
func TestEndAfterDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := attemptctx.New(context.Background(), time.Now().Add(time.Hour))
		done := c.Done()
		if closed(done) {
			t.Fatal("Done closed at the start")
		}
		c.End()
		if !closed(done) || c.Err() != context.Canceled {
			t.Fatalf("after End: closed %v, Err %v", closed(done), c.Err())
		}
	})
}

// TestParentEnds: the parent's end reaches an unwatched context (Err and
// Cause are the parent's) and a watched one (Done closes), and an earlier
// parent deadline is the context's.
func TestParentEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cause := errors.New("shutting down")
		parent, cancel := context.WithCancelCause(context.Background())
		lazy := attemptctx.New(parent, time.Now().Add(time.Hour))
		defer lazy.End()
		watched := attemptctx.New(parent, time.Now().Add(time.Hour))
		defer watched.End()
		done := watched.Done()
		cancel(cause)
		synctest.Wait()
		if !closed(done) {
			t.Fatal("the parent's end did not close a watched context's Done")
		}
		for _, c := range []*attemptctx.Ctx{lazy, watched} {
			if c.Err() != context.Canceled || context.Cause(c) != cause {
				t.Fatalf("Err %v, Cause %v; want Canceled, the parent's cause", c.Err(), context.Cause(c))
			}
		}

		early, stop := context.WithTimeout(context.Background(), time.Minute)
		defer stop()
		c := attemptctx.New(early, time.Now().Add(time.Hour))
		defer c.End()
		if d, _ := c.Deadline(); !d.Equal(time.Now().Add(time.Minute)) {
			t.Fatalf("Deadline = %v, want the parent's, a minute away", d)
		}
	})
}

// TestPastDeadline: a deadline already passed is an ended context from
// the start.
func TestPastDeadline(t *testing.T) {
	c := attemptctx.New(context.Background(), time.Now().Add(-time.Millisecond))
	defer c.End()
	if c.Err() != context.DeadlineExceeded || !closed(c.Done()) {
		t.Fatalf("Err %v, Done closed %v", c.Err(), closed(c.Done()))
	}
}

// TestConcurrentUse: Done, Err, Value and End from several goroutines at
// once (run with -race) make one context.
func TestConcurrentUse(t *testing.T) {
	for range 100 {
		c := attemptctx.New(context.Background(), time.Now().Add(time.Hour))
		chans := make(chan (<-chan struct{}), 4)
		stop := make(chan struct{})
		for range 4 {
			go func() {
				<-stop
				_ = c.Err()
				_ = c.Value(key{})
				chans <- c.Done()
			}()
		}
		close(stop)
		var first <-chan struct{}
		for range 4 {
			ch := <-chans
			if first == nil {
				first = ch
			} else if ch != first {
				t.Fatal("two Done channels for one context")
			}
		}
		c.End()
		if !closed(first) {
			t.Fatal("End did not close Done")
		}
	}
}

// BenchmarkAttempt is an attempt's context made, used and ended:
// unwatched (the work never watches Done: New, Err, End), watched (it
// does, as a network call: the context is made), and context.WithTimeout,
// which both replace.
func BenchmarkAttempt(b *testing.B) {
	for _, bc := range []struct {
		name string
		run  func(parent context.Context)
	}{
		{"unwatched", func(parent context.Context) {
			c := attemptctx.New(parent, time.Now().Add(time.Hour))
			_ = c.Err()
			c.End()
		}},
		{"watched", func(parent context.Context) {
			c := attemptctx.New(parent, time.Now().Add(time.Hour))
			_ = c.Done()
			c.End()
		}},
		{"WithTimeout", func(parent context.Context) {
			c, end := context.WithTimeout(parent, time.Hour)
			_ = c.Done()
			end()
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			parent, cancel := context.WithCancel(context.Background())
			defer cancel()
			b.ReportAllocs()
			for b.Loop() {
				bc.run(parent)
			}
		})
	}
}
