package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/queuetest"
)

// statsOnly hides the MemoryStore's OldestDue, so Lag falls back to Stats.
type statsOnly struct{ queue.Store }

// Lag agrees on both paths (OldestDuer and Stats), ignores scheduled,
// leased and other queues' jobs, and moves with the clock.
func TestLagBothPaths(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		wrap func(*queue.MemoryStore) queue.Store
	}{
		{"OldestDuer", func(m *queue.MemoryStore) queue.Store { return m }},
		{"Stats", func(m *queue.MemoryStore) queue.Store { return statsOnly{m} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := queuetest.NewClock(queuetest.Start)
			m := queue.NewMemoryStore()
			q, err := queue.New(tc.wrap(m), queue.Config{Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			other, _ := queue.New(m, queue.Config{Queue: "other", Now: clock.Now})
			other.Enqueue(ctx, queue.NewJob{ID: "elsewhere"})
			clock.Advance(10_000)
			q.Enqueue(ctx, queue.NewJob{ID: "later", AvailableAt: clock.Now() + time.Hour.Milliseconds()})
			q.Enqueue(ctx, queue.NewJob{ID: "claimed"})
			if j, err := q.RunOnce(ctx, func(context.Context, []byte) error { return nil }); err != nil || j == nil || j.ID != "claimed" {
				t.Fatalf("RunOnce = %v, %v", j, err)
			}
			if lag, err := q.Lag(ctx); err != nil || lag != 0 {
				t.Fatalf("lag with nothing due = %v, %v; want 0 (other queues, scheduled and done jobs do not count)", lag, err)
			}
			q.Enqueue(ctx, queue.NewJob{ID: "waiting"})
			clock.Advance(250)
			if lag, err := q.Lag(ctx); err != nil || lag != 250*time.Millisecond {
				t.Fatalf("lag = %v, %v; want 250ms", lag, err)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := q.Lag(cctx); err == nil {
				t.Fatal("Lag on a canceled context: no error")
			}
		})
	}
}

func BenchmarkLagMemory(b *testing.B) {
	ctx := context.Background()
	clock := queuetest.NewClock(queuetest.Start)
	q, _ := queue.New(queue.NewMemoryStore(), queue.Config{Now: clock.Now})
	for i := range 100 {
		q.Enqueue(ctx, queue.NewJob{ID: string(rune('a'+i%26)) + string(rune('a'+i/26))})
	}
	b.ReportAllocs()
	for b.Loop() {
		q.Lag(ctx)
	}
}
