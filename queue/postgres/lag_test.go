package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/staggerhq/stagger/queue"
)

// TestOldestDuePlan: the lag a gauge polls is one walk of the due index
// in order, stopped at the first row — no sort, no scan of the table —
// on a new table with a backlog (statistics of an empty table).
func TestOldestDuePlan(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const now, n = int64(1_000_000), 3000
	jobs := make([]queue.Job, n)
	for i := range jobs {
		jobs[i] = queue.Job{ID: fmt.Sprintf("job-%05d", i), Payload: []byte("{}"), MaxAttempts: 5,
			AvailableAt: now - n + int64(i), Deadline: now + 1_000_000, State: queue.Pending, CreatedAt: now, UpdatedAt: now}
	}
	if _, err := s.Insert(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Pool().Query(ctx, `EXPLAIN `+s.OldestDueSQL(), queue.DefaultQueue, now)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	if strings.Contains(plan, "Sort") || strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "stagger_jobs_pending") {
		t.Errorf("the lag query does not walk the due index in order:\n%s", plan)
	}
	if at, ok, err := s.OldestDue(ctx, queue.DefaultQueue, now); err != nil || !ok || at != now-n {
		t.Fatalf("OldestDue = %d, %v, %v; want %d", at, ok, err, now-n)
	}
}
