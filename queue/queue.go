package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/staggerhq/stagger/retry"
)

// Queue is the durable retry queue: the job contract on top of a Store.
// It is safe for concurrent use; many Queues (in many processes) may share
// one store.
type Queue struct {
	store    Store
	cfg      Config
	now      func() int64
	policy   retry.Policy // the jobs' retry rules: Config.Policy, the rows' attempts and deadlines governing
	leaseMs  int64
	recordTO time.Duration

	wmu   sync.Mutex
	wake  chan struct{} // closed and replaced by signal
	dues  []int64       // due times the loops sleep until, ascending (wake.go)
	keyed bool          // the store can key the wakes of its queues (wake.go)

	heart heart // extends the running attempts' leases
}

// New returns a Queue on store.
func New(store Store, cfg Config) (*Queue, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: store must not be nil", ErrInvalid)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if _, ok := store.(LimitedClaimer); !ok && !cfg.Limits.IsZero() {
		return nil, fmt.Errorf("%w: Limits need a store that enforces them (queue.LimitedClaimer); %T does not", ErrInvalid, store)
	}
	q := &Queue{
		store:    store,
		cfg:      cfg,
		now:      cfg.Now,
		leaseMs:  ceilMs(cfg.Lease),
		recordTO: 30 * time.Second,
		wake:     make(chan struct{}),
		keyed:    keyed(store),
	}
	if q.now == nil {
		q.now = systemNow
	}
	// The rows govern every job: its max_attempts and deadline go in the
	// Step's Delivery, so the Policy's defaults of new jobs stay out.
	q.policy = *cfg.Policy
	q.policy.MaxAttempts, q.policy.Timeout = 0, 0
	if q.policy.Rand != nil {
		q.policy.Rand = &lockedSource{src: q.policy.Rand}
	}
	return q, nil
}

// Store returns the queue's store.
func (q *Queue) Store() Store { return q.store }

// Config returns the queue's configuration with its defaults filled in.
// Its Policy is a copy: changing it changes nothing in the queue.
func (q *Queue) Config() Config {
	c := q.cfg
	p := *c.Policy
	c.Policy = &p
	return c
}

// Now reads the queue's clock (Unix milliseconds).
func (q *Queue) Now() int64 { return q.now() }

// NewJob is what Enqueue needs to create a job.
type NewJob struct {
	// ID identifies the job (see ValidateID). Required.
	ID string
	// Queue is the named queue of the job (see ValidateQueue); "" means
	// the Queue's own (Config.Queue).
	Queue string
	// Payload is at most Config.MaxPayload bytes.
	Payload []byte
	// MaxAttempts is the attempt budget, 1 to MaxMaxAttempts; 0 means
	// Config.Policy.MaxAttempts (DefaultJobMaxAttempts when that is 0).
	MaxAttempts int
	// Deadline is the absolute Unix time in milliseconds by which an
	// attempt must have started; it must be later than now. 0 means now +
	// Config.Policy.Timeout (DefaultJobTimeout when that is 0).
	Deadline int64
	// AvailableAt delays the first attempt (Unix ms, before Deadline);
	// 0 means now.
	AvailableAt int64
	// Attempts is the number of attempts the work already had before it
	// reached the queue — on another driver, carried by its ledger
	// (Handoff sets it): the job's first claim is attempt Attempts+1, and
	// MaxAttempts counts these too. It must be in [0, MaxAttempts).
	Attempts int
}

// Enqueue stores a job unless one with the same ID exists. It returns the
// stored job and whether it was created: re-submitting an existing ID
// returns the existing job unchanged and never resets its attempts, its
// deadline or its state.
func (q *Queue) Enqueue(ctx context.Context, j NewJob) (Job, bool, error) {
	res, err := q.EnqueueMany(ctx, []NewJob{j})
	if err != nil {
		return Job{}, false, err
	}
	return res[0].Job, res[0].Created, nil
}

