package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/staggerhq/stagger/retry"
	"github.com/staggerhq/stagger/retry/retrydriver"
)

// attempt runs the handler on one job claimed at t0, keeps its lease alive
// while it runs, and holds the outcome to record.
type attempt struct {
	q   *Queue
	t0  int64
	job Job
	out Outcome
	err error
	rec bool // out is to be recorded
	// snoozed: the handler returned Snooze.
	snoozed bool

	turn uint64        // the Worker's claim that took the job
	took time.Duration // how long run took

	mu      sync.Mutex
	lost    bool                    // a heartbeat found the lease taken over
	cancel  context.CancelCauseFunc // cancels the running handler's context
	actx    context.Context         // the running handler's context, nil when none
	stopped bool                    // the run ended: no heartbeat extends it
	beatIdx int                     // its index in heart.running while it runs
	// vals is the context whose values (not its end) the store's Extend
	// sees on this attempt's heartbeats (runCtx.vals).
	vals context.Context
}

func (q *Queue) newAttempt(j Job, t0 int64) *attempt {
	return &attempt{q: q, t0: t0, job: j}
}

// run calls h on the job under r, extending its lease meanwhile (see
// heart), and computes the outcome.
func (a *attempt) run(r *runCtx, h retry.Handler) {
	a.vals = r.vals
	a.q.heart.add(a)
	a.handle(r, h)
	a.q.heart.remove(a)
}

