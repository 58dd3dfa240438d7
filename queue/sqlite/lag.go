package sqlite

import (
	"context"
	"database/sql"
	"errors"
)

// OldestDue implements queue.OldestDuer: the smallest available_at of the
// queue's pending jobs that are due and can still run, read from the
// index the claims use (one index seek; no job is counted).
func (s *Store) OldestDue(ctx context.Context, name string, now int64) (int64, bool, error) {
	var at int64
	err := s.r.QueryRowContext(ctx, `SELECT available_at FROM stagger_jobs
		WHERE queue = ? AND state IN ('pending', 'leased') AND state = 'pending' AND available_at <= ?
		AND attempts < max_attempts AND deadline > ?
		ORDER BY available_at LIMIT 1`, name, now, now).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return at, err == nil, err
}
