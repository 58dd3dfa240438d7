package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
)

// TestMigratesTableBeforeOps: a queue made before the operator's tables
// is read by a read-only store (no history, no pauses) and migrated by
// New, after which a job is cancelled and its history kept.
func TestMigratesTableBeforeOps(t *testing.T) {
	p, schema := sharedPool(t), tempSchema(t)
	ctx := context.Background()
	s, err := postgres.New(ctx, p, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	q, _ := queue.New(s, queue.Config{})
	if _, _, err := q.Enqueue(ctx, queue.NewJob{ID: "old"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := p.Exec(ctx, `DROP TABLE "`+schema+`".stagger_job_events; DROP TABLE "`+schema+`".stagger_paused;
		DROP INDEX "`+schema+`".stagger_jobs_list_unleased`); err != nil {
		t.Fatal(err)
	}
	r, err := postgres.New(ctx, p, postgres.Options{Schema: schema, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := r.History(ctx, "old"); err != nil || len(h) != 0 {
		t.Fatalf("read-only History on the old table: %v %v", h, err)
	}
	if ps, err := r.Pauses(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("read-only Pauses on the old table: %v %v", ps, err)
	}
	if js, err := r.Search(ctx, queue.Search{Queue: queue.DefaultQueue, States: queue.AllStates, Limit: 5}); err != nil || len(js) != 1 {
		t.Fatalf("read-only Search on the old table: %v %v", js, err)
	}
	if s, err = postgres.New(ctx, p, postgres.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, _ = queue.New(s, queue.Config{})
	if _, err := q.Cancel(ctx, "old", "ops"); err != nil {
		t.Fatal(err)
	}
	if h, err := q.History(ctx, "old"); err != nil || len(h) != 1 || h[0].Actor != "ops" {
		t.Fatalf("History after migration: %v %v", h, err)
	}
}

// TestPauseSeenByOtherProcesses: a pause written through one store is
// obeyed by the claims of another (its own pool, as another process's),
// and a resume wakes that store's listeners.
func TestPauseSeenByOtherProcesses(t *testing.T) {
	a := newStore(t)
	ctx := context.Background()
	b, err := postgres.Open(ctx, sharedPool(t).Config().ConnString(), postgres.Options{Schema: strings.Trim(a.Schema(), `"`)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	name := "pause-" + strings.Trim(a.Schema(), `"`)
	qa, _ := queue.New(a, queue.Config{Queue: name})
	if _, _, err := qa.Enqueue(ctx, queue.NewJob{ID: "j"}); err != nil {
		t.Fatal(err)
	}
	if _, err := qa.Pause(ctx, "", "ops"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli() + 1000
	if got, err := b.Claim(ctx, name, now, now+1000, 5); err != nil || len(got) != 0 {
		t.Fatalf("claim through another store of a paused queue = %v, %v", got, err)
	}
	wake, cancel := b.Subscribe()
	defer cancel()
	// The listener connects in the background: resume until it hears.
	deadline := time.After(10 * time.Second)
	for heard := false; !heard; {
		if _, err := qa.Resume(ctx, "", "ops"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-wake:
			heard = true
		case <-time.After(100 * time.Millisecond):
			qa.Pause(ctx, "", "ops")
		case <-deadline:
			t.Fatal("a resume woke no listener of another store")
		}
	}
	if got, err := b.Claim(ctx, name, now, now+1000, 5); err != nil || len(got) != 1 {
		t.Fatalf("claim through another store after resume = %v, %v", got, err)
	}
}

// TestSearchPlans: a listing walks stagger_jobs_list_unleased in ID order
// and stops after its page, for one state and for all of them (leased
// jobs: the queue's range of stagger_jobs_leased), with an ID prefix as a
// range of the index; an age of done or dead jobs counts its range of
// stagger_jobs_finished first.
func TestSearchPlans(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const n = 3000
	jobs := make([]queue.Job, n)
	for i := range jobs {
		jobs[i] = queue.Job{ID: fmt.Sprintf("job-%05d", i), Queue: "plans", Payload: []byte("{}"), MaxAttempts: 5,
			AvailableAt: 1, Deadline: queue.MaxTime, State: queue.Pending, CreatedAt: 1, UpdatedAt: 1}
	}
	if _, err := s.Insert(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	for _, q := range []queue.Search{
		{Queue: "plans", States: []queue.State{queue.Pending}, Limit: 100},
		{Queue: "plans", States: queue.AllStates, Limit: 100, After: "job-01000"},
		{Queue: "plans", States: []queue.State{queue.Dead}, Reason: queue.Canceled, IDPrefix: "job-02", SinceBefore: 5, Limit: 100},
	} {
		text, args := s.SearchSQL(q)
		rows, err := s.Pool().Query(ctx, `EXPLAIN `+text, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		if q.SinceBefore != 0 {
			// An age of dead jobs: the range of stagger_jobs_finished is
			// counted first, and a one-time filter on each of the two
			// branches (read the range and sort, or walk the ID order)
			// runs one of them.
			if !strings.Contains(plan, "on stagger_jobs_finished") || strings.Count(plan, "One-Time Filter") != 2 || strings.Contains(plan, "Seq Scan") {
				t.Errorf("Search(%+v) does not count the range of finished times and choose:\n%s", q, plan)
			}
			continue
		}
		leased := slices.Contains(q.States, queue.Leased)
		walks := len(q.States)
		if leased {
			walks--
		}
		scans := strings.Count(plan, "Index Scan using stagger_jobs_list_unleased")
		if scans != walks || strings.Contains(plan, "Seq Scan") || (len(q.States) == 1 && strings.Contains(plan, "Sort")) ||
			leased != strings.Contains(plan, "Index Scan using stagger_jobs_leased") {
			t.Errorf("Search(%+v) does not walk stagger_jobs_list_unleased once per state but leased:\n%s", q, plan)
		}
	}
}
