package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/staggerhq/stagger/retry"
)

// batch runs the handler on jobs claimed together at t0, one after the
// other, keeps their leases alive while it runs, and records their outcomes
// in one transaction.
type batch struct {
	q    *Queue
	t0   int64
	jobs []Job
	outs []Outcome
	errs []error
	rec  []bool // outs[i] is to be recorded

	turn uint64        // the Worker's claim that took the jobs
	took time.Duration // how long run took

	mu      sync.Mutex
	lost    []bool
	settled []bool                  // outcome known: no longer heartbeat
	active  int                     // the job whose handler runs, -1 when none
	cancel  context.CancelCauseFunc // cancels the active handler's context
	actx    context.Context         // the active attempt's context
	timer   *time.Timer
	stopped bool
	hbCtx   context.Context
	leases  []Lease
}

func (q *Queue) newBatch(jobs []Job, t0 int64) *batch {
	n := len(jobs)
	return &batch{
		q: q, t0: t0, jobs: jobs, active: -1,
		outs: make([]Outcome, n), errs: make([]error, n), rec: make([]bool, n),
		lost: make([]bool, n), settled: make([]bool, n),
	}
}

// run calls h on every job of the batch.
func (b *batch) run(ctx context.Context, h retry.Handler) {
	b.startHeartbeat(ctx)
	for i := range b.jobs {
		b.attempt(ctx, i, h)
		b.mu.Lock()
		b.settled[i] = true
		b.mu.Unlock()
	}
	b.stopHeartbeat()
}

// attempt runs job i and computes its outcome.
func (b *batch) attempt(ctx context.Context, i int, h retry.Handler) {
	q, j := b.q, &b.jobs[i]
	b.mu.Lock()
	lost := b.lost[i]
	b.mu.Unlock()
	if lost {
		b.errs[i] = ErrLeaseLost
		return
	}
	o := Outcome{ID: j.ID, Attempt: j.Attempts}
	if err := ctx.Err(); err != nil {
		// Shut down before the handler started: release the job. The
		// attempt was spent by the claim and is not given back.
		o.Now = max(q.now(), b.t0)
		o.State, o.AvailableAt = Pending, o.Now
		o.LastError = truncateError("released before the handler started: " + err.Error())
		b.outs[i], b.rec[i], b.errs[i] = o, true, err
		return
	}

	hctx, cancel := context.WithCancelCause(ctx)
	actx, acancel := context.WithTimeout(hctx, q.cfg.AttemptTimeout)
	b.mu.Lock()
	b.active, b.cancel, b.actx = i, cancel, actx
	b.mu.Unlock()
	herr := call(retry.WithDelivery(actx, retry.Delivery{
		ID: j.ID, Attempt: j.Attempts, MaxAttempts: j.MaxAttempts, Source: "queue",
	}), h, j.Payload)
	timedOut := herr != nil && errors.Is(actx.Err(), context.DeadlineExceeded) && hctx.Err() == nil
	acancel()
	leaseLost := errors.Is(context.Cause(hctx), ErrLeaseLost)
	b.mu.Lock()
	b.active, b.cancel, b.actx = -1, nil, nil
	b.mu.Unlock()
	cancel(nil)

	t1 := q.now()
	if leaseLost {
		// Another worker owns the job now; nothing of ours may be written.
		b.errs[i] = errors.Join(ErrLeaseLost, herr)
		return
	}
	if t1 < b.t0 {
		back := fmt.Errorf("%w: read %d ms after the claim at %d ms", ErrClockBackwards, t1, b.t0)
		o.Now = b.t0 // the later reading is not trusted
		if herr == nil {
			o.State = Done
			b.outs[i], b.rec[i], b.errs[i] = o, true, back
			return
		}
		o.State, o.LastError = Leased, truncateError(herr.Error()+" ("+back.Error()+")")
		b.outs[i], b.rec[i], b.errs[i] = o, true, errors.Join(back, herr)
		return
	}
	o.Now = t1
	if herr == nil {
		o.State = Done
		b.outs[i], b.rec[i] = o, true
		return
	}
	o.LastError = truncateError(herr.Error())
	if err := ctx.Err(); err != nil {
		// The caller is shutting down and the handler gave up: release.
		o.State, o.AvailableAt = Pending, t1
		o.LastError = truncateError("released at shutdown: " + o.LastError)
		b.outs[i], b.rec[i], b.errs[i] = o, true, err
		return
	}
	if timedOut {
		if c, _ := retry.Classify(herr); c == retry.ClassUnknown {
			herr = retry.Retryable(herr) // the attempt's own timeout fired
		}
	}
	d := q.decide(j, herr, t1)
	switch {
	case d.Retry:
		o.State, o.AvailableAt = Pending, addMs(t1, ceilMs(d.Delay))
	case d.Reason == retry.Exhausted:
		o.State, o.DeadReason = Dead, Exhausted
	case d.Reason == retry.Deadline:
		o.State, o.DeadReason = Dead, DeadlineReached
	case d.Reason == retry.PermanentError:
		o.State, o.DeadReason = Dead, PermanentFailure
	default: // UnknownError: back to the caller; the lease runs out
		o.State = Leased
		b.errs[i] = herr
	}
	b.outs[i], b.rec[i] = o, true
}

