package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// OldestDue implements queue.OldestDuer: the smallest available_at of the
// queue's pending jobs that are due and can still run, read from the
// index the claims use (one index scan; no job is counted).
func (s *Store) OldestDue(ctx context.Context, name string, now int64) (int64, bool, error) {
	var at int64
	err := s.pool.QueryRow(ctx, s.oldestDueSQL(), name, now).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return at, err == nil, err
}

// oldestDueSQL is OldestDue's query: $1 the queue, $2 now: the queue's
// range of stagger_jobs_pending, walked in available_at order.
func (s *Store) oldestDueSQL() string {
	return `SELECT available_at FROM ` + s.jobs + `
		WHERE queue = $1 AND state = 'pending' AND available_at <= $2
		AND attempts < max_attempts AND deadline > $2
		ORDER BY available_at LIMIT 1`
}
