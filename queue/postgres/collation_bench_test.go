package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
)

// BenchmarkKeyCollation enqueues, claims and completes turns of 1,000
// jobs, one client, on two tables in turn: a new one (text keys in byte
// order, COLLATE "C") and one whose id, queue and state columns are in the
// database's collation (a table made before). It reports each one's
// server round trip time a job (µs/job-C, µs/job-db) and their ratio: one
// client, so the time is the server's statements, not a share of the
// cores. One op is one job on each table.
func BenchmarkKeyCollation(b *testing.B) {
	ctx := context.Background()
	p := sharedPool(b)
	const turn = 1000
	type table struct {
		s    *postgres.Store
		q    *queue.Queue
		took time.Duration
	}
	var ts [2]*table
	for i := range ts {
		schema := tempSchema(b)
		s, err := postgres.New(ctx, p, postgres.Options{Schema: schema, VacuumAfter: postgres.NoVacuum})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		if i == 1 {
			keysInDatabaseCollation(b, p, schema)
		}
		q, err := queue.New(s, queue.Config{})
		if err != nil {
			b.Fatal(err)
		}
		ts[i] = &table{s: s, q: q}
	}
	jobs := make([]queue.NewJob, turn)
	seq := 0
	b.ResetTimer()
	for done := 0; done < b.N; done += turn {
		for _, t := range ts {
			for i := range jobs {
				jobs[i] = queue.NewJob{ID: fmt.Sprintf("job-%09d", seq), Payload: []byte("{}")}
				seq++
			}
			t0 := time.Now()
			if _, err := t.q.EnqueueMany(ctx, jobs); err != nil {
				b.Fatal(err)
			}
			now := time.Now().UnixMilli()
			claimed, err := t.s.Claim(ctx, queue.DefaultQueue, now, now+60_000, turn)
			if err != nil || len(claimed) != turn {
				b.Fatalf("claimed %d of %d: %v", len(claimed), turn, err)
			}
			outs := make([]queue.Outcome, len(claimed))
			for i, j := range claimed {
				outs[i] = queue.Outcome{ID: j.ID, Attempt: j.Attempts, State: queue.Done, Now: now}
			}
			if err := t.s.Record(ctx, outs); err != nil {
				b.Fatal(err)
			}
			t.took += time.Since(t0)
		}
	}
	b.StopTimer()
	n := float64((b.N + turn - 1) / turn * turn)
	c, db := ts[0].took.Seconds()*1e6/n, ts[1].took.Seconds()*1e6/n
	b.ReportMetric(c, "µs/job-C")
	b.ReportMetric(db, "µs/job-db")
	b.ReportMetric(c/db, "C/db")
}
