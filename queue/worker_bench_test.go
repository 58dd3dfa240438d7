package queue_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/staggerhq/stagger/queue"
)

// BenchmarkWorkerDrain is the Worker's own cost a job: b.N no-op jobs
// drained by 512 handlers in claims of up to 1,000 from the MemoryStore
// (enqueued before the timer starts). allocs/op is load-independent.
func BenchmarkWorkerDrain(b *testing.B) {
	ctx := context.Background()
	q, err := queue.New(queue.NewMemoryStore(), queue.Config{})
	if err != nil {
		b.Fatal(err)
	}
	jobs := make([]queue.NewJob, 0, 1000)
	for i := 0; i < b.N; i += cap(jobs) {
		jobs = jobs[:0]
		for k := i; k < min(i+cap(jobs), b.N); k++ {
			jobs = append(jobs, queue.NewJob{ID: fmt.Sprintf("job-%09d", k), MaxAttempts: 1})
		}
		if _, err := q.EnqueueMany(ctx, jobs); err != nil {
			b.Fatal(err)
		}
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var done atomic.Int64
	w, err := queue.NewWorker(q, func(context.Context, []byte) error {
		if done.Add(1) == int64(b.N) {
			stop()
		}
		return nil
	}, queue.WorkerConfig{Concurrency: 512, BatchSize: 1000})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if err := w.Run(wctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if st, err := q.Stats(ctx); err != nil || st.Done != int64(b.N) {
		b.Fatalf("stats %+v %v, want %d done", st, err, b.N)
	}
}
