package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/staggerhq/stagger/internal/queuesql"
	"github.com/staggerhq/stagger/queue"
)

var _ queue.AdminStore = (*Store)(nil)

// opsSchema are the statements that create the operator's tables and the
// listing index, run by migrate (each IF NOT EXISTS: an existing table
// gets them on the first writing start).
//
// stagger_jobs_list_unleased serves Search and List of every state but
// leased: (queue, state) then the ID in byte order (COLLATE "C", whatever
// the database's collation), so the first page of a state is an index
// range scan however many jobs the queue holds, and an ID prefix is a
// range of it. A claim or an extension, which writes an entry in every
// index whose condition the new row meets, writes none here: leased jobs
// are listed and counted on stagger_jobs_leased instead (a queue's leases
// are as many as its jobs in flight). It replaces stagger_jobs_list (every
// state) and stagger_jobs_by_state before it (every state, the ID in the
// database's collation).
func (s *Store) opsSchema() []string {
	return []string{
		`CREATE INDEX IF NOT EXISTS stagger_jobs_list_unleased ON ` + s.jobs + ` (queue, state, id COLLATE "C") WHERE state <> 'leased'`,
		`DROP INDEX IF EXISTS ` + s.prefix() + `stagger_jobs_list`,
		`DROP INDEX IF EXISTS ` + s.prefix() + `stagger_jobs_by_state`,
		`CREATE TABLE IF NOT EXISTS ` + s.eventsT + ` (
			seq    bigserial PRIMARY KEY,
			job_id text NOT NULL,
			at     bigint NOT NULL,
			actor  text NOT NULL,
			action text NOT NULL,
			detail text NOT NULL DEFAULT '')`,
		`CREATE INDEX IF NOT EXISTS stagger_job_events_job ON ` + s.eventsT + ` (job_id, seq)`,
		`CREATE TABLE IF NOT EXISTS ` + s.pausedT + ` (
			queue text PRIMARY KEY,
			at    bigint NOT NULL,
			actor text NOT NULL)`,
	}
}