// EnqueueMany validates every job and then stores them in one transaction:
// if any job is invalid nothing is written. Results are in input order.
func (q *Queue) EnqueueMany(ctx context.Context, js []NewJob) ([]Inserted, error) {
	rows, err := q.NewRowsContext(ctx, js)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	res, err := q.store.Insert(ctx, rows)
	if err != nil {
		return nil, err
	}
	q.wakeRows(res)
	return res, nil
}

// NewRows validates every job at the queue's clock and returns the rows
// Store.Insert takes, exactly as EnqueueMany stores them (an invalid job
// is an error naming it and its field). It is for stores that enqueue
// inside a caller's own transaction (the EnqueueTx of queue/sqlite and
// queue/postgres).
func (q *Queue) NewRows(js []NewJob) ([]Job, error) {
	return q.NewRowsContext(context.Background(), js)
}

// NewRowsContext is NewRows for jobs enqueued by code running in ctx: with
// Config.Trace set, each row carries ctx's trace context (Job.Trace).
func (q *Queue) NewRowsContext(ctx context.Context, js []NewJob) ([]Job, error) {
	var trace string
	if q.cfg.Trace != nil {
		trace = encodeTrace(q.cfg.Trace.Inject(ctx))
	}
	now := q.now()
	rows := make([]Job, len(js))
	for i, j := range js {
		row, err := q.newRow(j, now)
		if err != nil {
			if len(js) > 1 {
				return nil, fmt.Errorf("job %d: %w", i+1, err)
			}
			return nil, err
		}
		row.Trace = trace
		rows[i] = row
	}
	return rows, nil
}

// Wake wakes the idle workers of this process that run q's named queue on
// q's store (through q or another Queue value) at once, as an enqueue
// does: call it after committing a transaction that enqueued jobs
// (EnqueueTx) on a store without notifications (SQLite); otherwise they
// find the jobs at their next poll.
func (q *Queue) Wake() { q.wakeQueue(q.cfg.Queue) }

// ValidateNewJob checks j against the queue's limits at now (Unix ms)
// without storing it, returning an error that names the field.
func (q *Queue) ValidateNewJob(j NewJob, now int64) error {
	_, err := q.newRow(j, now)
	return err
}

func (q *Queue) newRow(j NewJob, now int64) (Job, error) {
	if err := ValidateID(j.ID); err != nil {
		return Job{}, err
	}
	name := j.Queue
	if name == "" {
		name = q.cfg.Queue
	}
	if err := ValidateQueue(name); err != nil {
		return Job{}, err
	}
	if len(j.Payload) > q.cfg.MaxPayload {
		return Job{}, fmt.Errorf("%w: payload must be at most %d bytes, got %d", ErrInvalid, q.cfg.MaxPayload, len(j.Payload))
	}
	maxA := j.MaxAttempts
	switch {
	case maxA == 0:
		maxA = q.cfg.Policy.MaxAttempts
	case maxA < 0 || maxA > MaxMaxAttempts:
		return Job{}, fmt.Errorf("%w: max_attempts must be in [1, %d], got %d", ErrInvalid, MaxMaxAttempts, maxA)
	}
	if j.Attempts < 0 || j.Attempts >= maxA {
		return Job{}, fmt.Errorf("%w: attempts (already made) must be in [0, max_attempts %d), got %d", ErrInvalid, maxA, j.Attempts)
	}
	dl := j.Deadline
	switch {
	case dl == 0:
		dl = addMs(now, ceilMs(q.cfg.Policy.Timeout))
	case dl <= now:
		return Job{}, fmt.Errorf("%w: deadline (%d ms) must be later than now (%d ms)", ErrInvalid, dl, now)
	case dl > MaxTime:
		return Job{}, fmt.Errorf("%w: deadline (%d ms) must be at most %d ms (year 9999)", ErrInvalid, dl, MaxTime)
	}
	at := j.AvailableAt
	switch {
	case at == 0:
		at = now
	case at < 0 || at >= dl:
		return Job{}, fmt.Errorf("%w: available_at (%d ms) must be >= 0 and before the deadline (%d ms)", ErrInvalid, at, dl)
	}
	return Job{
		ID: j.ID, Queue: name, Payload: j.Payload, Attempts: j.Attempts, MaxAttempts: maxA, AvailableAt: at, Deadline: dl,
		State: Pending, CreatedAt: now, UpdatedAt: now,
	}, nil
}

