package queue

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Retention defaults and bounds (WorkerConfig.RetainDone, RetainDead,
// PurgeBatch; Queue.Purge).
const (
	// DefaultRetainDone is how long a done job is kept after it finished.
	// While it is kept, enqueueing its ID again returns it (idempotent
	// enqueue); once deleted, the ID is free for a new job.
	DefaultRetainDone = 7 * 24 * time.Hour
	// DefaultRetainDead is how long a dead job is kept after it died, for
	// an operator to inspect and requeue it.
	DefaultRetainDead = 30 * 24 * time.Hour
	// KeepForever as a retention keeps the jobs for ever.
	KeepForever time.Duration = -1
	// DefaultPurgeBatch is how many jobs one purge transaction deletes.
	DefaultPurgeBatch = 1000
	// MaxPurgeBatch bounds a purge transaction.
	MaxPurgeBatch = 10000
	// maxPurgeRounds bounds the purge transactions of one maintenance pass
	// per state, so that a pass after a long pause does not run for long.
	maxPurgeRounds = 10
)

// ErrNoPurge: the store cannot delete finished jobs (it is not a Purger).
var ErrNoPurge = errors.New("queue: the store does not implement Purger")

// Purger is implemented by stores that delete finished jobs: the retention
// of done and dead jobs.
type Purger interface {
	// Purge deletes, in one transaction, up to limit jobs in state (Done or
	// Dead) whose FinishedAt < before, the longest finished first, and
	// returns how many it deleted. A job that is requeued meanwhile is not
	// deleted.
	Purge(ctx context.Context, state State, before int64, limit int) (int, error)
	// CountFinished counts the jobs in state whose FinishedAt < before.
	CountFinished(ctx context.Context, state State, before int64) (int64, error)
}

func checkPurge(state State, olderThan time.Duration, batch int) error {
	switch {
	case state != Done && state != Dead:
		return fmt.Errorf("%w: state must be done or dead, got %q", ErrInvalid, state)
	case olderThan < 0 || olderThan > MaxDuration:
		return fmt.Errorf("%w: older-than must be in [0, %v], got %v", ErrInvalid, MaxDuration, olderThan)
	case batch < 1 || batch > MaxPurgeBatch:
		return fmt.Errorf("%w: batch must be in [1, %d], got %d", ErrInvalid, MaxPurgeBatch, batch)
	}
	return nil
}

// purgeBefore is the FinishedAt bound of jobs finished more than olderThan
// before now.
func purgeBefore(now int64, olderThan time.Duration) int64 {
	return now - ceilMs(olderThan)
}

// Purge deletes the jobs in state (Done or Dead) that finished more than
// olderThan ago, in transactions of at most batch jobs (1 to
// MaxPurgeBatch), and returns how many it deleted. It stops at the first
// error (the batches before it stay deleted) and when ctx is done. It
// returns ErrNoPurge when the store is not a Purger.
func (q *Queue) Purge(ctx context.Context, state State, olderThan time.Duration, batch int) (int64, error) {
	if err := checkPurge(state, olderThan, batch); err != nil {
		return 0, err
	}
	p, ok := q.store.(Purger)
	if !ok {
		return 0, ErrNoPurge
	}
	before := purgeBefore(q.now(), olderThan)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := p.Purge(ctx, state, before, batch)
		total += int64(n)
		if err != nil || n < batch {
			return total, err
		}
	}
}

// Purgeable counts the jobs Purge would delete now: those in state (Done
// or Dead) that finished more than olderThan ago.
func (q *Queue) Purgeable(ctx context.Context, state State, olderThan time.Duration) (int64, error) {
	if err := checkPurge(state, olderThan, 1); err != nil {
		return 0, err
	}
	p, ok := q.store.(Purger)
	if !ok {
		return 0, ErrNoPurge
	}
	return p.CountFinished(ctx, state, purgeBefore(q.now(), olderThan))
}

// purgeRounds deletes up to maxPurgeRounds batches of jobs in state that
// finished more than keep ago: a Worker's retention.
func (q *Queue) purgeRounds(ctx context.Context, p Purger, state State, keep time.Duration, batch int) (int, error) {
	if keep == KeepForever {
		return 0, nil
	}
	before := purgeBefore(q.now(), keep)
	total := 0
	for range maxPurgeRounds {
		n, err := p.Purge(ctx, state, before, batch)
		total += n
		if err != nil || n < batch {
			return total, err
		}
	}
	return total, nil
}
