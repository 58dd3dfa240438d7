package queue_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/staggerhq/stagger/queue"
)

// BenchmarkWorkerDrain is the Worker's cost a job with the MemoryStore's:
// b.N no-op jobs drained by 512 handlers in claims of up to 1,000 from the
// MemoryStore (enqueued before the timer starts). allocs/op is
// load-independent.
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
	drainNoops(b, q)
	if st, err := q.Stats(ctx); err != nil || st.Done != int64(b.N) {
		b.Fatalf("stats %+v %v, want %d done", st, err, b.N)
	}
}

// BenchmarkWorkerOnly is the Worker's own cost a job without a store's:
// b.N no-op jobs handed out in claims of up to 1,000 by sliceStore, which
// takes them from a slice made before the timer starts and counts their
// outcomes, drained by 512 handlers. (The MemoryStore's claim sorts its
// jobs: most of BenchmarkWorkerDrain's time.)
func BenchmarkWorkerOnly(b *testing.B) {
	s := &sliceStore{Store: queue.NewMemoryStore(), jobs: make([]queue.Job, b.N)}
	for i := range s.jobs {
		s.jobs[i] = queue.Job{ID: fmt.Sprintf("job-%09d", i), Queue: queue.DefaultQueue, Payload: []byte{},
			MaxAttempts: 1, Deadline: math.MaxInt64 / 2, State: queue.Pending}
	}
	q, err := queue.New(s, queue.Config{})
	if err != nil {
		b.Fatal(err)
	}
	drainNoops(b, q)
	if got := s.recorded.Load(); got != int64(b.N) {
		b.Fatalf("%d outcomes recorded, want %d", got, b.N)
	}
}

// drainNoops times a Worker of 512 handlers, claims of up to 1,000, that
// runs b.N no-op jobs of q and stops.
func drainNoops(b *testing.B, q *queue.Queue) {
	wctx, stop := context.WithCancel(context.Background())
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
}

// sliceStore claims its jobs in order from a slice and records outcomes
// by counting them: a store that costs next to nothing, for
// BenchmarkWorkerOnly. The embedded Store serves the rest (empty).
type sliceStore struct {
	queue.Store
	mu       sync.Mutex
	jobs     []queue.Job
	recorded atomic.Int64
}

func (s *sliceStore) Claim(_ context.Context, _ string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	s.mu.Lock()
	n := min(limit, len(s.jobs))
	out := s.jobs[:n:n]
	s.jobs = s.jobs[n:]
	s.mu.Unlock()
	for i := range out {
		j := &out[i]
		j.State, j.Attempts, j.AvailableAt, j.LeaseUntil, j.UpdatedAt = queue.Leased, j.Attempts+1, leaseUntil, leaseUntil, now
	}
	return out, nil
}

func (s *sliceStore) Record(_ context.Context, outs []queue.Outcome) error {
	for i := range outs {
		outs[i].Applied = outs[i].State == queue.Done
	}
	s.recorded.Add(int64(len(outs)))
	return nil
}
