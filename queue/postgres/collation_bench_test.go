package postgres_test

import (
	"context"
	"fmt"
	"strings"
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
	took := turnsInTurn(b, true, func(s *postgres.Store) {
		keysInDatabaseCollation(b, s.Pool(), strings.Trim(s.Schema(), `"`))
	})
	b.ReportMetric(took[0], "µs/job-C")
	b.ReportMetric(took[1], "µs/job-db")
	b.ReportMetric(took[0]/took[1], "C/db")
}

// BenchmarkListIndexTurn claims and completes turns of 1,000 jobs, one
// client, on two tables in turn: one as the store makes it and one without
// the listing index (stagger_jobs_list_unleased, dropped after the
// migration), the price a completion pays for the operator's listings.
// Enqueueing is not timed. It reports each one's server round trip time a
// job and their ratio. One op is one job on each table.
func BenchmarkListIndexTurn(b *testing.B) {
	took := turnsInTurn(b, false, func(s *postgres.Store) {
		if _, err := s.Pool().Exec(context.Background(), `DROP INDEX `+s.Schema()+`.stagger_jobs_list_unleased`); err != nil {
			b.Fatal(err)
		}
	})
	b.ReportMetric(took[0], "µs/job-with")
	b.ReportMetric(took[1], "µs/job-without")
	b.ReportMetric(took[1]/took[0], "without/with")
}

// turnsInTurn runs turns of 1,000 jobs (enqueue, claim, complete; the
// enqueue timed when withEnqueue), one client, on two new tables in turn,
// the second changed by change after the migration, and returns each
// table's time a job in µs.
func turnsInTurn(b *testing.B, withEnqueue bool, change func(s *postgres.Store)) [2]float64 {
	ctx := context.Background()
	const turn = 1000
	type table struct {
		s    *postgres.Store
		q    *queue.Queue
		took time.Duration
	}
	var ts [2]*table
	for i := range ts {
		s := newStoreOpts(b, postgres.Options{VacuumAfter: postgres.NoVacuum})
		if i == 1 {
			change(s)
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
			if !withEnqueue {
				t0 = time.Now()
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
	return [2]float64{ts[0].took.Seconds() * 1e6 / n, ts[1].took.Seconds() * 1e6 / n}
}