var errNilHandler = errors.New("queue: nil handler")

// RunOnce processes one due job: it claims it (attempts + 1 and a lease, in
// one committed transaction), calls h outside any transaction or lock with
// a retry.Delivery in the context, and records the outcome:
//
//   - nil: done;
//   - Retryable or After(d): pending again at now + delay, the delay from
//     backoff.RetryDelay with a random ratio (After raises it to at least d,
//     rounded up to whole ms) — or dead(deadline) when now + delay >=
//     deadline, dead(exhausted) when attempts = max_attempts;
//   - Snooze(d): pending again at now + d, not a failure (see Snooze for
//     how it spends the attempt and never passes the deadline);
//   - Permanent: dead(permanent);
//   - any other error: returned to the caller with the job, which stays
//     leased (its LastError written) until the lease expires; the attempt
//     stays spent. The same holds when the handler fails because ctx was
//     canceled, except that the job is released: pending at once.
//
// The decision is retry.Policy.Decide, the one every stagger driver uses.
// Before the claim it buries up to 1000 jobs that can never run again
// (expired leases on their last attempt, passed deadlines; Store.Bury);
// with nothing due it returns nil, nil.
//
// The clock is read at the claim, when the handler starts (a job whose
// deadline has passed by then is not started: it is dead, reason
// DeadlineReached, as the attempt step decides) and after the handler. If
// the last reading is earlier than the others, RunOnce returns ErrClockBackwards and records only
// what does not depend on the clock: a successful job is done (its effect
// happened), a failed one stays leased with its error, exactly as for an
// unknown error, so the decision is taken again, with a sane clock, by the
// next claim after the lease expires.
//
// If the lease was lost before the outcome could be recorded (it expired
// and another worker claimed the job), RunOnce returns ErrLeaseLost and the
// job as claimed.
func (q *Queue) RunOnce(ctx context.Context, h retry.Handler) (*Job, error) {
	if h == nil {
		return nil, errNilHandler
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t0 := q.now()
	// Bury first: a job that can never run again (its deadline passed, its
	// attempts spent) is dead from now on, not left pending behind the job
	// this call claims.
	if _, err := q.store.Bury(ctx, t0, buryBatch); err != nil {
		return nil, err
	}
	jobs, err := q.claim(ctx, t0, addMs(t0, q.leaseMs), 1)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	a := q.newAttempt(jobs[0], t0)
	r := newRunCtx(ctx, ctx)
	a.run(r, h)
	r.close()
	if err := a.record(ctx); err != nil {
		return &a.job, err
	}
	return &a.job, a.err
}

// buryBatch bounds the jobs one Bury call moves.
const buryBatch = 1000

// Sweep buries jobs that can never be claimed again (see Store.Bury) and
// returns how many it moved. Workers sweep on their own; call it when
// driving the queue with RunOnce alone.
func (q *Queue) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := q.store.Bury(ctx, q.now(), buryBatch)
		total += n
		if err != nil || n < buryBatch {
			return total, err
		}
	}
}

// Get returns the job with that ID, or ErrNotFound.
func (q *Queue) Get(ctx context.Context, id string) (Job, error) { return q.store.Get(ctx, id) }

