package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/staggerhq/stagger/internal/queuesql"
	"github.com/staggerhq/stagger/queue"
)

var _ queue.AdminStore = (*Store)(nil)

// Search implements queue.AdminStore, on the (queue, state, id) index.
func (s *Store) Search(ctx context.Context, q queue.Search) ([]queue.Job, error) {
	if q.Limit < 1 || len(q.States) == 0 {
		return nil, nil
	}
	text, args := queuesql.SearchSQL("stagger_jobs", s.readCols, false, q)
	jobs, err := s.query(ctx, text, args...)
	if q.NoPayload {
		for i := range jobs {
			jobs[i].Payload = nil
		}
	}
	return jobs, err
}

func addEvent(ctx context.Context, tx *sql.Tx, id string, e queue.Event) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO stagger_job_events (job_id, at, actor, action, detail) VALUES (?, ?, ?, ?, ?)`,
		id, e.At, e.Actor, e.Action, e.Detail)
	return err
}

// refusal is the error of an action refused for the job's state
// (ErrNotFound when there is no job).
func refusal(ctx context.Context, tx *sql.Tx, id string, other error) error {
	var state string
	err := tx.QueryRowContext(ctx, `SELECT state FROM stagger_jobs WHERE id = ?`, id).Scan(&state)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return queue.ErrNotFound
	case err != nil:
		return err
	case state == string(queue.Leased):
		return queue.ErrLeased
	}
	return other
}

// Cancel implements queue.AdminStore.
func (s *Store) Cancel(ctx context.Context, id string, e queue.Event) (queue.Job, error) {
	var j queue.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		j, err = scan(tx.QueryRowContext(ctx, `UPDATE stagger_jobs SET state = 'dead', dead_reason = 'canceled',
			finished_at = ?2, updated_at = ?2, lease_until = 0 WHERE id = ?1 AND state = 'pending' RETURNING `+cols, id, e.At))
		if errors.Is(err, sql.ErrNoRows) {
			return refusal(ctx, tx, id, queue.ErrNotPending)
		}
		if err != nil {
			return err
		}
		return addEvent(ctx, tx, id, e)
	})
	return j, err
}

// Delete implements queue.AdminStore.
func (s *Store) Delete(ctx context.Context, id string) (queue.Job, error) {
	var j queue.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		j, err = scan(tx.QueryRowContext(ctx, `DELETE FROM stagger_jobs WHERE id = ? AND state <> 'leased' RETURNING `+cols, id))
		if errors.Is(err, sql.ErrNoRows) {
			return refusal(ctx, tx, id, queue.ErrLeased)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM stagger_job_events WHERE job_id = ?`, id)
		return err
	})
	return j, err
}

// RequeueEvent implements queue.AdminStore.
func (s *Store) RequeueEvent(ctx context.Context, id string, grant int, deadline, now int64, e queue.Event) (queue.Job, error) {
	var j queue.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		if j, err = requeueTx(ctx, tx, id, grant, deadline, now); err != nil {
			return err
		}
		return addEvent(ctx, tx, id, e)
	})
	return j, err
}

// SetPaused implements queue.AdminStore.
func (s *Store) SetPaused(ctx context.Context, name string, paused bool, e queue.Event) (bool, error) {
	var n int64
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var res sql.Result
		var err error
		if paused {
			res, err = tx.ExecContext(ctx, `INSERT INTO stagger_paused (queue, at, actor) VALUES (?, ?, ?) ON CONFLICT (queue) DO NOTHING`,
				name, e.At, e.Actor)
		} else {
			res, err = tx.ExecContext(ctx, `DELETE FROM stagger_paused WHERE queue = ?`, name)
		}
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if n > 0 && !paused {
		s.idle.Store(false)
	}
	return n > 0, err
}

// Pauses implements queue.AdminStore.
func (s *Store) Pauses(ctx context.Context) ([]queue.Pause, error) {
	if s.noOps {
		return nil, nil
	}
	rows, err := s.r.QueryContext(ctx, `SELECT queue, at, actor FROM stagger_paused ORDER BY queue`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []queue.Pause
	for rows.Next() {
		var p queue.Pause
		if err := rows.Scan(&p.Queue, &p.At, &p.Actor); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// History implements queue.AdminStore.
func (s *Store) History(ctx context.Context, id string) ([]queue.Event, error) {
	if s.noOps {
		return nil, nil
	}
	rows, err := s.r.QueryContext(ctx, `SELECT at, actor, action, detail FROM stagger_job_events WHERE job_id = ? ORDER BY seq`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []queue.Event
	for rows.Next() {
		var e queue.Event
		if err := rows.Scan(&e.At, &e.Actor, &e.Action, &e.Detail); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
