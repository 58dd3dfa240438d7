package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/queuetest"
	"github.com/staggerhq/stagger/queue/sqlite"
)

// BenchmarkRecordAndClaim is a busy Worker's turn on SQLite
// (synchronous=NORMAL): record the outcomes of the 4 jobs claimed last
// turn (done) and claim 4 more, in one transaction, with a backlog of due
// jobs. One op is one turn.
func BenchmarkRecordAndClaim(b *testing.B) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "q.db"), sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const now, batch = queuetest.Start, 4
	n := b.N*batch + 1000
	for i := 0; i < n; i += 1000 {
		jobs := make([]queue.Job, 0, 1000)
		for k := i; k < min(i+1000, n); k++ {
			jobs = append(jobs, queue.Job{ID: fmt.Sprintf("job-%09d", k), Payload: []byte("{}"), MaxAttempts: 3,
				AvailableAt: now, Deadline: now + 1e9, State: queue.Pending, CreatedAt: now, UpdatedAt: now})
		}
		if _, err := s.Insert(ctx, jobs); err != nil {
			b.Fatal(err)
		}
	}
	var outs []queue.Outcome
	b.ResetTimer()
	for range b.N {
		got, err := s.RecordAndClaim(ctx, outs, queue.DefaultQueue, now+1, now+1e6, batch)
		if err != nil || len(got) != batch {
			b.Fatal(len(got), err)
		}
		outs = outs[:0]
		for _, j := range got {
			outs = append(outs, queue.Outcome{ID: j.ID, Attempt: j.Attempts, State: queue.Done, Now: now + 1})
		}
	}
}
