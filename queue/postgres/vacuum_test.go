package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
)

// TestClaimCostAfterHistory drains n jobs through the store's own claim and
// outcome statements, then reads the buffers a claim on the now empty queue
// touches: with the store's vacuum (VacuumAfter n, so it starts at the last
// claim) the claim reads a few pages, as on a new table (the paused check
// and a descent of stagger_jobs_leased and of stagger_jobs_pending: 7 to
// 10 as EXPLAIN counts them); without it, the dead entries the drain left
// at the head of the due index are read again by every claim (43).
func TestClaimCostAfterHistory(t *testing.T) {
	const n, batch = 3000, 500
	for _, tc := range []struct {
		name   string
		after  int
		bufMax int // the claim reads at most this many buffers
		bufMin int // ... and at least this many
	}{{"vacuum", n, 12, 0}, {"no vacuum", postgres.NoVacuum, 1 << 30, 20}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStoreOpts(t, postgres.Options{VacuumAfter: tc.after})
			ctx := context.Background()
			// Only the store's vacuum may clean the table: an autovacuum
			// woken by the drain would pass the "no vacuum" case's floor.
			if _, err := s.Pool().Exec(ctx, `ALTER TABLE `+s.Schema()+`.stagger_jobs SET (autovacuum_enabled = false)`); err != nil {
				t.Fatal(err)
			}
			const now = int64(1_000_000)
			for i := 0; i < n; i += batch {
				jobs := make([]queue.Job, batch)
				for k := range jobs {
					jobs[k] = queue.Job{ID: fmt.Sprintf("job-%06d", i+k), Payload: []byte("{}"), MaxAttempts: 5,
						AvailableAt: now - n + int64(i+k), Deadline: now + 1_000_000, State: queue.Pending, CreatedAt: now, UpdatedAt: now}
				}
				if _, err := s.Insert(ctx, jobs); err != nil {
					t.Fatal(err)
				}
			}
			for left := n; left > 0; {
				claimed, err := s.Claim(ctx, queue.DefaultQueue, now, now+60_000, batch)
				if err != nil || len(claimed) == 0 {
					t.Fatalf("claim with %d left: %d jobs, %v", left, len(claimed), err)
				}
				outs := make([]queue.Outcome, len(claimed))
				for i, j := range claimed {
					outs[i] = queue.Outcome{ID: j.ID, Attempt: j.Attempts, State: queue.Done, Now: now}
				}
				if err := s.Record(ctx, outs); err != nil {
					t.Fatal(err)
				}
				left -= len(claimed)
			}
			runs, failed := s.VacuumRuns()
			if failed || (tc.after != postgres.NoVacuum && runs != 1) {
				t.Fatalf("vacuums: %d finished, failed %v", runs, failed)
			}
			// A vacuum removes only the rows no snapshot of the database
			// may still see: a transaction of another session (another
			// test, another package's run on the same server) that was
			// open during it keeps them, and the claim walks their index
			// entries. The store guarantees the vacuum, not the server's
			// horizon: the vacuum reports the dead rows it had to keep.
			var kept int64
			if tc.after != postgres.NoVacuum {
				if err := s.Pool().QueryRow(ctx, `SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = $1::regclass`,
					s.Schema()+".stagger_jobs").Scan(&kept); err != nil {
					t.Fatal(err)
				}
			}
			buf := claimBuffers(t, s, now)
			t.Logf("the claim on the empty queue read %d buffers (the vacuum kept %d dead rows)", buf, kept)
			switch {
			case buf < tc.bufMin:
				t.Errorf("the claim read %d buffers, want at least %d", buf, tc.bufMin)
			case buf > tc.bufMax && kept == 0:
				t.Errorf("the claim read %d buffers after a vacuum that removed every dead row, want at most %d", buf, tc.bufMax)
			case buf > tc.bufMax:
				t.Logf("another session's snapshot kept %d dead rows from the vacuum: the claim's cost is not the store's to bound this run", kept)
			}
		})
	}
}

// claimBuffers runs the claim at now in EXPLAIN (ANALYZE, BUFFERS), rolled
// back, and returns the shared buffers it hit or read.
func claimBuffers(t testing.TB, s *postgres.Store, now int64) int {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, postgres.ClaimPlan); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+s.ClaimSQL(), now, now+1000, 4, queue.DefaultQueue).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", raw, err)
	}
	return plan[0].Plan.Hit + plan[0].Plan.Read
}

// BenchmarkClaimAfterHistory times a claim on an empty queue (one op: one
// committed claim that finds nothing) after a history of done jobs, made
// by the store's own insert, claim and outcome statements in batches of
// 1,000 (1% of the history when larger), as a drain leaves the table (with the store's vacuum, default
// settings, once its pending vacuum ran). It also reports the buffers the
// claim reads, the due index's size and the share of HOT updates.
//
//	cd queue/postgres && go test -run '^$' -bench ClaimAfterHistory -benchtime 2000x .
func BenchmarkClaimAfterHistory(b *testing.B) {
	for _, done := range []int{0, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("done=%d", done), func(b *testing.B) {
			s := newStoreOpts(b, postgres.Options{})
			ctx := context.Background()
			const now = int64(1_000_000_000)
			batch := max(1000, done/100)
			for i := 0; i < done; i += batch {
				jobs := make([]queue.Job, batch)
				for k := range jobs {
					jobs[k] = queue.Job{ID: fmt.Sprintf("job-%09d", i+k), Payload: []byte("{}"), MaxAttempts: 5,
						AvailableAt: now - int64(done) + int64(i+k), Deadline: now + 1_000_000, State: queue.Pending, CreatedAt: now, UpdatedAt: now}
				}
				if _, err := s.Insert(ctx, jobs); err != nil {
					b.Fatal(err)
				}
				claimed, err := s.Claim(ctx, queue.DefaultQueue, now, now+60_000, batch)
				if err != nil || len(claimed) != batch {
					b.Fatalf("claimed %d of %d: %v", len(claimed), batch, err)
				}
				outs := make([]queue.Outcome, len(claimed))
				for k, j := range claimed {
					outs[k] = queue.Outcome{ID: j.ID, Attempt: j.Attempts, State: queue.Done, Now: now}
				}
				if err := s.Record(ctx, outs); err != nil {
					b.Fatal(err)
				}
			}
			// The drained queue's polls start the vacuum the history is due
			// (after the previous one's pause).
			for {
				if _, err := s.Claim(ctx, queue.DefaultQueue, now, now+60_000, 4); err != nil {
					b.Fatal(err)
				}
				if _, failed := s.VacuumRuns(); failed {
					b.Fatal("the store's vacuum failed")
				}
				if s.VacuumPending() == 0 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			s.VacuumRuns()
			buf := claimBuffers(b, s, now)
			var size, upd, hot int64
			if err := s.Pool().QueryRow(ctx, `SELECT pg_relation_size($1::regclass)`, s.Schema()+".stagger_jobs_pending").Scan(&size); err != nil {
				b.Fatal(err)
			}
			if err := s.Pool().QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = $1::regclass`,
				s.Schema()+".stagger_jobs").Scan(&upd, &hot); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := s.Claim(ctx, queue.DefaultQueue, now, now+60_000, 4); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(buf), "buffers/claim")
			b.ReportMetric(float64(size)/1024, "due-index-KiB")
			b.ReportMetric(float64(hot)/float64(max(upd, 1))*100, "hot-upd-%")
		})
	}
}
