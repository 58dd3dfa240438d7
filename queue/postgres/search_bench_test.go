package postgres_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/queue/postgres"
)

// bigRows is the size of the table of BenchmarkSearchFirstPage.
const bigRows = 1_000_000

var (
	bigOnce  sync.Once
	bigStore *postgres.Store
	bigQueue *queue.Queue
)

// bigTable fills a fresh schema, once per run, with bigRows jobs of one
// queue: 70% done, 20% dead (exhausted, deadline, permanent in turn; one
// in 10,000 cancelled), 8% pending, 2% leased, enqueued one a second
// over the last 11.6 days, then analyzes it.
func bigTable(b *testing.B) (*postgres.Store, *queue.Queue) {
	bigOnce.Do(func() {
		s := newStore(b)
		ctx := context.Background()
		rows := bigRows
		if n, err := strconv.Atoi(os.Getenv("STAGGER_BENCH_ROWS")); err == nil && n > 0 {
			rows = n // a quick check of the benchmark itself
		}
		now := time.Now().UnixMilli()
		_, err := s.Pool().Exec(ctx, `INSERT INTO `+s.Schema()+`.stagger_jobs
			(id, payload, attempts, max_attempts, available_at, deadline, state, dead_reason, last_error, created_at, updated_at, finished_at, queue)
			SELECT 'job-' || lpad(g::text, 7, '0'), '\x7b7d'::bytea, 1, 5, $1::bigint - (g % 1000), $1::bigint + 86400000,
				CASE WHEN g % 100 < 70 THEN 'done' WHEN g % 100 < 90 THEN 'dead' WHEN g % 100 < 98 THEN 'pending' ELSE 'leased' END,
				CASE WHEN g % 100 NOT BETWEEN 70 AND 89 THEN ''
					WHEN g % 10000 = 75 THEN 'canceled'
					ELSE (ARRAY['exhausted', 'deadline', 'permanent'])[g % 3 + 1] END,
				'', $1::bigint - ($2::bigint - g) * 1000, $1::bigint, CASE WHEN g % 100 < 90 THEN $1::bigint - ($2::bigint - g) * 500 ELSE 0 END, 'big'
			FROM generate_series(1, $2::int) g`, now, rows)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Pool().Exec(ctx, `VACUUM ANALYZE `+s.Schema()+`.stagger_jobs`); err != nil {
			b.Fatal(err)
		}
		q, err := queue.New(s, queue.Config{Queue: "big"})
		if err != nil {
			b.Fatal(err)
		}
		bigStore, bigQueue = s, q
	})
	if bigStore == nil {
		b.Fatal("the big table could not be made")
	}
	return bigStore, bigQueue
}

// BenchmarkSearchFirstPage times Queue.Jobs (one op: one page of 100)
// on a queue of 1,000,000 jobs, and logs each case's plan and server
// time (EXPLAIN ANALYZE). Run it alone, under the benchmark lock:
//
//	flock /tmp/bench.lock go test -run '^$' -bench SearchFirstPage -benchtime 200x -v
func BenchmarkSearchFirstPage(b *testing.B) {
	s, q := bigTable(b)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		f    queue.Filter
	}{
		{"pending", queue.Filter{State: queue.Pending}},
		{"dead", queue.Filter{State: queue.Dead}},
		{"all_states", queue.Filter{}},
		{"dead_exhausted_prefix", queue.Filter{Reason: queue.Exhausted, IDPrefix: "job-05"}},
		{"page_in_the_middle", queue.Filter{State: queue.Done, After: "job-0500000"}},
		{"pending_older_than_1d", queue.Filter{State: queue.Pending, OlderThan: 24 * time.Hour}},
		// Worst cases: a filter the index does not hold that few rows pass
		// (100 cancelled among 200,000 dead; the newest hour of 1M jobs).
		{"rare_reason_canceled", queue.Filter{Reason: queue.Canceled}},
		{"newer_than_1h", queue.Filter{NewerThan: time.Hour}},
	} {
		b.Run(c.name, func(b *testing.B) {
			c.f.Limit = 100
			if _, done := explained.LoadOrStore(c.name, true); !done {
				explain(b, s, q, c.f)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := q.Jobs(ctx, c.f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var explained sync.Map // the cases whose plan was logged

// explain logs the plan's shape and the server's execution time of the
// search f on q.
func explain(b *testing.B, s *postgres.Store, q *queue.Queue, f queue.Filter) {
	b.Helper()
	sq := queue.Search{Queue: q.Config().Queue, States: queue.AllStates, Reason: f.Reason, IDPrefix: f.IDPrefix, After: f.After, Limit: f.Limit}
	switch {
	case f.State != "":
		sq.States = []queue.State{f.State}
	case f.Reason != "":
		sq.States = []queue.State{queue.Dead}
	}
	now := time.Now().UnixMilli()
	if f.OlderThan > 0 {
		sq.SinceBefore = now - f.OlderThan.Milliseconds()
	}
	if f.NewerThan > 0 {
		sq.SinceAfter = now - f.NewerThan.Milliseconds()
	}
	text, args := s.SearchSQL(sq)
	rows, err := s.Pool().Query(context.Background(), `EXPLAIN (ANALYZE, BUFFERS) `+text, args...)
	if err != nil {
		b.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	var keep []string
	for _, l := range lines {
		if strings.Contains(l, "Scan") || strings.Contains(l, "Execution Time") || strings.Contains(l, "Buffers") && len(keep) < 2 {
			keep = append(keep, strings.TrimSpace(l))
		}
	}
	b.Logf("%d rows; plan:\n%s", len(lines), strings.Join(keep, "\n"))
}
