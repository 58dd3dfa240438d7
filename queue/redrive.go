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
	// IDPrefix, when set, selects the jobs whose ID starts with it.
	IDPrefix string
	// Actor, when set, is recorded as who requeued each job (its
	// history); "" records none.
	Actor string
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
	case r.Reason != "" && ValidateReason(r.Reason) != nil:
		return ValidateReason(r.Reason)
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

// redrivePage is how many dead jobs one listing reads.
const redrivePage = 500

// Redrive requeues the dead jobs r selects, in ID order, at r.Rate jobs
// per second, each with r.Grant new attempts and a deadline r.Deadline
// after its requeue (Queue.Requeue). With Reason "" it selects the jobs
// that failed (exhausted, deadline, permanent), not those an operator
// cancelled. It stops when ctx is done or at the first store error,
// returning what it did so far.
func (q *Queue) Redrive(ctx context.Context, r Redrive) (RedriveResult, error) {
	if err := r.check(); err != nil {
		return RedriveResult{}, err
	}
	if r.Actor != "" {
		if err := ValidateActor(r.Actor); err != nil {
			return RedriveResult{}, err
		}
	}
	b := Bulk{
		Filter: Filter{State: Dead, Reason: r.Reason, IDPrefix: r.IDPrefix, OlderThan: r.OlderThan, NewerThan: r.NewerThan, Limit: redrivePage},
		Max:    r.Limit, Rate: r.Rate, DryRun: r.DryRun, Actor: r.Actor, OnJob: r.OnJob,
	}
	keep := func(j Job) bool { return r.Reason != "" || j.DeadReason != Canceled }
	res, err := q.bulk(ctx, b, keep, func(j Job) (Job, error) {
		return q.requeue(ctx, j.ID, r.Grant, addMs(q.now(), ceilMs(r.Deadline)), r.Actor)
	})
	return RedriveResult{Requeued: res.Acted, Skipped: res.Skipped}, err
}

// bulk acts on the jobs b selects (and keep, when set, keeps), in ID
// order, paced at b.Rate. A job act refuses for its state is skipped.
func (q *Queue) bulk(ctx context.Context, b Bulk, keep func(Job) bool, act func(Job) (Job, error)) (BulkResult, error) {
	var res BulkResult
	switch {
	case math.IsNaN(b.Rate) || b.Rate <= 0 || b.Rate > MaxRedriveRate:
		return res, fmt.Errorf("%w: rate must be in (0, %d] jobs/s, got %v", ErrInvalid, MaxRedriveRate, b.Rate)
	case b.Max < 0:
		return res, fmt.Errorf("%w: limit (most jobs) must be >= 0 (0 means all), got %d", ErrInvalid, b.Max)
	}
	s, err := q.search(b.Filter, q.now())
	if err != nil {
		return res, err
	}
	interval := time.Duration(float64(time.Second) / b.Rate)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var next time.Time
	for {
		page, more, err := q.page(ctx, &s)
		if err != nil {
			return res, err
		}
		for _, j := range page {
			if keep != nil && !keep(j) {
				continue
			}
			if b.Max > 0 && res.Acted == b.Max {
				return res, nil
			}
			if b.DryRun {
				res.Acted++
				if b.OnJob != nil {
					b.OnJob(j)
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
			done, err := act(j)
			switch {
			case errors.Is(err, ErrNotDead), errors.Is(err, ErrNotFound), errors.Is(err, ErrLeased), errors.Is(err, ErrNotPending):
				res.Skipped++
				continue
			case err != nil:
				return res, err
			}
			res.Acted++
			if b.OnJob != nil {
				b.OnJob(done)
			}
		}
		if !more {
			return res, nil
		}
	}
}

// page reads the next page of s and moves s.After past it; more says
// whether another page may follow. On a store that is not an AdminStore
// it lists each state's jobs (Store.List) and keeps those s matches.
func (q *Queue) page(ctx context.Context, s *Search) (jobs []Job, more bool, err error) {
	if a, ok := q.store.(AdminStore); ok {
		jobs, err = a.Search(ctx, *s)
		if err != nil || len(jobs) == 0 {
			return nil, false, err
		}
		s.After = jobs[len(jobs)-1].ID
		return jobs, len(jobs) == s.Limit, nil
	}
	if len(s.States) != 1 {
		return nil, false, ErrNoAdmin
	}
	raw, err := q.store.List(ctx, s.Queue, s.States[0], s.After, s.Limit)
	if err != nil || len(raw) == 0 {
		return nil, false, err
	}
	s.After = raw[len(raw)-1].ID
	for _, j := range raw {
		if s.Matches(j) {
			jobs = append(jobs, j)
		}
	}
	return jobs, len(raw) == s.Limit, nil
}
