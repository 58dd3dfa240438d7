package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"

	"github.com/staggerhq/stagger/queue"
	"github.com/staggerhq/stagger/retry"
)

// Inbox is receiver-side deduplication on the store's database: the effect
// for a message ID is applied once even when the message is delivered twice.
//
// Process (the queue.Inbox contract) suits effects outside the database: it
// marks the ID as running for Options.InboxLease, runs fn outside any
// transaction and marks the ID done when fn succeeds. A process that dies
// after fn's effect and before the mark leaves the ID to be run again once
// the lease expires — use ProcessTx when the effect can be written to the
// same database, which makes effect and mark one transaction: exactly once.
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
	dup := false
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now := s.opts.Now()
		var state string
		var leaseUntil int64
		err := tx.QueryRowContext(ctx, `SELECT state, lease_until FROM stagger_inbox WHERE id = ?`, id).Scan(&state, &leaseUntil)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case state == "done":
			dup = true
			return nil
		case leaseUntil > now:
			return errInProgress
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO stagger_inbox (id, state, token, lease_until) VALUES (?1, 'running', ?2, ?3)
			ON CONFLICT (id) DO UPDATE SET state = 'running', token = ?2, lease_until = ?3`,
			id, token, now+s.opts.InboxLease.Milliseconds())
		return err
	})
	if err != nil || dup {
		return dup, err
	}
	mctx := context.WithoutCancel(ctx)
	release := func() error {
		_, err := s.w.ExecContext(mctx, `DELETE FROM stagger_inbox WHERE id = ? AND token = ? AND state = 'running'`, id, token)
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
		release()
		return false, ferr
	}
	_, err = s.w.ExecContext(mctx, `UPDATE stagger_inbox SET state = 'done', done_at = ?3 WHERE id = ?1 AND token = ?2`, id, token, s.opts.Now())
	return false, err
}

// ProcessTx runs fn inside one write transaction together with the inbox
// record of id: if id was processed before, fn is not called and duplicate
// is true; otherwise fn's writes (through tx) and the record commit
// together or not at all. The transaction holds SQLite's write lock while fn
// runs, so keep fn short and free of outside calls.
func (in *Inbox) ProcessTx(ctx context.Context, id string, fn func(ctx context.Context, tx *sql.Tx) error) (duplicate bool, err error) {
	if err := queue.ValidateID(id); err != nil {
		return false, err
	}
	s := in.s
	err = s.tx(ctx, func(tx *sql.Tx) error {
		var state string
		err := tx.QueryRowContext(ctx, `SELECT state FROM stagger_inbox WHERE id = ?`, id).Scan(&state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case state == "done":
			duplicate = true
			return nil
		}
		if err := fn(ctx, tx); err != nil {
			return err
		}
		now := s.opts.Now()
		_, err = tx.ExecContext(ctx, `INSERT INTO stagger_inbox (id, state, token, lease_until, done_at) VALUES (?1, 'done', 0, 0, ?2)
			ON CONFLICT (id) DO UPDATE SET state = 'done', done_at = ?2`, id, now)
		return err
	})
	return duplicate, err
}

// Processed reports whether id was processed successfully.
func (in *Inbox) Processed(ctx context.Context, id string) (bool, error) {
	var state string
	err := in.s.r.QueryRowContext(ctx, `SELECT state FROM stagger_inbox WHERE id = ?`, id).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return state == "done", err
}