// checkOps notes, for a read-only store, whether the operator's tables
// exist (a table of an older version has none: no history, no pauses).
func (s *Store) checkOps(ctx context.Context) error {
	var found bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL`, s.eventsT, s.pausedT).Scan(&found); err != nil {
		return err
	}
	s.noOps = !found
	return nil
}

// notPaused is the claims' condition that the queue named by the
// parameter p is not paused: an uncorrelated subquery, run once per
// claim (a one-time filter), which leaves the claim's plan as it is.
func (s *Store) notPaused(p string) string {
	return `NOT EXISTS (SELECT 1 FROM ` + s.pausedT + ` WHERE queue = ` + p + `)`
}

// SearchSQL is Search's query and arguments (for plan checks).
func (s *Store) SearchSQL(q queue.Search) (string, []any) {
	return queuesql.SearchSQL(s.jobs, s.readCols, true, q)
}

// Search implements queue.AdminStore, on the stagger_jobs_list_unleased
// index: one ID-ordered range scan per state (leased jobs: the queue's
// leases on stagger_jobs_leased, sorted). An age of done or dead jobs is a
// range of stagger_jobs_finished instead when it holds fewer than 20,000
// jobs (counted first, an index-only scan): they are read and sorted by
// ID, so that a rare age does not walk the whole state. An age of
// pending or leased jobs, which no index the claims keep holds, is a
// filter on the walk.
func (s *Store) Search(ctx context.Context, q queue.Search) ([]queue.Job, error) {
	if q.Limit < 1 || len(q.States) == 0 {
		return nil, nil
	}
	text, args := s.SearchSQL(q)
	jobs, err := s.query(ctx, text, args...)
	if q.NoPayload {
		for i := range jobs {
			jobs[i].Payload = nil
		}
	}
	return jobs, err
}

func (s *Store) addEvent(ctx context.Context, tx pgx.Tx, id string, e queue.Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+s.eventsT+` (job_id, at, actor, action, detail) VALUES ($1, $2, $3, $4, $5)`,
		id, e.At, e.Actor, e.Action, e.Detail)
	return err
}

// refusal is the error of an action refused for the job's state
// (ErrNotFound when there is no job).
func (s *Store) refusal(ctx context.Context, tx pgx.Tx, id string, other error) error {
	var state string
	err := tx.QueryRow(ctx, `SELECT state FROM `+s.jobs+` WHERE id = $1`, id).Scan(&state)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return queue.ErrNotFound
	case err != nil:
		return err
	case state == string(queue.Leased):
		return queue.ErrLeased
	}
	return other
}

// Cancel implements queue.AdminStore. The update's condition is checked
// again on the row a concurrent claim or cancel committed (READ
// COMMITTED), so of two at once only one applies.
func (s *Store) Cancel(ctx context.Context, id string, e queue.Event) (queue.Job, error) {
	var j queue.Job
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		j, err = scanJob(tx.QueryRow(ctx, `UPDATE `+s.jobs+` SET state = 'dead', dead_reason = 'canceled',
			finished_at = $2, updated_at = $2, lease_until = 0 WHERE id = $1 AND state = 'pending' RETURNING `+cols, id, e.At))
		if errors.Is(err, pgx.ErrNoRows) {
			return s.refusal(ctx, tx, id, queue.ErrNotPending)
		}
		if err != nil {
			return err
		}
		return s.addEvent(ctx, tx, id, e)
	})
	return j, err
}

// Delete implements queue.AdminStore.
func (s *Store) Delete(ctx context.Context, id string) (queue.Job, error) {
	var j queue.Job
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		j, err = scanJob(tx.QueryRow(ctx, `DELETE FROM `+s.jobs+` WHERE id = $1 AND state <> 'leased' RETURNING `+cols, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return s.refusal(ctx, tx, id, queue.ErrLeased)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM `+s.eventsT+` WHERE job_id = $1`, id)
		return err
	})
	return j, err
}

// RequeueEvent implements queue.AdminStore.
func (s *Store) RequeueEvent(ctx context.Context, id string, grant int, deadline, now int64, e queue.Event) (queue.Job, error) {
	var j queue.Job
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if j, err = s.requeueTx(ctx, tx, id, grant, deadline, now); err != nil {
			return err
		}
		return s.addEvent(ctx, tx, id, e)
	})
	return j, err
}

// SetPaused implements queue.AdminStore. A resume notifies the
// listeners, so idle workers of every process look at once.
func (s *Store) SetPaused(ctx context.Context, name string, paused bool, e queue.Event) (bool, error) {
	var changed bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if paused {
			tag, err := tx.Exec(ctx, `INSERT INTO `+s.pausedT+` (queue, at, actor) VALUES ($1, $2, $3) ON CONFLICT (queue) DO NOTHING`,
				name, e.At, e.Actor)
			changed = tag.RowsAffected() > 0
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM `+s.pausedT+` WHERE queue = $1`, name)
		if changed = tag.RowsAffected() > 0; err != nil || !changed {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, s.channel)
		return err
	})
	if err != nil {
		return false, err
	}
	return changed, nil
}

// Pauses implements queue.AdminStore.
func (s *Store) Pauses(ctx context.Context) ([]queue.Pause, error) {
	if s.noOps {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT queue, at, actor FROM `+s.pausedT+` ORDER BY queue COLLATE "C"`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (queue.Pause, error) {
		var p queue.Pause
		err := r.Scan(&p.Queue, &p.At, &p.Actor)
		return p, err
	})
}

// History implements queue.AdminStore.
func (s *Store) History(ctx context.Context, id string) ([]queue.Event, error) {
	if s.noOps {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT at, actor, action, detail FROM `+s.eventsT+` WHERE job_id = $1 ORDER BY seq`, id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (queue.Event, error) {
		var e queue.Event
		err := r.Scan(&e.At, &e.Actor, &e.Action, &e.Detail)
		return e, err
	})
}
