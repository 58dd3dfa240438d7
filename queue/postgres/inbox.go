package postgres

import (
	"context"
	"errors"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// Inbox is receiver-side deduplication on the store's database: the effect
// for a message ID is applied once even when the message is delivered twice.
//
// Process (the queue.Inbox contract) suits effects outside the database: it
// marks the ID as running for Options.InboxLease, runs fn outside any
// transaction and marks the ID done when fn succeeds; a process that dies
// between fn's effect and the mark leaves the ID to run again after the
// lease. ProcessTx makes the effect and the mark one transaction: exactly
// once for effects written to the same database.
type Inbox struct{ s *Store }

var _ queue.Inbox = (*Inbox)(nil)

var errInProgress = retry.Retryable(queue.ErrInProgress)

// Process implements queue.Inbox.
func (in *Inbox) Process(ctx context.Context, id string, fn func(ctx context.Context) error) (bool, error) {
	if err := queue.ValidateID(id); err != nil {
		return false, err
	}
	s := in.s
	token := rand.Int64()
	now := s.opts.Now()
	// Take the ID unless it is done or held by a live delivery.
	var state string
	err := s.pool.QueryRow(ctx, `INSERT INTO `+s.inboxT+` AS i (id, state, token, lease_until) VALUES ($1, 'running', $2, $3)
		ON CONFLICT (id) DO UPDATE SET state = 'running', token = $2, lease_until = $3
			WHERE i.state = 'running' AND i.lease_until <= $4
		RETURNING state`, id, token, now+s.opts.InboxLease.Milliseconds(), now).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		// Not taken: done, or running elsewhere.
		err = s.pool.QueryRow(ctx, `SELECT state FROM `+s.inboxT+` WHERE id = $1`, id).Scan(&state)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return false, errInProgress // it just went away: a failed delivery; try again
		case err != nil:
			return false, err
		case state == "done":
			return true, nil
		}
		return false, errInProgress
	}
	if err != nil {
		return false, err
	}
	mctx := context.WithoutCancel(ctx)
	release := func() error {
		_, err := s.pool.Exec(mctx, `DELETE FROM `+s.inboxT+` WHERE id = $1 AND token = $2 AND state = 'running'`, id, token)
		return err
	}
	returned := false
	defer func() {
		if !returned { // fn panicked: free the id for the next delivery
			release()
		}
	}()
	ferr := fn(ctx)
	returned = true
	if ferr != nil {
		// fn's error unchanged (the queue.Inbox contract); a failed
		// release only delays the next delivery until the lease expires.
		release()
		return false, ferr
	}
	_, err = s.pool.Exec(mctx, `UPDATE `+s.inboxT+` SET state = 'done', done_at = $3 WHERE id = $1 AND token = $2`, id, token, s.opts.Now())
	return false, err
}

// ProcessTx runs fn inside one transaction together with the inbox record
// of id: if id was processed before, fn is not called and duplicate is true;
// otherwise fn's writes (through tx) and the record commit together or not
// at all. A concurrent ProcessTx of the same id waits for this one's
// transaction and then sees it as a duplicate.
func (in *Inbox) ProcessTx(ctx context.Context, id string, fn func(ctx context.Context, tx pgx.Tx) error) (duplicate bool, err error) {
	if err := queue.ValidateID(id); err != nil {
		return false, err
	}
	s := in.s
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The insert takes the row lock: a concurrent delivery blocks here.
		tag, err := tx.Exec(ctx, `INSERT INTO `+s.inboxT+` AS i (id, state, token, lease_until, done_at) VALUES ($1, 'done', 0, 0, $2)
			ON CONFLICT (id) DO UPDATE SET state = 'done', done_at = $2 WHERE i.state = 'running'`, id, s.opts.Now())
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			duplicate = true
			return nil
		}
		return fn(ctx, tx)
	})
	return duplicate, err
}

// Processed reports whether id was processed successfully.
func (in *Inbox) Processed(ctx context.Context, id string) (bool, error) {
	var state string
	err := in.s.pool.QueryRow(ctx, `SELECT state FROM `+in.s.inboxT+` WHERE id = $1`, id).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return state == "done", err
}
