package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/staggerhq/stagger/queue/queuetest"
)

// BenchmarkRecordAndClaimListIndex is BenchmarkRecordAndClaim with the
// listing index (with) and without it (without, dropped after the
// migration), side by side: the cost of the index to a worker's turn
// (inserting the jobs, claiming them, recording their outcomes). It
// reports the index blocks each turn touches (idx_blks, from
// pg_statio_user_indexes: load-independent) besides the time.
func BenchmarkRecordAndClaimListIndex(b *testing.B) {
	for _, keep := range []bool{true, false} {
		name := "with"
		if !keep {
			name = "without"
		}
		b.Run(name, func(b *testing.B) {
			s := newStore(b)
			ctx := context.Background()
			schema := strings.Trim(s.Schema(), `"`)
			if !keep {
				if _, err := s.Pool().Exec(ctx, `DROP INDEX `+s.Schema()+`.stagger_jobs_list_unleased`); err != nil {
					b.Fatal(err)
				}
			}
			blocks := func() int64 {
				// Every backend of the pool flushes its counters now
				// (PostgreSQL 15's pg_stat_force_next_flush), not after
				// a second idle.
				for _, c := range s.Pool().AcquireAllIdle(ctx) {
					_, err := c.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
					c.Release()
					if err != nil {
						b.Fatal(err)
					}
				}
				var n int64
				if err := s.Pool().QueryRow(ctx, `SELECT coalesce(sum(idx_blks_hit + idx_blks_read), 0)
					FROM pg_statio_user_indexes WHERE schemaname = $1 AND relname = 'stagger_jobs'`, schema).Scan(&n); err != nil {
					b.Fatal(err)
				}
				return n
			}
			before := blocks()
			queuetest.BenchRecordAndClaim(b, s)
			b.StopTimer()
			b.ReportMetric(float64(blocks()-before)/float64(b.N), "idx_blks/turn")
		})
	}
}
