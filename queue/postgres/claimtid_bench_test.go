package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
)

// BenchmarkClaimTupleIDs claims turns of 1,000 jobs on one connection, in
// turn with the store's claim (all the locked rows' tuple IDs scanned at
// once, joined by hash: "once") and with the same statement joined by a
// nested loop, one TID scan a job ("each"; it was the store's claim
// before). Enqueueing and completing the jobs are not timed. It reports
// each one's time a claimed job and, when the server runs on this machine,
// its backend's CPU a job (/proc/<pid>/schedstat), and their ratios. One
// op is one job claimed each way.
func BenchmarkClaimTupleIDs(b *testing.B) {
	ctx := context.Background()
	const turn = 1000
	s := newStoreOpts(b, postgres.Options{VacuumAfter: postgres.NoVacuum})
	q, err := queue.New(s, queue.Config{})
	if err != nil {
		b.Fatal(err)
	}
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	cpu := func() (time.Duration, bool) {
		f, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			return 0, false // the server runs elsewhere
		}
		ns, err := strconv.ParseInt(strings.Fields(string(f))[0], 10, 64)
		return time.Duration(ns), err == nil
	}
	once := s.ClaimSQL()
	each := strings.Replace(once, "j.ctid = ANY(ARRAY(SELECT t FROM c)) AND ", "", 1)
	if each == once {
		b.Fatal("the claim has no scan of all its tuple IDs")
	}
	ways := []*struct {
		prologue, sql string
		took, cpu     time.Duration
	}{{prologue: postgres.ClaimAlone, sql: once}, {prologue: postgres.ClaimPlan, sql: each}}
	jobs := make([]queue.NewJob, turn)
	outs := make([]queue.Outcome, 0, turn)
	seq := 0
	local := true
	b.ResetTimer()
	for done := 0; done < b.N; done += turn {
		for _, w := range ways {
			b.StopTimer()
			for i := range jobs {
				jobs[i] = queue.NewJob{ID: fmt.Sprintf("job-%09d", seq), Payload: []byte("{}")}
				seq++
			}
			if _, err := q.EnqueueMany(ctx, jobs); err != nil {
				b.Fatal(err)
			}
			now := time.Now().UnixMilli()
			b.StartTimer()
			c0, ok := cpu()
			t0 := time.Now()
			batch := &pgx.Batch{}
			batch.Queue(w.prologue)
			batch.Queue(w.sql, now, now+60_000, turn, queue.DefaultQueue)
			br := conn.SendBatch(ctx, batch)
			if _, err := br.Exec(); err != nil {
				b.Fatal(err)
			}
			rows, err := br.Query()
			if err != nil {
				b.Fatal(err)
			}
			outs = outs[:0]
			for rows.Next() {
				var o queue.Outcome
				if err := rows.Scan(&o.ID, nil, &o.Attempt, nil, nil, nil, nil, nil, nil, nil, nil); err != nil {
					b.Fatal(err)
				}
				o.State, o.Now = queue.Done, now
				outs = append(outs, o)
			}
			if err := rows.Err(); err != nil {
				b.Fatal(err)
			}
			if err := br.Close(); err != nil {
				b.Fatal(err)
			}
			w.took += time.Since(t0)
			c1, ok1 := cpu()
			w.cpu += c1 - c0
			local = local && ok && ok1
			b.StopTimer()
			if len(outs) != turn {
				b.Fatalf("claimed %d of %d", len(outs), turn)
			}
			if err := s.Record(ctx, outs); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	n := float64((b.N + turn - 1) / turn * turn)
	perJob := func(d time.Duration) float64 { return d.Seconds() * 1e6 / n }
	b.ReportMetric(perJob(ways[0].took), "µs/job-once")
	b.ReportMetric(perJob(ways[1].took), "µs/job-each")
	b.ReportMetric(float64(ways[0].took)/float64(ways[1].took), "once/each")
	if local {
		b.ReportMetric(perJob(ways[0].cpu), "cpu-µs/job-once")
		b.ReportMetric(perJob(ways[1].cpu), "cpu-µs/job-each")
		b.ReportMetric(float64(ways[0].cpu)/float64(ways[1].cpu), "cpu-once/each")
	}
}
