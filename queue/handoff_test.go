package queue_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/backoff"
	"github.com/staggerhq/stagger/limit"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// TestHandoff: a handler that gives up in process after 2 of 5 attempts
// hands its work to the queue, which runs it with the 3 attempts and the
// deadline that are left, under the same logical ID.
func TestHandoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		q, err := queue.New(queue.NewMemoryStore(), queue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		p := &retry.Policy{MaxAttempts: 5, Schedule: backoff.Constant(time.Second)}
		err = retry.Handler(func(ctx context.Context, payload []byte) error {
			d, _ := retry.DeliveryFrom(ctx)
			if d.Attempt < 2 {
				return retry.Retryable(errors.New("busy"))
			}
			nj, err := queue.Handoff(d, queue.NewJob{Payload: payload})
			if err != nil {
				return err
			}
			_, _, err = q.Enqueue(ctx, nj)
			return err
		}).Run(ctx, p, "order-7", []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		j, err := q.Get(ctx, "order-7")
		if err != nil {
			t.Fatal(err)
		}
		dl, _ := ctx.Deadline()
		if j.Attempts != 2 || j.MaxAttempts != 5 || j.Deadline != dl.UnixMilli() {
			t.Errorf("job attempts %d of %d deadline %d; want 2 of 5 and %d", j.Attempts, j.MaxAttempts, j.Deadline, dl.UnixMilli())
		}
		// The queue counts on: attempts 3, 4, 5, then the job is dead.
		var got []int
		for range 5 {
			run, err := q.RunOnce(ctx, func(ctx context.Context, _ []byte) error {
				d, _ := retry.DeliveryFrom(ctx)
				got = append(got, d.Attempt, d.MaxAttempts)
				return retry.Retryable(errors.New("still busy"))
			})
			if run == nil && err == nil {
				break // nothing due: the job is dead
			}
			time.Sleep(time.Minute)
		}
		if want := []int{3, 5, 4, 5, 5, 5}; !slices.Equal(got, want) {
			t.Errorf("the queue ran attempts (number, budget) %v, want %v", got, want)
		}
		// Nothing left: refused.
		if _, err := queue.Handoff(retry.Delivery{ID: "x", Attempt: 5, MaxAttempts: 5}, queue.NewJob{}); !errors.Is(err, queue.ErrInvalid) {
			t.Errorf("no attempt left: %v", err)
		}
		// A job's own smaller budget and earlier deadline stay.
		nj, _ := queue.Handoff(retry.Delivery{ID: "y", Attempt: 1, MaxAttempts: 9, Deadline: time.UnixMilli(5000)},
			queue.NewJob{ID: "own", MaxAttempts: 2, Deadline: 4000})
		if nj.ID != "own" || nj.Attempts != 1 || nj.MaxAttempts != 2 || nj.Deadline != 4000 {
			t.Errorf("handoff %+v", nj)
		}
	})
}

// TestSnoozeIsNotJudged: a snoozed attempt fires no give-up or retry hook,
// tells the Budget nothing and gives the Limiter its slot back as served.
func TestSnoozeIsNotJudged(t *testing.T) {
	bh, _ := limit.NewBulkhead(1)
	var hooks []string
	p := &retry.Policy{Limiter: bh, Hooks: retry.Hooks{
		OnRetry:   func(retry.Event) { hooks = append(hooks, "retry") },
		OnGiveUp:  func(retry.Event) { hooks = append(hooks, "giveup") },
		OnSuccess: func(retry.Event) { hooks = append(hooks, "success") },
	}}
	q, err := queue.New(queue.NewMemoryStore(), queue.Config{Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q.Enqueue(ctx, queue.NewJob{ID: "s1"})
	j, err := q.RunOnce(ctx, func(context.Context, []byte) error { return queue.Snooze(time.Minute) })
	if err != nil || j.State != queue.Pending {
		t.Fatalf("snoozed job %+v, %v", j, err)
	}
	if len(hooks) != 0 || bh.InFlight() != 0 {
		t.Errorf("hooks %v, slots held %d; want none and 0", hooks, bh.InFlight())
	}
}

// noLimits is a store that does not enforce Limits.
type noLimits struct{ queue.Store }

func TestLimitsNeedAStoreThatEnforcesThem(t *testing.T) {
	_, err := queue.New(noLimits{queue.NewMemoryStore()}, queue.Config{Limits: queue.Limits{MaxInFlight: 2}})
	if !errors.Is(err, queue.ErrInvalid) {
		t.Fatalf("New with Limits on a store without LimitedClaimer: %v", err)
	}
	if _, err := queue.New(noLimits{queue.NewMemoryStore()}, queue.Config{}); err != nil {
		t.Fatalf("no Limits: %v", err)
	}
	for _, l := range []queue.Limits{{MaxInFlight: -1}, {Rate: -1}, {Rate: math.NaN()}, {Rate: math.Inf(1)}, {Burst: 2}, {Rate: 1, Burst: -1}} {
		if _, err := queue.New(queue.NewMemoryStore(), queue.Config{Limits: l}); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), "Limits.") {
			t.Errorf("%+v: %v, want an error naming the Limits field", l, err)
		}
	}
}

// TestNewJobAttempts: a job's attempts already made must be in
// [0, max_attempts); the first claim is the next attempt.
func TestNewJobAttempts(t *testing.T) {
	ctx := context.Background()
	q, err := queue.New(queue.NewMemoryStore(), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []queue.NewJob{{ID: "a", Attempts: -1}, {ID: "b", Attempts: 3, MaxAttempts: 3}, {ID: "c", Attempts: math.MaxInt32, MaxAttempts: 5}} {
		if _, _, err := q.Enqueue(ctx, j); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), "attempts") {
			t.Errorf("%+v: %v, want an error naming attempts", j, err)
		}
	}
	if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "d", Attempts: 4, MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	var got retry.Delivery
	if _, err := q.RunOnce(ctx, func(ctx context.Context, _ []byte) error { got, _ = retry.DeliveryFrom(ctx); return nil }); err != nil {
		t.Fatal(err)
	}
	if got.Attempt != 5 || got.MaxAttempts != 5 {
		t.Errorf("first claim: attempt %d of %d, want 5 of 5", got.Attempt, got.MaxAttempts)
	}
}
