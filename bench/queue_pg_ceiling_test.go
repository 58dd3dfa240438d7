package bench

// The PostgreSQL server's own ceiling for a drain: one statement that
// claims a batch of due jobs with FOR UPDATE SKIP LOCKED and completes them
// (an UPDATE of the rows a SKIP LOCKED CTE selected, straight to done), run
// by 4 clients at once on stagger's own table (the same columns, indexes
// and rows as BenchmarkQueuePostgresDrain's stagger runs). No lease, no
// handler, no outcome: the least a queue on this table shape can make the
// server do per job, so that every drain row can say which fraction of it
// stagger reaches. It runs inside BenchmarkQueuePostgresDrain, so that one
// run interleaves it with stagger and River:
//
//	cd bench && go test -run '^$' -bench 'BenchmarkQueuePostgresDrain/(c=4|c=512|best|ceiling)/' -benchtime 50000x -count 1 .

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
)

// ceilingBatches are the ceiling's batch sizes: the claim sizes stagger's
// Worker uses in these drains (jobs/claim: 64, its default BatchSize, at 4
// workers; about 1,000 at 512) and 4, 32, 512.
var ceilingBatches = []int{4, 32, 64, 512, 1000}

// ceilingClients is how many connections run the ceiling's statement at
// once.
const ceilingClients = 4

// drainCeiling inserts b.N jobs with stagger's Queue (as drainStagger
// does, not timed), then 4 clients run the ceiling's claim-and-complete
// statement, batch jobs at a time, until none is left; the clock covers
// the drain. Reports jobs/s and the server's CPU per job.
func drainCeiling(b *testing.B, pool *pgxpool.Pool, batch int) {
	ctx := context.Background()
	schema := pgSchema(b, pool)
	s, err := postgres.New(ctx, pool, postgres.Options{Schema: schema, VacuumAfter: postgres.NoVacuum})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	q, err := queue.New(s, queue.Config{})
	if err != nil {
		b.Fatal(err)
	}
	n := b.N
	enqueueNoops(b, q, n, drainInsertBatch)
	stmt := ceilingSQL(schema + ".stagger_jobs")
	var left atomic.Int64
	left.Store(int64(n))
	settle(b, pool)
	cpu := pgCPU(b, pool)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range ceilingClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Load() > 0 {
				now := time.Now().UnixMilli()
				bt := &pgx.Batch{}
				// The claim's own plan setting (postgres.ClaimPlan): an
				// ordered walk of the due index, whatever the statistics.
				bt.Queue(`SELECT set_config('enable_sort', 'off', true)`)
				bt.Queue(stmt, now, batch, queue.DefaultQueue)
				br := pool.SendBatch(ctx, bt)
				_, err := br.Exec()
				var took int64
				if err == nil {
					ct, e := br.Exec()
					took, err = ct.RowsAffected(), e
				}
				if cerr := br.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					b.Error(err)
					return
				}
				left.Add(-took)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	report(b)
	cpu()
	if st, _ := q.Stats(ctx); st.Done != int64(n) {
		b.Fatalf("done %d of %d", st.Done, n)
	}
}

// ceilingSQL claims up to $2 due jobs of queue $3 at now $1, as stagger's
// claim selects its pending ones (stagger_jobs_pending, in order, SKIP
// LOCKED; it has no lease to take back, so it reads no leased range), and
// completes them in the same statement: attempts counted, state done,
// finished. It reads the payload, as a queue must to run a job, and finds
// the locked rows by tuple ID, as stagger's claim does, all in one TID
// scan (with no join: it needs nothing else of the locked rows).
func ceilingSQL(table string) string {
	return `WITH c AS (
			SELECT ctid AS t FROM ` + table + `
			WHERE queue = $3 AND state = 'pending' AND available_at <= $1 AND attempts < max_attempts AND deadline > $1
			ORDER BY available_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE ` + table + ` j SET state = 'done', attempts = j.attempts + 1, lease_until = 0, finished_at = $1, updated_at = $1
		WHERE j.ctid = ANY(ARRAY(SELECT t FROM c))
		RETURNING j.id, j.payload`
}

// countStore counts the claims of a store and the jobs they took, for the
// jobs/claim a drain reports (the batch size the Worker used), and the
// time spent waiting for claims and for outcome commits of their own, per
// job (claim-µs/job, record-µs/job): a claim loop waits for its claims
// one at a time, so claim-µs/job near the drain's µs/job says the claim's
// round trip bounds the drain.
type countStore struct {
	*postgres.Store
	claims, jobs atomic.Int64
	// claimNs and recordNs are the time spent in claims (with their
	// outcomes, RecordAndClaim) and in outcome commits of their own.
	claimNs, recordNs atomic.Int64
}

func (c *countStore) Claim(ctx context.Context, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	start := time.Now()
	jobs, err := c.Store.Claim(ctx, name, now, leaseUntil, limit)
	c.claimNs.Add(int64(time.Since(start)))
	c.count(len(jobs))
	return jobs, err
}

func (c *countStore) RecordAndClaim(ctx context.Context, outcomes []queue.Outcome, name string, now, leaseUntil int64, limit int) ([]queue.Job, error) {
	start := time.Now()
	jobs, err := c.Store.RecordAndClaim(ctx, outcomes, name, now, leaseUntil, limit)
	c.claimNs.Add(int64(time.Since(start)))
	c.count(len(jobs))
	return jobs, err
}

func (c *countStore) Record(ctx context.Context, outcomes []queue.Outcome) error {
	start := time.Now()
	err := c.Store.Record(ctx, outcomes)
	c.recordNs.Add(int64(time.Since(start)))
	return err
}

func (c *countStore) count(n int) {
	if n > 0 {
		c.claims.Add(1)
		c.jobs.Add(int64(n))
	}
}

// report reports jobs/claim, the mean size of the claims that took a
// job, and claim-µs/job and record-µs/job.
func (c *countStore) report(b *testing.B) {
	if k := c.claims.Load(); k > 0 {
		b.ReportMetric(float64(c.jobs.Load())/float64(k), "jobs/claim")
	}
	b.ReportMetric(float64(c.claimNs.Load())/1e3/float64(b.N), "claim-µs/job")
	b.ReportMetric(float64(c.recordNs.Load())/1e3/float64(b.N), "record-µs/job")
}
