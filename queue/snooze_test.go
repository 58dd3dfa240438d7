package queue_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// TestWorkerSnooze: a Worker records a snooze as pending with no error
// reported, and reports it as Snoozed to OnResult; the job runs again
// after the snooze.
func TestWorkerSnooze(t *testing.T) { eachStoreKind(t, testWorkerSnooze) }

func testWorkerSnooze(t *testing.T, newStore func() queue.Store) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueueOn(t, newStore(), queue.Config{})
		ctx := context.Background()
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "s", MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var results []queue.Result
		var errs []error
		var starts []time.Time
		h := func(ctx context.Context, _ []byte) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			if d, _ := retry.DeliveryFrom(ctx); d.Attempt == 1 {
				return queue.Snooze(2 * time.Second)
			}
			return nil
		}
		w, err := queue.NewWorker(q, h, queue.WorkerConfig{PollInterval: 100 * time.Millisecond,
			OnError:  func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
			OnResult: func(r queue.Result) { mu.Lock(); results = append(results, r); mu.Unlock() },
		})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := w.Run(rctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(errs) != 0 || len(results) != 2 || len(starts) != 2 {
			t.Fatalf("errors %v, results %+v", errs, results)
		}
		r := results[0]
		if !r.Snoozed || r.Err != nil || !r.Recorded || r.Job.State != queue.Pending || r.Job.LastError != "" || r.Job.DeadReason != "" {
			t.Fatalf("snooze result %+v", r)
		}
		if gap := starts[1].Sub(starts[0]); gap < 2*time.Second {
			t.Fatalf("ran again %v after a 2s snooze", gap)
		}
		if results[1].Snoozed || results[1].Job.State != queue.Done || results[1].Job.Attempts != 2 {
			t.Fatalf("second result %+v", results[1])
		}
	})
}