// runCtx is the context the attempts of one runner (a goroutine that runs
// one attempt at a time) start under: a child of the handlers' context
// that a lost lease cancels, with ErrLeaseLost as the cause, for the one
// attempt whose handler is running. It is made once per runner, not once
// per attempt, and made again only after a lost lease canceled it: an
// attempt's own context is the Step's (bounded by the job's deadline, and
// canceled when the attempt ends), so a per-attempt parent would cost a
// context, its Done channel and its children's map a job, and every
// runner's registration in the one shared parent, under its lock.
type runCtx struct {
	parent context.Context
	// vals is the context whose values the store sees on the heartbeats
	// of the runner's attempts: the one the Worker was run with (or
	// RunOnce called with), as on its claims.
	vals   context.Context
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newRunCtx(parent, vals context.Context) *runCtx {
	r := &runCtx{parent: parent, vals: vals}
	r.ctx, r.cancel = context.WithCancelCause(parent)
	return r
}

// fresh returns the context for the next attempt: a new one when a lost
// lease canceled the last while the parent goes on.
func (r *runCtx) fresh() context.Context {
	if r.ctx.Err() != nil && r.parent.Err() == nil {
		r.cancel(nil)
		r.ctx, r.cancel = context.WithCancelCause(r.parent)
	}
	return r.ctx
}

// close releases r; its attempts are over.
func (r *runCtx) close() { r.cancel(nil) }

// handle runs the handler through the retrydriver.Step every stagger driver
// shares and computes the outcome. The attempt was counted by the claim
// (j.Attempts), so the Step starts from the attempts before it; the job's
// max_attempts and deadline govern it.
func (a *attempt) handle(r *runCtx, h retry.Handler) {
	q, j := a.q, &a.job
	ctx := r.parent
	a.mu.Lock()
	lost := a.lost
	a.mu.Unlock()
	if lost {
		a.err = ErrLeaseLost
		return
	}
	o := Outcome{ID: j.ID, Attempt: j.Attempts}
	s := retrydriver.Step{Policy: &q.policy, Delivery: retry.Delivery{
		ID: j.ID, Attempt: j.Attempts - 1, MaxAttempts: j.MaxAttempts, Source: "queue",
		Deadline: time.UnixMilli(j.Deadline),
	}}
	hctx := r.fresh()
	// The step begins at the start, not at the claim: a job that waited
	// for a handler (prefetched) past its deadline is not started, as the
	// deadline is the time by which an attempt must have started.
	begin := max(q.now(), a.t0)
	if r := s.Begin(hctx, time.UnixMilli(begin)); r != retry.NoReason {
		// Not started. The attempt was spent by the claim and is not
		// given back (as when a lease expires).
		o.Now = begin
		switch {
		case ctx.Err() != nil: // shut down before the handler started: release
			o.State, o.AvailableAt = Pending, o.Now
			o.LastError = truncateError("released before the handler started: " + ctx.Err().Error())
			a.err = ctx.Err()
		case r == retry.Deadline:
			o.State, o.DeadReason = Dead, DeadlineReached
			o.LastError = truncateError(r.Err().Error())
		default: // the Limiter or the Budget refused: due again after the schedule's wait
			o.State = Pending
			o.AvailableAt = addMs(o.Now, ceilMs(q.policy.Schedule.Delay(j.Attempts, 0, q.policy.Rand)))
			o.LastError = truncateError("not started: " + r.Err().Error())
		}
		a.out, a.rec = o, true
		return
	}
	defer s.Abort()
	actx := s.LazyContext()
	if actx == hctx {
		// Not bounded: a context of the attempt's own, so that it too
		// ends when the handler returns.
		var end context.CancelFunc
		actx, end = context.WithCancel(hctx)
		defer end()
	}
	a.mu.Lock()
	a.cancel, a.actx = r.cancel, actx
	a.mu.Unlock()
	herr := call(handlerContexts.NewContext(q.withTrace(actx, j.Trace), &s.Delivery), h, j.Payload)
	leaseLost := errors.Is(context.Cause(hctx), ErrLeaseLost)
	a.mu.Lock()
	a.cancel, a.actx = nil, nil
	a.mu.Unlock()

	t1 := q.now()
	if leaseLost {
		// Another worker owns the job now; nothing of ours may be written.
		a.err = errors.Join(ErrLeaseLost, herr)
		return
	}
	if t1 < begin {
		// No decision with this clock: Abort frees the slot undecided.
		back := fmt.Errorf("%w: read %d ms after the start at %d ms", ErrClockBackwards, t1, begin)
		o.Now = begin // the later reading is not trusted
		if herr == nil {
			o.State = Done
			a.out, a.rec, a.err = o, true, back
			return
		}
		o.State, o.LastError = Leased, truncateError(herr.Error()+" ("+back.Error()+")")
		a.out, a.rec, a.err = o, true, errors.Join(back, herr)
		return
	}
	o.Now = t1
	if d, ok := snoozed(herr); ok { // not a failure: see Snooze
		s.Postpone()
		a.out, a.rec, a.snoozed = snoozeOutcome(o, j, d, t1), true, true
		return
	}
	d := s.End(herr, time.UnixMilli(t1))
	if herr == nil {
		o.State = Done
		a.out, a.rec = o, true
		return
	}
	o.LastError = truncateError(herr.Error())
	switch {
	case d.Interrupted: // the caller is shutting down: release
		o.State, o.AvailableAt = Pending, t1
		o.LastError = truncateError("released at shutdown: " + o.LastError)
		a.err = ctx.Err()
	case d.Retry:
		o.State, o.AvailableAt = Pending, addMs(t1, ceilMs(d.Delay))
	case d.Reason == retry.Exhausted:
		o.State, o.DeadReason = Dead, Exhausted
	case d.Reason == retry.Deadline:
		o.State, o.DeadReason = Dead, DeadlineReached
	case d.Reason == retry.PermanentError:
		o.State, o.DeadReason = Dead, PermanentFailure
	case d.Reason == retry.UnknownError:
		o.State = Leased // back to the caller; the lease runs out
		a.err = herr
	default: // Budget, Pushback: as a retry the policy will not make now
		o.State, o.AvailableAt = Pending, addMs(t1, ceilMs(q.policy.Schedule.Delay(j.Attempts, 0, q.policy.Rand)))
	}
	a.out, a.rec = o, true
}

// handlerContexts makes the handlers' contexts (the attempt's Delivery
// in the attempt's context) 63 at a time, as the broker processor's: one
// allocation per block, not per job. A handler may keep its context as
// long as it likes; one kept holds its block (4 KiB) and what the block's
// other contexts refer to.
var handlerContexts retrydriver.DeliveryContexts

// withTrace restores the enqueuer's trace context (Job.Trace) into the
// handler's context.
func (q *Queue) withTrace(ctx context.Context, trace string) context.Context {
	if q.cfg.Trace == nil || trace == "" {
		return ctx
	}
	parent, state := decodeTrace(trace)
	return q.cfg.Trace.Extract(ctx, parent, state)
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

// record writes the outcome in a transaction of its own, even when ctx is
// done.
func (a *attempt) record(ctx context.Context) error {
	if !a.rec {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.q.recordTO)
	defer cancel()
	outs := []Outcome{a.out}
	if err := a.q.store.Record(rctx, outs); err != nil {
		return fmt.Errorf("queue: recording outcomes: %w", err)
	}
	a.settle(outs[0])
	return nil
}

// settle takes the recorded outcome o: mirrored on the job when it was
// applied, a lost lease otherwise.
func (a *attempt) settle(o Outcome) {
	if !o.Applied {
		a.err = errors.Join(ErrLeaseLost, a.err)
		return
	}
	apply(&a.job, o)
}

// apply mirrors a recorded outcome on a job.
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