// call runs h, turning a panic into an error of no class.
func call(ctx context.Context, h retry.Handler, payload []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("queue: handler panicked: %v", r)
		}
	}()
	return h(ctx, payload)
}

// record writes the outcomes in one transaction, even when ctx is done.
func (b *batch) record(ctx context.Context) error {
	return b.recordWith(ctx, func(ctx context.Context, outs []Outcome) error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.q.recordTO)
		defer cancel()
		return b.q.store.Record(rctx, outs)
	})
}

// recordWith records the outcomes with rec and mirrors them on the jobs.
func (b *batch) recordWith(ctx context.Context, rec func(context.Context, []Outcome) error) error {
	outs := make([]Outcome, 0, len(b.outs))
	idx := make([]int, 0, len(b.outs))
	for i, ok := range b.rec {
		if ok {
			outs = append(outs, b.outs[i])
			idx = append(idx, i)
		}
	}
	if len(outs) == 0 {
		return nil
	}
	if err := rec(ctx, outs); err != nil {
		return fmt.Errorf("queue: recording outcomes: %w", err)
	}
	for k, o := range outs {
		i := idx[k]
		if !o.Applied {
			b.errs[i] = errors.Join(ErrLeaseLost, b.errs[i])
			continue
		}
		apply(&b.jobs[i], o)
	}
	return nil
}

// apply mirrors a recorded outcome on the in-memory job.
func apply(j *Job, o Outcome) {
	j.State, j.UpdatedAt = o.State, o.Now
	switch o.State {
	case Done:
		j.LeaseUntil, j.FinishedAt = 0, o.Now
	case Pending:
		j.AvailableAt, j.LeaseUntil, j.LastError = o.AvailableAt, 0, o.LastError
	case Dead:
		j.DeadReason, j.LastError, j.LeaseUntil, j.FinishedAt = o.DeadReason, o.LastError, 0, o.Now
	case Leased:
		j.LastError = o.LastError
	}
}

// startHeartbeat extends the batch's unsettled leases every Lease/3 — but
// not the lease of an attempt whose context has ended (its AttemptTimeout
// fired, or it was canceled at shutdown): a handler that ignores its
// context does not hold its job for ever; the lease runs out at most Lease
// later and the job is claimable again (or buried).
func (b *batch) startHeartbeat(ctx context.Context) {
	b.hbCtx = context.WithoutCancel(ctx)
	b.mu.Lock()
	b.timer = time.AfterFunc(b.q.cfg.Lease/3, b.beat)
	b.mu.Unlock()
}

func (b *batch) stopHeartbeat() {
	b.mu.Lock()
	b.stopped = true
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
}

func (b *batch) beat() {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return
	}
	b.leases = b.leases[:0]
	for i := range b.jobs {
		if b.settled[i] || b.lost[i] || (i == b.active && b.actx.Err() != nil) {
			continue
		}
		b.leases = append(b.leases, Lease{ID: b.jobs[i].ID, Attempt: b.jobs[i].Attempts})
	}
	leases := b.leases
	b.mu.Unlock()

	var err error
	if len(leases) > 0 {
		now := b.q.now()
		ctx, cancel := context.WithTimeout(b.hbCtx, b.q.cfg.Lease/3)
		err = b.q.store.Extend(ctx, leases, now, addMs(now, b.q.leaseMs))
		cancel()
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		for _, l := range leases {
			if l.Held {
				continue
			}
			for i := range b.jobs {
				if b.jobs[i].ID == l.ID && b.jobs[i].Attempts == l.Attempt {
					b.lost[i] = true
					if i == b.active && b.cancel != nil {
						b.cancel(ErrLeaseLost)
					}
				}
			}
		}
	}
	if !b.stopped {
		b.timer.Reset(b.q.cfg.Lease / 3)
	}
}
