package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// TestWorkerRetention: the Worker's maintenance deletes done jobs after
// RetainDone and dead jobs after RetainDead, in batches, and reports it;
// KeepForever keeps them.
func TestWorkerRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, queue.Config{})
		ctx := context.Background()
		var jobs []queue.NewJob
		for i := range 25 {
			jobs = append(jobs, queue.NewJob{ID: fmt.Sprintf("j%02d", i), MaxAttempts: 1})
		}
		if _, err := q.EnqueueMany(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		h := func(ctx context.Context, _ []byte) error {
			if d, _ := retry.DeliveryFrom(ctx); strings.HasSuffix(d.ID, "0") {
				return retry.Permanent(errors.New("bad"))
			}
			return nil
		}
		var mu sync.Mutex
		var purgedDone, purgedDead int
		w, err := queue.NewWorker(q, h, queue.WorkerConfig{
			Concurrency: 4, SweepInterval: 100 * time.Millisecond, PurgeBatch: 2,
			RetainDone: time.Second, RetainDead: 5 * time.Second,
			OnMaintenance: func(m queue.Maintenance) {
				mu.Lock()
				purgedDone += m.PurgedDone
				purgedDead += m.PurgedDead
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- w.Run(rctx) }()
		time.Sleep(500 * time.Millisecond)
		if st, _ := q.Stats(ctx); st.Done != 22 || st.DeadPermanent != 3 {
			t.Fatalf("before retention: %+v", st)
		}
		time.Sleep(2 * time.Second) // past RetainDone, not RetainDead
		if st, _ := q.Stats(ctx); st.Done != 0 || st.DeadPermanent != 3 {
			t.Fatalf("after RetainDone: %+v", st)
		}
		time.Sleep(4 * time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if st, _ := q.Stats(ctx); st.Dead() != 0 {
			t.Fatalf("after RetainDead: %+v", st)
		}
		mu.Lock()
		defer mu.Unlock()
		if purgedDone != 22 || purgedDead != 3 {
			t.Fatalf("reported purged done %d dead %d, want 22 and 3", purgedDone, purgedDead)
		}
	})
}

func TestWorkerKeepForever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, queue.Config{})
		ctx := context.Background()
		if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "keep"}); err != nil {
			t.Fatal(err)
		}
		w, err := queue.NewWorker(q, func(context.Context, []byte) error { return nil }, queue.WorkerConfig{
			SweepInterval: 100 * time.Millisecond, RetainDone: queue.KeepForever,
		})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		if err := w.Run(rctx); err != nil {
			t.Fatal(err)
		}
		if j, err := q.Get(ctx, "keep"); err != nil || j.State != queue.Done {
			t.Fatalf("KeepForever: %+v %v", j, err)
		}
	})
}

func TestRetentionConfigValidation(t *testing.T) {
	q := newQueue(t, queue.Config{})
	h := func(context.Context, []byte) error { return nil }
	for field, cfg := range map[string]queue.WorkerConfig{
		"RetainDone": {RetainDone: -2 * time.Second},
		"RetainDead": {RetainDead: queue.MaxDuration + 1},
		"PurgeBatch": {PurgeBatch: queue.MaxPurgeBatch + 1},
	} {
		if _, err := queue.NewWorker(q, h, cfg); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("NewWorker(%+v) = %v, want an error naming %s", cfg, err, field)
		}
	}
}
