package queuetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// RunInbox runs the conformance tests of queue.Inbox against inboxes made by
// newInbox (a fresh, empty inbox per call).
func RunInbox(t *testing.T, newInbox func(t *testing.T) queue.Inbox) {
	t.Run("OnceThenDuplicate", func(t *testing.T) {
		t.Parallel()
		in := newInbox(t)
		ctx := context.Background()
		calls := 0
		fn := func(context.Context) error { calls++; return nil }
		for i, wantDup := range []bool{false, true, true} {
			dup, err := in.Process(ctx, "msg-1", fn)
			if err != nil || dup != wantDup {
				t.Fatalf("delivery %d: dup=%v err=%v, want dup=%v", i+1, dup, err, wantDup)
			}
		}
		if calls != 1 {
			t.Fatalf("effect applied %d times, want 1", calls)
		}
		if dup, err := in.Process(ctx, "msg-2", fn); dup || err != nil || calls != 2 {
			t.Fatalf("another ID: dup=%v err=%v calls=%d", dup, err, calls)
		}
	})
	t.Run("FailureLeavesUnprocessed", func(t *testing.T) {
		t.Parallel()
		in := newInbox(t)
		ctx := context.Background()
		boom := errors.New("boom")
		dup, err := in.Process(ctx, "m", func(context.Context) error { return boom })
		if dup || err != boom {
			t.Fatalf("failing delivery: dup=%v err=%v", dup, err)
		}
		called := false
		dup, err = in.Process(ctx, "m", func(context.Context) error { called = true; return nil })
		if dup || err != nil || !called {
			t.Fatalf("redelivery after failure: dup=%v err=%v called=%v", dup, err, called)
		}
	})
	t.Run("InvalidID", func(t *testing.T) {
		t.Parallel()
		in := newInbox(t)
		for _, id := range []string{"", "a\nb", string(make([]byte, queue.MaxIDLen+1))} {
			called := false
			dup, err := in.Process(context.Background(), id, func(context.Context) error { called = true; return nil })
			if dup || called || !errors.Is(err, queue.ErrInvalid) {
				t.Errorf("Process(%q): dup=%v called=%v err=%v, want ErrInvalid without a call", id, dup, called, err)
			}
		}
	})
	t.Run("PanicLeavesUnprocessed", func(t *testing.T) {
		t.Parallel()
		in := newInbox(t)
		ctx := context.Background()
		func() {
			defer func() {
				if r := recover(); r != "kaboom" {
					t.Errorf("recovered %v, want the handler's panic", r)
				}
			}()
			in.Process(ctx, "m", func(context.Context) error { panic("kaboom") })
		}()
		called := false
		dup, err := in.Process(ctx, "m", func(context.Context) error { called = true; return nil })
		if dup || err != nil || !called {
			t.Fatalf("redelivery after a panic: dup=%v err=%v called=%v", dup, err, called)
		}
	})
	t.Run("ConcurrentDeliveriesApplyOnce", func(t *testing.T) {
		t.Parallel()
		in := newInbox(t)
		ctx := context.Background()
		const ids, deliveries = 20, 5
		var effects [ids]atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, ids*deliveries)
		for d := range deliveries {
			for i := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := in.Process(ctx, fmt.Sprintf("id-%d", i), func(context.Context) error {
						effects[i].Add(1)
						return nil
					})
					if err != nil && !errors.Is(err, queue.ErrInProgress) {
						errs <- fmt.Errorf("delivery %d of id-%d: %w", d, i, err)
					}
					if err != nil {
						if c, _ := retry.Classify(err); c != retry.ClassRetryable {
							errs <- fmt.Errorf("in-progress error is %v, want retryable", c)
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for i := range ids {
			if n := effects[i].Load(); n != 1 {
				t.Fatalf("id-%d: effect applied %d times, want 1", i, n)
			}
		}
	})
}
