package queuetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/staggerhq/stagger/queue"
)

// BenchInsert is the store's side of a batched enqueue: b.N jobs inserted
// in transactions of 100 (Store.Insert). One op is one job.
func BenchInsert(b *testing.B, s queue.Store) {
	const batch = 100
	jobs := make([]queue.Job, 0, batch)
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		jobs = jobs[:0]
		for k := i; k < min(i+batch, b.N); k++ {
			jobs = append(jobs, queue.Job{ID: fmt.Sprintf("job-%09d", k), Payload: []byte(`{"n":1}`), MaxAttempts: 3,
				AvailableAt: Start, Deadline: Start + 1e9, State: queue.Pending, CreatedAt: Start, UpdatedAt: Start})
		}
		if _, err := s.Insert(context.Background(), jobs); err != nil {
			b.Fatal(err)
		}
	}
}