// Dead lists up to limit (1 to 10000) dead jobs with ID > after, ordered by
// ID, each with its dead reason and last error.
func (q *Queue) Dead(ctx context.Context, after string, limit int) ([]Job, error) {
	if limit < 1 || limit > 10000 {
		return nil, fmt.Errorf("%w: limit must be in [1, 10000], got %d", ErrInvalid, limit)
	}
	return q.store.List(ctx, q.cfg.Queue, Dead, after, limit)
}

// Requeue is the operator's action on a dead job: it explicitly grants
// grant new attempts (max_attempts becomes attempts + grant; the attempts
// already spent stay counted) and a new deadline (absolute Unix ms, later
// than now), and makes the job due now. It is the only way a deadline
// moves. A job that is not dead is left alone with ErrNotDead.
func (q *Queue) Requeue(ctx context.Context, id string, grant int, deadline int64) (Job, error) {
	return q.requeue(ctx, id, grant, deadline, "")
}

// requeue is Requeue; on an AdminStore it records the action in the
// job's history with actor.
func (q *Queue) requeue(ctx context.Context, id string, grant int, deadline int64, actor string) (Job, error) {
	now := q.now()
	switch {
	case grant < 1 || grant > MaxMaxAttempts:
		return Job{}, fmt.Errorf("%w: attempts (granted) must be in [1, %d], got %d", ErrInvalid, MaxMaxAttempts, grant)
	case deadline <= now:
		return Job{}, fmt.Errorf("%w: deadline (%d ms) must be later than now (%d ms)", ErrInvalid, deadline, now)
	case deadline > MaxTime:
		return Job{}, fmt.Errorf("%w: deadline (%d ms) must be at most %d ms (year 9999)", ErrInvalid, deadline, MaxTime)
	}
	if err := ValidateID(id); err != nil {
		return Job{}, err
	}
	var j Job
	var err error
	if a, ok := q.store.(AdminStore); ok {
		e := Event{At: now, Actor: actor, Action: ActionRequeue,
			Detail: fmt.Sprintf("+%d attempts, deadline %s", grant, time.UnixMilli(deadline).UTC().Format("2006-01-02T15:04:05.000Z07:00"))}
		j, err = a.RequeueEvent(ctx, id, grant, deadline, now, e)
	} else {
		j, err = q.store.Requeue(ctx, id, grant, deadline, now)
	}
	if err == nil {
		q.wakeQueue(j.Queue)
	}
	return j, err
}

// Stats counts the jobs by state now.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	return q.store.Stats(ctx, q.cfg.Queue, q.now())
}

// ErrNoStatsByQueue: the store cannot count every queue at once (it is not
// a StatsByQueuer).
var ErrNoStatsByQueue = errors.New("queue: the store does not implement StatsByQueuer")

// StatsByQueue counts the jobs of every queue of the store now, by queue
// name (a queue that holds no job is absent). It returns ErrNoStatsByQueue
// when the store is not a StatsByQueuer.
func (q *Queue) StatsByQueue(ctx context.Context) (map[string]Stats, error) {
	sq, ok := q.store.(StatsByQueuer)
	if !ok {
		return nil, ErrNoStatsByQueue
	}
	return sq.StatsByQueue(ctx, q.now())
}

// signal wakes the idle loops of the Workers running q.
func (q *Queue) signal() {
	q.wmu.Lock()
	q.signalLocked()
	q.wmu.Unlock()
}

func (q *Queue) signalLocked() {
	close(q.wake)
	q.wake = make(chan struct{})
}

func (q *Queue) waitChan() <-chan struct{} {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	return q.wake
}

// claim leases up to n due jobs of the queue, within its Limits.
func (q *Queue) claim(ctx context.Context, now, leaseUntil int64, n int) ([]Job, error) {
	if !q.cfg.Limits.IsZero() {
		return q.store.(LimitedClaimer).ClaimLimited(ctx, q.cfg.Queue, q.cfg.Limits, now, leaseUntil, n)
	}
	return q.store.Claim(ctx, q.cfg.Queue, now, leaseUntil, n)
}
