package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// MaxRedriveRate bounds Redrive.Rate, in jobs per second.
const MaxRedriveRate = 10000

// Redrive selects dead jobs and says how Queue.Redrive requeues them.
type Redrive struct {
	// Reason selects the dead jobs of one reason; "" selects every reason.
	Reason DeadReason
	// OlderThan and NewerThan select by how long ago the job died
	// (FinishedAt); zero means no bound.
	OlderThan, NewerThan time.Duration
	// Limit is the most jobs to requeue; 0 means all that match.
	Limit int
	// Grant is the attempts each job is given on top of those it spent
	// (1 to MaxMaxAttempts), as Queue.Requeue.
	Grant int
	// Deadline is each job's new deadline, from the moment it is requeued.
	Deadline time.Duration
	// Rate is how many jobs are requeued per second (at most
	// MaxRedriveRate): job i is requeued i/Rate seconds after the first,
	// so a dependency that just recovered is not handed every dead job at
	// once.
	Rate float64
	// DryRun selects and reports the jobs but changes nothing and does not
	// wait.
	DryRun bool
	// OnJob, when set, receives each job requeued (as stored after the
	// requeue) or, in a dry run, each job selected.
	OnJob func(Job)
}

// RedriveResult counts what Queue.Redrive did.
type RedriveResult struct {
	Requeued int // jobs requeued (selected, in a dry run)
	// Skipped are selected jobs that were no longer dead when their turn
	// came (requeued or deleted by someone else).
	Skipped int
}

func (r Redrive) check() error {
	switch {
	case r.Reason != "" && r.Reason != Exhausted && r.Reason != DeadlineReached && r.Reason != PermanentFailure:
		return fmt.Errorf("%w: reason must be %s, %s or %s, got %q", ErrInvalid, Exhausted, DeadlineReached, PermanentFailure, r.Reason)
	case r.OlderThan < 0 || r.OlderThan > MaxDuration, r.NewerThan < 0 || r.NewerThan > MaxDuration:
		return fmt.Errorf("%w: older-than and newer-than must be in [0, %v]", ErrInvalid, MaxDuration)
	case r.NewerThan > 0 && r.NewerThan <= r.OlderThan:
		return fmt.Errorf("%w: newer-than (%v) must be longer than older-than (%v)", ErrInvalid, r.NewerThan, r.OlderThan)
	case r.Limit < 0:
		return fmt.Errorf("%w: limit must be >= 0 (0 means all), got %d", ErrInvalid, r.Limit)
	case r.Grant < 1 || r.Grant > MaxMaxAttempts:
		return fmt.Errorf("%w: attempts (granted) must be in [1, %d], got %d", ErrInvalid, MaxMaxAttempts, r.Grant)
	case r.Deadline < time.Millisecond || r.Deadline > MaxDuration:
		return fmt.Errorf("%w: deadline must be in [1ms, %v], got %v", ErrInvalid, MaxDuration, r.Deadline)
	case math.IsNaN(r.Rate) || r.Rate <= 0 || r.Rate > MaxRedriveRate:
		return fmt.Errorf("%w: rate must be in (0, %d] jobs/s, got %v", ErrInvalid, MaxRedriveRate, r.Rate)
	}
	return nil
}

// selects reports whether dead job j matches r at now.
func (r Redrive) selects(j Job, now int64) bool {
	age := now - j.FinishedAt
	return (r.Reason == "" || j.DeadReason == r.Reason) &&
		(r.OlderThan == 0 || age > r.OlderThan.Milliseconds()) &&
		(r.NewerThan == 0 || age < r.NewerThan.Milliseconds())
}

// redrivePage is how many dead jobs one listing reads.
const redrivePage = 500

// Redrive requeues the dead jobs r selects, in ID order, at r.Rate jobs
// per second, each with r.Grant new attempts and a deadline r.Deadline
// after its requeue (Queue.Requeue). It stops when ctx is done or at the
// first store error, returning what it did so far.
func (q *Queue) Redrive(ctx context.Context, r Redrive) (RedriveResult, error) {
	var res RedriveResult
	if err := r.check(); err != nil {
		return res, err
	}
	interval := time.Duration(float64(time.Second) / r.Rate)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var next time.Time
	after := ""
	for {
		page, err := q.Dead(ctx, after, redrivePage)
		if err != nil {
			return res, err
		}
		now := q.now()
		for _, j := range page {
			after = j.ID
			if !r.selects(j, now) {
				continue
			}
			if r.Limit > 0 && res.Requeued == r.Limit {
				return res, nil
			}
			if r.DryRun {
				res.Requeued++
				if r.OnJob != nil {
					r.OnJob(j)
				}
				continue
			}
			if wait := time.Until(next); !next.IsZero() && wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-ctx.Done():
					return res, ctx.Err()
				case <-timer.C:
				}
			}
			if err := ctx.Err(); err != nil {
				return res, err
			}
			if next.IsZero() {
				next = time.Now()
			}
			next = next.Add(interval)
			rq, err := q.Requeue(ctx, j.ID, r.Grant, addMs(q.now(), ceilMs(r.Deadline)))
			switch {
			case errors.Is(err, ErrNotDead), errors.Is(err, ErrNotFound):
				res.Skipped++
				continue
			case err != nil:
				return res, err
			}
			res.Requeued++
			if r.OnJob != nil {
				r.OnJob(rq)
			}
		}
		if len(page) < redrivePage {
			return res, nil
		}
	}
}
