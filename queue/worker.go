package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/staggerhq/stagger/retry"
)

// Defaults for the zero fields of WorkerConfig.
const (
	DefaultPollInterval  = time.Second      // WorkerConfig.PollInterval
	DefaultSweepInterval = 10 * time.Second // WorkerConfig.SweepInterval
	DefaultGrace         = 10 * time.Second // WorkerConfig.Grace
	// MaxConcurrency bounds WorkerConfig.Concurrency, MaxBatchSize its
	// BatchSize.
	MaxConcurrency = 1024
	MaxBatchSize   = 1000 // bound of WorkerConfig.BatchSize
)

// ErrShutdownTimeout is returned by Worker.Run when handlers were still
// running (or outcomes still uncommitted, the store failing) a grace period
// after the handlers were canceled. The worker then leaves the store alone:
// outcomes not yet committed are dropped, their jobs stay leased and are
// claimable again when their leases expire.
var ErrShutdownTimeout = errors.New("queue: worker: handlers still running or outcomes uncommitted after the grace period")

// WorkerConfig configures a Worker; zero fields take their defaults.
type WorkerConfig struct {
	// Concurrency is how many handlers run at once (1 to
	// MaxConcurrency), per queue: with NewMultiWorker it is the default of
	// each Serve's own. Default 1.
	Concurrency int
	// BatchSize caps how many jobs one claim transaction takes (1 to
	// MaxBatchSize). A claim takes a job for each idle handler and, when
	// handlers are short next to a claim's commit, a few more that wait in
	// the worker for the next free handler (see loopState.prefetch): at
	// most as many as the handlers can start, on average, within one
	// commit. Default: 4×Concurrency, at least 64, at most MaxBatchSize
	// (with NewMultiWorker: the default of each Serve's own).
	BatchSize int
	// PollInterval is the mean wait of an idle loop before it looks for
	// due jobs again; each wait is drawn uniformly from [0.5, 1.5)×, so
	// workers never poll in step. An enqueue in this process, or a store
	// notification (Notifier), wakes idle loops at once, and a loop sleeps
	// no later than the due time of a retry or snooze this process
	// recorded or a delayed job it enqueued (the 64 soonest), so those run
	// on time; the poll finds the rest. Default 1s.
	PollInterval time.Duration
	// SweepInterval is the mean interval (jittered like PollInterval) at
	// which the worker buries jobs that can never run again. Default 10s.
	SweepInterval time.Duration
	// Grace is how long Run lets in-flight handlers finish after its
	// context is done before canceling them (their jobs are then released:
	// pending at once, the attempt spent); Run waits one more Grace for
	// them to return. Default 10s.
	Grace time.Duration
	// OnError receives errors the worker cannot return: store errors,
	// unknown handler errors (the job stays leased), lost leases, a clock
	// that went backwards. It is called from the worker's goroutines.
	// When OnResult is set, an attempt's own error goes to OnResult (in
	// Result.Err) instead.
	OnError func(error)
	// OnResult, when set, receives every attempt's end once its outcome is
	// committed (or known lost), from the committing goroutine of the
	// job's queue (Result.Job.Queue), one call at a time across the queues
	// of the Worker: it should return quickly, since the next commit waits
	// for it.
	OnResult func(Result)
	// RetainDone and RetainDead are how long done and dead jobs are kept
	// after they finished; each maintenance pass (every SweepInterval)
	// deletes older ones, on stores that are a Purger, in transactions of
	// PurgeBatch jobs, at most 10 per state and pass. Zero means
	// DefaultRetainDone (7 days) and DefaultRetainDead (30 days);
	// KeepForever keeps them. Deleting a done job frees its ID: enqueueing
	// it again creates a new job.
	RetainDone, RetainDead time.Duration
	// PurgeBatch is how many jobs one retention transaction deletes (1 to
	// MaxPurgeBatch). Default DefaultPurgeBatch.
	PurgeBatch int
	// OnMaintenance, when set, receives what each maintenance pass (every
	// SweepInterval) did.
	OnMaintenance func(Maintenance)
	// Loops is how many claim loops share a queue's handlers (1 to
	// Concurrency): each runs its share of the Concurrency handlers, claims
	// up to BatchSize jobs for them and has its own claim (and commit) in
	// flight, so that Loops round trips to the store overlap. Jobs claimed
	// but not started (prefetched) are at most Loops × BatchSize, or twice
	// that when claims are sent ahead (outcomes committed beside the
	// claims; see laneRun.claimAhead). 0 means
	// DefaultLoops (at most Concurrency), or 1 when BatchSize is 256 or
	// more (a loop already commits beside its claims) or the queue has
	// fleet Limits (its claims take turns at the store). With
	// NewMultiWorker: the default of each Serve's own.
	Loops int
}

// Maintenance is what one maintenance pass of a Worker did.
type Maintenance struct {
	// Buried is how many jobs that could never run again were moved to
	// dead (Queue.Sweep).
	Buried int
	// PurgedDone and PurgedDead are how many done and dead jobs past their
	// retention were deleted.
	PurgedDone, PurgedDead int
}

// Result is how one attempt run by a Worker ended, for
// WorkerConfig.OnResult.
type Result struct {
	// Job is the job as claimed (Attempts is this attempt's number) with
	// the committed outcome applied when Recorded: State, AvailableAt (a
	// retry's time), DeadReason, LastError, FinishedAt.
	Job Job
	// Recorded says the outcome was committed. It is false when the lease
	// was lost first (Err wraps ErrLeaseLost): the job belongs to another
	// attempt.
	Recorded bool
	// Err is the attempt's error beyond its outcome: nil when the job is
	// done, scheduled again or dead; the handler's error of no class when
	// the job stays leased; context.Canceled when it was released at
	// shutdown; ErrLeaseLost or ErrClockBackwards.
	Err error
	// Took is how long the handler ran.
	Took time.Duration
	// Snoozed says the handler returned Snooze (the job is pending at
	// Job.AvailableAt, or dead when the snooze could not be honoured).
	Snoozed bool
}

func (c WorkerConfig) withDefaults() (WorkerConfig, error) {
	setDefault(&c.Concurrency, 1)
	setDefault(&c.BatchSize, min(max(4*c.Concurrency, 64), MaxBatchSize))
	setDefault(&c.PollInterval, DefaultPollInterval)
	setDefault(&c.SweepInterval, DefaultSweepInterval)
	setDefault(&c.Grace, DefaultGrace)
	setDefault(&c.RetainDone, DefaultRetainDone)
	setDefault(&c.RetainDead, DefaultRetainDead)
	setDefault(&c.PurgeBatch, DefaultPurgeBatch)
	for _, r := range []struct {
		name string
		v    time.Duration
	}{{"RetainDone", c.RetainDone}, {"RetainDead", c.RetainDead}} {
		if r.v != KeepForever && (r.v < time.Millisecond || r.v > MaxDuration) {
			return c, fmt.Errorf("%w: %s must be in [1ms, %v] or KeepForever (0 means the default), got %v", ErrInvalid, r.name, MaxDuration, r.v)
		}
	}
	if c.PurgeBatch < 1 || c.PurgeBatch > MaxPurgeBatch {
		return c, fmt.Errorf("%w: PurgeBatch must be in [1, %d] (0 means %d), got %d", ErrInvalid, MaxPurgeBatch, DefaultPurgeBatch, c.PurgeBatch)
	}
	switch {
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return c, fmt.Errorf("%w: Concurrency must be in [1, %d] (0 means 1), got %d", ErrInvalid, MaxConcurrency, c.Concurrency)
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return c, fmt.Errorf("%w: BatchSize must be in [1, %d] (0 means 4×Concurrency, at least 64), got %d", ErrInvalid, MaxBatchSize, c.BatchSize)
	case c.Loops < 0 || c.Loops > c.Concurrency:
		return c, fmt.Errorf("%w: Loops must be in [1, Concurrency (%d)] (0 means up to %d), got %d", ErrInvalid, c.Concurrency, DefaultLoops, c.Loops)
	}
	if err := checkDuration("PollInterval", c.PollInterval, time.Millisecond); err != nil {
		return c, err
	}
	if err := checkDuration("SweepInterval", c.SweepInterval, time.Millisecond); err != nil {
		return c, err
	}
	if err := checkDuration("Grace", c.Grace, time.Millisecond); err != nil {
		return c, err
	}
	return c, nil
}

// setDefault sets *p to v when it is the zero value.
func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Worker runs handlers on the jobs of one or more queues of one store until
// its context is done. Each queue it serves has its own handler, Policy,
// Limits and Concurrency handlers, shared among claim loops of its own
// (Loops; see lane.split), each of which, each turn, claims as many due
// jobs as there are idle handlers (up to BatchSize) — plus, when handlers
// are short next to a commit, the few they will start within about one
// commit (prefetch) — and commits the outcomes of the handlers that
// finished: in the claim's transaction when the store is a RecordClaimer
// (SQLite, PostgreSQL: one commit per turn) and the claim is smaller than
// splitTurn, otherwise in group-committed transactions running beside the
// claims. When handlers are short next to
// a commit, a turn waits briefly for the handlers of the previous claim so
// that it claims a job for each of them (see loopState.linger). Idle, it
// wakes on enqueues in this process and store notifications (Notifier) or
// polls at a jittered interval. It keeps long handlers' leases alive, bounds each
// attempt (Config.Policy.AttemptTimeout), and shuts down gracefully. A busy
// queue cannot starve another: its handlers are its own. The queues share
// the store (its connection pool), one subscription to its notifications,
// one maintenance loop (burying and retention cover every queue of the
// store) and one shutdown.
type Worker struct {
	lanes []*lane
	cfg   WorkerConfig
	resMu sync.Mutex // one OnResult call at a time
}

// lane is one queue a Worker serves.
type lane struct {
	w           *Worker
	q           *Queue
	h           retry.Handler
	concurrency int
	batch       int
	loops       int // 0: the default (see lanes)
}

// Serve is one queue a Worker serves (NewMultiWorker): its Queue, whose
// Config holds the queue's name, Policy, lease and Limits, the handler of
// its jobs, and how many of them run at once.
type Serve struct {
	// Queue is the queue to serve; every Serve of a Worker names another
	// queue of the same store.
	Queue *Queue
	// Handler runs this queue's jobs.
	Handler retry.Handler
	// Concurrency is how many of this queue's handlers run at once (1 to
	// MaxConcurrency); 0 means WorkerConfig.Concurrency.
	Concurrency int
	// BatchSize caps this queue's claims (1 to MaxBatchSize); 0 means
	// WorkerConfig.BatchSize, or else the default (4×Concurrency, 64 to
	// MaxBatchSize).
	BatchSize int
	// Loops is how many claim loops share this queue's handlers (1 to
	// Concurrency); 0 means WorkerConfig.Loops, or else the default (see
	// WorkerConfig.Loops).
	Loops int
}

// NewWorker returns a Worker running h on q's jobs.
func NewWorker(q *Queue, h retry.Handler, cfg WorkerConfig) (*Worker, error) {
	if q == nil {
		return nil, fmt.Errorf("%w: queue must not be nil", ErrInvalid)
	}
	if h == nil {
		return nil, errNilHandler
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg}
	w.lanes = []*lane{{w: w, q: q, h: h, concurrency: cfg.Concurrency, batch: cfg.BatchSize, loops: cfg.Loops}}
	return w, nil
}

// NewMultiWorker returns one Worker serving several queues of one store,
// each with its own handler, Policy, Limits and handlers (see Serve), like
// River's Queues or asynq's: cfg's polling, sweep, retention, grace and
// callbacks are shared, its Concurrency and BatchSize are the defaults of
// each Serve's. Every Queue must be on the same store and name another
// queue.
func NewMultiWorker(cfg WorkerConfig, serves ...Serve) (*Worker, error) {
	if len(serves) == 0 {
		return nil, fmt.Errorf("%w: a Worker needs at least one queue to serve", ErrInvalid)
	}
	lanes := make([]*lane, len(serves))
	seen := make(map[string]bool, len(serves))
	for i, sv := range serves {
		if sv.Queue == nil {
			return nil, fmt.Errorf("%w: Serve %d: Queue must not be nil", ErrInvalid, i+1)
		}
		name := sv.Queue.cfg.Queue
		switch {
		case sv.Handler == nil:
			return nil, fmt.Errorf("%w: queue %q: nil handler", ErrInvalid, name)
		case seen[name]:
			return nil, fmt.Errorf("%w: queue %q is served twice", ErrInvalid, name)
		case i > 0 && !sv.Queue.sameStore(serves[0].Queue):
			return nil, fmt.Errorf("%w: queue %q is on another store than queue %q: one Worker serves one store", ErrInvalid, name, serves[0].Queue.cfg.Queue)
		}
		seen[name] = true
		lc := WorkerConfig{Concurrency: cmp.Or(sv.Concurrency, cfg.Concurrency), BatchSize: cmp.Or(sv.BatchSize, cfg.BatchSize)}
		lc.Loops = cmp.Or(sv.Loops, min(cfg.Loops, lc.Concurrency))
		lc, err := lc.withDefaults()
		if err != nil {
			return nil, fmt.Errorf("queue %q: %w", name, err)
		}
		lanes[i] = &lane{q: sv.Queue, h: sv.Handler, concurrency: lc.Concurrency, batch: lc.BatchSize, loops: lc.Loops}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, lanes: lanes}
	for _, l := range lanes {
		l.w = w
	}
	return w, nil
}

// sameStore reports whether q and o are on one store (false for stores
// that cannot be compared).
func (q *Queue) sameStore(o *Queue) bool {
	return q.keyed && o.keyed && q.store == o.store
}

// Run processes jobs until ctx is done, then shuts down: it stops claiming,
// lets in-flight handlers finish for Grace, cancels those still running
// (their jobs are released), and returns nil once every outcome is
// committed — or ErrShutdownTimeout if that took another Grace (a handler
// ignored the cancellation, or the store kept failing). After Run returns
// the worker no longer uses the store.
func (w *Worker) Run(ctx context.Context) error {
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	// rec outlives ctx so that outcomes are committed during the shutdown;
	// it ends when Run gives up, which stops the loop's store calls.
	rec, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()

	q := w.lanes[0].q // the store and the clock of maintenance
	var bg sync.WaitGroup
	if n, ok := q.store.(Notifier); ok {
		wake, cancel := n.Subscribe()
		defer cancel()
		bg.Add(1)
		go func() {
			defer bg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case _, ok := <-wake:
					if !ok {
						return
					}
					for _, l := range w.lanes {
						l.q.signal()
					}
				}
			}
		}()
	}
	bg.Add(1)
	go func() {
		defer bg.Done()
		w.sweep(ctx)
	}()

	for _, l := range w.lanes {
		defer l.q.listen()()
	}
	loopDone := make(chan struct{})
	var loops sync.WaitGroup
	for _, ql := range w.lanes {
		for _, l := range ql.split() {
			loops.Add(1)
			go func() {
				defer loops.Done()
				l.loop(ctx, hctx, rec)
			}()
		}
	}
	go func() {
		loops.Wait()
		close(loopDone)
	}()
	<-ctx.Done()
	bg.Wait()

	grace := time.NewTimer(w.cfg.Grace)
	defer grace.Stop()
	select {
	case <-loopDone:
		return nil
	case <-grace.C:
	}
	hcancel()
	grace.Reset(w.cfg.Grace)
	select {
	case <-loopDone:
		return nil
	case <-grace.C:
		return ErrShutdownTimeout
	}
}

// loop is one claim loop of a queue the worker serves (a lane of split:
// its share of the handlers), the one committer of their outcomes. Each turn it
// commits the outcomes of the handlers that finished and claims jobs for
// the idle handlers and the prefetch (up to BatchSize) — in one
// transaction when the store is a RecordClaimer and the turn is smaller
// than splitTurn — and starts the claimed jobs as handlers free up (on its
// runners: dispatch, then each runner as its handler returns, see finish).
// So a busy worker pays about one commit per turn, and a
// prefetched job waits about one commit for a handler — a quarter of its
// lease at most: then the jobs still waiting are released and the
// finished handlers' outcomes committed, without waiting for a handler to
// free up (see release). After ctx is done it stops claiming and returns
// once every running handler's outcome is committed, or as soon as rec
// ends (Run gave up): outcomes are committed with rec, which outlives ctx.
func (l *lane) loop(ctx, hctx, rec context.Context) {
	r := &laneRun{l: l, ctx: ctx, hctx: hctx, rec: rec, st: &loopState{vals: ctx, note: make(chan struct{}, 1),
		starts: make(chan *attempt, l.concurrency), staleAfter: l.q.cfg.Lease / 4}}
	defer func() {
		r.st.mu.Lock()
		r.st.buf = nil // the runners take no more
		r.st.mu.Unlock()
		close(r.st.starts) // the runners end
	}()
	_, r.merged = l.q.store.(RecordClaimer)
	if !r.merged || l.batch >= splitTurn {
		r.async = &committer{l: l, in: make(chan []*attempt, l.concurrency), done: make(chan struct{})}
		go r.async.run(rec)
		defer func() {
			close(r.async.in)
			<-r.async.done
		}()
	}
	for r.turn() {
	}
	if r.ahead != nil {
		<-r.ahead // Run gave up (rec ended): the claim returns, unused
	}
}

// laneRun is one run of a lane's loop: its contexts (see loop), what it
// knows about its handlers, and how it commits outcomes.
type laneRun struct {
	l              *lane
	ctx, hctx, rec context.Context
	st             *loopState
	// merged: the store is a RecordClaimer; async, when set, commits
	// outcomes beside the claims (see committer).
	merged bool
	async  *committer
	// ahead receives the result of the claim sent ahead (claimAhead); nil
	// when none is in flight.
	ahead chan claimResult
}

// claimResult is the result of a claim sent ahead: up to n jobs asked,
// claimed at t0 (the store's clock) by a call that ran from start to at;
// wake was taken before the claim (see idle).
type claimResult struct {
	n         int
	jobs      []Job
	t0        int64
	start, at time.Time
	wake      <-chan struct{}
	err       error
}

// turn is one turn of the loop: take the finished handlers and start the
// prefetched jobs, then either wait for a handler (nothing to claim or
// commit now) or commit the outcomes and claim. It reports whether the
// loop goes on.
func (r *laneRun) turn() bool {
	l, st := r.l, r.st
	if r.rec.Err() != nil {
		return false // abandoned: handlers still running report to st.done, unread
	}
	if busy, _, _ := st.counts(); busy > 0 {
		runtime.Gosched() // let handlers that are about to finish report first
	}
	st.collect()
	l.dispatch(r.hctx, st)
	busy, buffered, finished := st.counts()
	if r.ahead != nil && buffered == 0 {
		return r.awaitAhead()
	}
	stopping := r.ctx.Err() != nil
	if stopping && busy == 0 && len(st.queued) == 0 && buffered == 0 && finished == 0 {
		return false
	}
	n := r.claimSize(stopping, busy, buffered)
	if n == 0 && (len(st.queued) == 0 || buffered > 0) {
		r.awaitHandler(stopping, buffered > 0)
		return true
	}
	if !r.handOff(n) {
		return true
	}
	return r.commitAndClaim(n)
}

// claimSize is how many jobs this turn claims: none while shutting down
// or while prefetched jobs wait for a handler; otherwise one per idle
// handler (after lingering for the latest claim's short handlers) plus the
// prefetch, up to the batch.
func (r *laneRun) claimSize(stopping bool, busy, buffered int) int {
	l, st := r.l, r.st
	if stopping || buffered > 0 {
		return 0
	}
	if busy < l.concurrency {
		st.linger(r.ctx)
		st.collect()
		busy, _, _ = st.counts()
	}
	idle := l.concurrency - busy
	return min(idle+st.prefetch(l.concurrency, l.q), l.batch)
}

// awaitHandler waits, when every handler is busy (or shutting down) or
// prefetched jobs wait for one (buffered), for a handler to finish — or,
// while prefetched jobs wait, for the runners to have started them all
// (see finish) or for one to find nothing to start — or for the shutdown.
// Outcomes are committed with the claim that follows the last
// prefetched job's start — or, when no handler frees up for a quarter of
// the lease (handlers hung), once the prefetched jobs go stale and are
// released: the finished handlers' leases are not extended, and must not
// run out uncommitted.
func (r *laneRun) awaitHandler(stopping, buffered bool) {
	st := r.st
	var done <-chan struct{}
	if !stopping {
		done = r.ctx.Done()
	}
	var stale <-chan time.Time
	st.mu.Lock()
	switch {
	case len(st.buf) > 0:
		stale = st.staleTimer.C
		st.arm(wantIdle)
	case buffered || len(st.done) > 0:
		st.mu.Unlock()
		return // the prefetched jobs all started, or a handler finished: the next turn goes on
	default:
		st.arm(wantFinish)
	}
	st.mu.Unlock()
	select {
	case <-st.note:
	case <-done:
	case <-r.rec.Done():
	case <-stale:
		r.l.release(st)
	}
	st.unwant()
}

// handOff gives the queued outcomes to the committer when they are
// committed beside the claims (see committer): always on a store that is
// not a RecordClaimer, on one that is for big turns (and turns that claim
// nothing). It reports whether the turn goes on to commit and claim: not
// when Run gave up meanwhile, nor when the outcomes were handed off and
// nothing is to be claimed.
func (r *laneRun) handOff(n int) bool {
	st := r.st
	if r.async == nil || len(st.queued) == 0 || r.merged && n > 0 && n < splitTurn {
		return true
	}
	select {
	case r.async.in <- st.queued:
	case <-r.rec.Done():
		return false
	}
	st.queued = nil
	return n > 0
}

// commitAndClaim commits the queued outcomes (unless handed off) and
// claims up to n jobs (none: the outcomes only), starts those it can and
// arms the release of the rest; with nothing due it waits (see idle). After a failed commit it
// waits a jittered poll. It reports whether the loop goes on.
func (r *laneRun) commitAndClaim(n int) bool {
	l, st, q := r.l, r.st, r.l.q
	wake := q.waitChan() // before the claim, so no enqueue is missed
	start := time.Now()
	jobs, t0, settled, err := l.commit(r.ctx, r.rec, st.queued, n)
	if settled {
		st.queued = nil
	}
	if err != nil {
		if r.rec.Err() != nil {
			return false
		}
		l.w.report(err)
		// A shutting-down loop still waits between failed commits,
		// until Run gives up.
		var stop <-chan struct{}
		if r.ctx.Err() == nil {
			stop = r.ctx.Done()
		}
		st.wait(r.rec.Done(), stop, jitter(l.w.cfg.PollInterval))
		return true
	}
	r.take(n, jobs, t0, start, time.Now(), wake)
	return true
}

// take starts the jobs of a claim of up to n (0: outcomes only), claimed
// at t0 (the store's clock) by a call that ran from start to at, with
// wake taken before it: it hands them to the free handlers (the rest wait
// in buf, their release armed), waits when nothing was due (see idle),
// and sends the next claim when this one came back full (claimAhead).
func (r *laneRun) take(n int, jobs []Job, t0 int64, start, at time.Time, wake <-chan struct{}) {
	l, st := r.l, r.st
	st.mu.Lock()
	if n > 0 {
		st.claimed(start, at, len(jobs))
	}
	st.buf, st.bufT0 = jobs, t0
	st.mu.Unlock()
	l.dispatch(r.hctx, st)
	if _, buffered, _ := st.counts(); buffered > 0 {
		st.armStale(st.staleAfter)
	}
	if n > 0 && len(jobs) == 0 {
		r.idle(wake, t0)
	}
	if n > 0 && len(jobs) == n {
		r.claimAhead()
	}
}

// claimAhead sends the next claim at once, before the jobs just claimed
// have all started, after a claim that came back full (more jobs are
// probably due), when outcomes are committed beside the claims (async:
// the loop's commits then run beside its claims) and handlers are short
// next to a claim (prefetch is not 0). It asks for the prefetch, the jobs
// the handlers start, on average, within one claim, up to BatchSize; so
// at most 2 × BatchSize jobs wait claimed and not started. The store then
// works on the next claim while this process starts the jobs of the last
// one and commits their outcomes, instead of the two taking turns. One
// claim of the loop is in flight at a time, and each walks the due jobs in
// order from the start, as before.
//
// The claim runs with rec, like the outcomes: a claim that reached the
// store is taken even when the shutdown begins meanwhile, and its jobs
// start on the handlers that free up during Grace or are released. Its
// result is taken once every job claimed before it has started
// (awaitAhead).
func (r *laneRun) claimAhead() {
	l, st, q := r.l, r.st, r.l.q
	if r.async == nil || r.ahead != nil || r.ctx.Err() != nil {
		return
	}
	n := min(st.prefetch(l.concurrency, q), l.batch)
	if n == 0 {
		return
	}
	ch := make(chan claimResult, 1)
	r.ahead = ch
	rec := r.rec
	go func() {
		c := claimResult{n: n, wake: q.waitChan(), start: time.Now(), t0: q.now()}
		ctx, cancel := context.WithTimeout(rec, q.recordTO)
		c.jobs, c.err = q.claim(ctx, c.t0, addMs(c.t0, q.leaseMs), n)
		cancel()
		c.at = time.Now()
		ch <- c
	}()
}

// awaitAhead hands the queued outcomes to the committer and waits for the
// claim sent ahead (the handlers that finish meanwhile are taken at the
// next turn: their outcomes go with the next hand-off, one a claim as
// before), then starts its jobs and arms their release as commitAndClaim
// does, sends the next claim when it came back full, or, with nothing due,
// waits (see idle). It reports whether the loop goes on.
func (r *laneRun) awaitAhead() bool {
	l, st := r.l, r.st
	if len(st.queued) > 0 {
		select {
		case r.async.in <- st.queued:
			st.queued = nil
		case <-r.rec.Done():
			return false
		}
	}
	var c claimResult
	select {
	case c = <-r.ahead:
	case <-r.rec.Done():
		return false
	}
	r.ahead = nil
	if c.err != nil {
		if r.rec.Err() != nil {
			return false
		}
		l.w.report(fmt.Errorf("queue: claim: %w", c.err))
		return true // the next turn claims again, and waits if that fails
	}
	r.take(c.n, c.jobs, c.t0, c.start, c.at, c.wake)
	return true
}

// idle waits, after a claim at t0 found nothing due, for an enqueue or a
// notification (wake), the next jittered poll or the first due time known
// here (a retry's), a handler to finish, or the shutdown (which may have
// begun during the claim).
func (r *laneRun) idle(wake <-chan struct{}, t0 int64) {
	q := r.l.q
	d, due := jitter(r.l.w.cfg.PollInterval), int64(0)
	if until, at, ok := q.untilDue(t0); ok && until < d {
		d, due = until, at
	}
	if r.st.wait(wake, r.ctx.Done(), d) && due != 0 && q.now() < due {
		// Slept until the due time, and the queue's clock has not
		// reached it: it does not follow the timers (a test's manual
		// clock). The poll finds the job instead.
		q.dropDue(due)
	}
}

// splitTurn is the claim size from which a Worker on a RecordClaimer
// commits the outcomes in transactions of their own, beside the claims,
// instead of in the claim's: a turn of hundreds of jobs costs the server
// tens of milliseconds, and two transactions in flight (on two
// connections) use a second core. On PostgreSQL at 512 workers this made
// 13,879–17,745 jobs/s instead of 11,123; smaller turns keep one commit.
const splitTurn = 256

// dispatch starts the claimed jobs not yet started (st.buf) on the idle
// handlers; the runners start the rest as their handlers return (see
// finish). Prefetched jobs that waited a quarter of their lease (handlers
// turned slow) are not run: they are released (see release). Once Run
// cancels the handlers, the jobs left are released as they start, their
// handler's context done.
func (l *lane) dispatch(hctx context.Context, st *loopState) {
	st.mu.Lock()
	if len(st.buf) > 0 && time.Since(st.claimedAt) >= st.staleAfter {
		st.mu.Unlock()
		l.release(st)
		return
	}
	k := min(len(st.buf), l.concurrency-st.busy)
	if k <= 0 {
		st.mu.Unlock()
		return
	}
	jobs, t0, turn := st.buf[:k], st.bufT0, st.turn
	st.buf = st.buf[k:]
	st.busy += k
	busy := st.busy
	st.mu.Unlock()
	for i := range jobs {
		a := l.q.newAttempt(jobs[i], t0)
		a.turn = turn
		if st.runners < busy {
			st.runners++
			go l.runner(hctx, st)
		}
		st.starts <- a // never blocks: at most busy attempts wait in it
	}
}

// runner runs the attempts dispatch hands it, and after each the next
// prefetched job (see finish), one at a time, until the loop ends (starts
// closed). A loop keeps up to Concurrency runners rather than a goroutine
// per job: each keeps the stack its handlers grew (the runtime's stack
// growth was a tenth of a drain's CPU in this process).
func (l *lane) runner(hctx context.Context, st *loopState) {
	r := newRunCtx(hctx, st.vals)
	defer r.close()
	for a := range st.starts {
		for a != nil {
			began := time.Now()
			a.run(r, l.h)
			a.took = time.Since(began)
			a = st.finish(a, l.q)
		}
	}
}

// finish reports a's end to the loop and returns the runner's next
// attempt: the next prefetched job (st.buf), started at once rather than
// handed over by the loop, so that a busy worker's runners go from job to
// job without parking and the loop wakes once per claim, not once per job.
// None (nil) when no job waits or those waiting went stale (see release):
// the runner is idle. The loop is woken when it waits for what this
// finish brings (see want).
func (st *loopState) finish(a *attempt, q *Queue) *attempt {
	st.mu.Lock()
	st.done = append(st.done, a)
	if a.turn == st.turn {
		st.fresh--
	}
	var j Job
	var t0 int64
	var turn uint64
	next := len(st.buf) > 0 && time.Since(st.claimedAt) < st.staleAfter
	if next {
		j, t0, turn = st.buf[0], st.bufT0, st.turn
		st.buf = st.buf[1:]
	} else {
		st.busy--
	}
	wake := st.want == wantFinish || st.want == wantIdle && (!next || len(st.buf) == 0) ||
		st.want == wantFresh && st.fresh <= 0
	if wake {
		st.want = wantNone
	}
	st.mu.Unlock()
	if wake {
		select {
		case st.note <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	if !next {
		return nil
	}
	n := q.newAttempt(j, t0)
	n.turn = turn
	return n
}

// release releases every prefetched job not started (st.buf), which waited
// a quarter of its lease for a handler: none is run, each is pending at
// once, its claimed attempt spent (as a lease expiry would spend it), its
// outcome queued for the next commit. So no handler starts on a lease about
// to run out, and the loop, which waits for a handler only while jobs are
// buffered, commits the outcomes of the handlers that finished before their
// leases (no longer extended) run out, even when no handler frees up. The
// worker stops prefetching until prefetchAfter handlers finished again.
func (l *lane) release(st *loopState) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := newRunCtx(ctx, st.vals)
	st.mu.Lock()
	buf, t0, turn := st.buf, st.bufT0, st.turn
	st.buf = nil
	st.fresh -= len(buf) // the latest claim's: they will not finish
	st.mu.Unlock()
	for _, j := range buf {
		a := l.q.newAttempt(j, t0)
		a.turn = turn
		a.handle(r, l.h) // not started: the outcome releases the job
		st.queued = append(st.queued, a)
	}
	st.seen = 0 // no prefetch until the handlers' times are known again
}

// committer records outcomes in its own transactions, concurrently with
// the loop's claims: for stores that cannot merge them into the claim's
// transaction (not a RecordClaimer), and on a RecordClaimer for turns of
// splitTurn jobs or more, whose commits are long. Outcomes that arrive while a commit
// is in flight share the next one (group commit, no timer). A failed
// commit is retried after a jittered pause: outcomes are dropped only when
// Run gives up (their leases keep the jobs meanwhile).
type committer struct {
	l    *lane
	in   chan []*attempt
	done chan struct{}
}

// run commits with rec and returns when in is closed or rec ends.
func (c *committer) run(rec context.Context) {
	defer close(c.done)
	l, w := c.l, c.l.w
	for first := range c.in {
		queued := first
	gather:
		for {
			select {
			case more, ok := <-c.in:
				if !ok {
					break gather
				}
				queued = append(queued, more...)
			default:
				break gather
			}
		}
		outs := outcomesOf(queued)
		for len(outs) > 0 {
			rctx, cancel := context.WithTimeout(rec, l.q.recordTO)
			err := l.q.store.Record(rctx, outs)
			cancel()
			if err == nil {
				break
			}
			if rec.Err() != nil {
				return
			}
			w.report(fmt.Errorf("queue: recording outcomes: %w", err))
			t := time.NewTimer(jitter(w.cfg.PollInterval))
			select {
			case <-t.C:
			case <-rec.Done():
				t.Stop()
				return
			}
		}
		l.settle(queued, outs, true)
	}
}

// loopState is what the loop knows about its handlers.
type loopState struct {
	vals    context.Context // the Worker's Run context, for its heartbeats' values (runCtx.vals)
	starts  chan *attempt   // dispatch hands the idle runners their attempts
	runners int             // runner goroutines started
	queued  []*attempt      // finished, outcomes not yet committed
	spare   []*attempt      // the done slice before last, reused (collect)
	seen    int             // handlers that finished, up to prefetchAfter

	// mu guards what the runners share with the loop: buf and bufT0,
	// busy, done, fresh and want, and the turn and claimedAt they read
	// (which only the loop writes).
	mu sync.Mutex
	// Claimed jobs not started yet (prefetched), claimed at bufT0 (the
	// store's clock) by the latest claim (claimedAt, this process's); they
	// go stale staleAfter (a quarter of the lease) after it.
	buf        []Job
	bufT0      int64
	staleAfter time.Duration
	busy       int        // handlers running
	done       []*attempt // finished, not yet taken by the loop (collect)
	// want is what the loop waits for; the runner whose finish brings it
	// sends on note (capacity 1) and clears it.
	want want
	note chan struct{}

	// For linger: the latest claim (its number, when it returned, how many
	// of its handlers still run) and running means (EWMA) of how long a
	// claim's commit and a handler take.
	turn        uint64
	claimedAt   time.Time
	fresh       int
	commitMean  time.Duration
	handlerMean time.Duration
	lingerTimer *time.Timer
	// staleTimer fires when the jobs in buf go stale (armStale).
	staleTimer *time.Timer
}

// want is what a waiting loop is woken for (loopState.want).
type want uint8

const (
	wantNone   want = iota
	wantFinish      // any handler's finish
	wantIdle        // buf emptied, or a runner found nothing to start (see finish)
	wantFresh       // the latest claim's handlers all finished (see linger)
)

// arm sets what the loop is about to wait for; st.mu is held. A wake-up
// left from an earlier wait is dropped, so that it does not end this one.
func (st *loopState) arm(w want) {
	select {
	case <-st.note:
	default:
	}
	st.want = w
}

// unwant clears what the loop waited for, once it no longer waits.
func (st *loopState) unwant() {
	st.mu.Lock()
	st.want = wantNone
	st.mu.Unlock()
}

// counts reports the handlers running, the prefetched jobs not started
// and the finished attempts not yet taken (collect).
func (st *loopState) counts() (busy, buffered, finished int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.busy, len(st.buf), len(st.done)
}

// collect takes the attempts the runners finished since the last call.
func (st *loopState) collect() {
	st.mu.Lock()
	done := st.done
	st.done = st.spare
	st.mu.Unlock()
	for _, a := range done {
		st.take(a)
	}
	clear(done)
	st.spare = done[:0]
}

// armStale sets staleTimer to fire d after the latest claim: when its
// prefetched jobs, if some are still buffered, are to be released.
func (st *loopState) armStale(d time.Duration) {
	wait := time.Until(st.claimedAt.Add(d))
	if st.staleTimer == nil {
		st.staleTimer = time.NewTimer(wait)
	} else {
		st.staleTimer.Reset(wait)
	}
}

// take queues the outcome of a finished attempt and notes its handler's
// time.
func (st *loopState) take(a *attempt) {
	st.queued = append(st.queued, a)
	st.handlerMean += (a.took - st.handlerMean) / 8
	st.seen = min(st.seen+1, prefetchAfter)
}

// prefetchAfter is how many handlers must have finished before a claim
// takes jobs beyond the idle handlers: the running means need samples.
const prefetchAfter = 16

// prefetch is how many jobs a claim may take beyond the idle handlers:
// as many as conc handlers start, on average, within one claim's commit
// (commitMean / handlerMean per handler), so that short handlers do not
// wait idle for a commit every few jobs, and a prefetched job waits about
// one commit for a handler. None when handlers take longer than a commit,
// before prefetchAfter handlers finished, when the queue has fleet Limits
// (the store counts them at claim: a prefetched job would hold a slot it
// does not use), or when a commit is not short next to the lease.
func (st *loopState) prefetch(conc int, q *Queue) int {
	if st.seen < prefetchAfter || !q.cfg.Limits.IsZero() || st.commitMean > q.cfg.Lease/8 ||
		st.handlerMean >= st.commitMean {
		return 0
	}
	return int(min(int64(conc)*int64(st.commitMean/max(st.handlerMean, time.Microsecond)), MaxBatchSize))
}

// claimed notes a claim that started at start and returned got jobs at
// at. st.mu is held.
func (st *loopState) claimed(start, at time.Time, got int) {
	st.claimedAt = at
	st.commitMean += (st.claimedAt.Sub(start) - st.commitMean) / 8
	st.turn++
	st.fresh = got
}

// linger waits a little for the handlers of the latest claim when they are
// short next to a claim's commit, so that the next claim takes a job for
// each of them instead of leaving them to yet another commit: a busy
// worker then pays one commit per Concurrency jobs (no-op handlers finish
// within microseconds; a commit takes milliseconds). It waits at most an
// eighth of the mean commit time after the latest claim, and not at all
// when handlers usually take longer than that.
func (st *loopState) linger(ctx context.Context) {
	limit := st.commitMean / 8
	if st.handlerMean > limit {
		return
	}
	wait := time.Until(st.claimedAt.Add(limit))
	if wait <= 0 {
		return
	}
	st.mu.Lock()
	if st.fresh <= 0 {
		st.mu.Unlock()
		return
	}
	st.arm(wantFresh)
	st.mu.Unlock()
	defer st.unwant()
	if st.lingerTimer == nil {
		st.lingerTimer = time.NewTimer(wait)
	} else {
		st.lingerTimer.Reset(wait)
	}
	defer st.lingerTimer.Stop()
	select {
	case <-st.note:
	case <-st.lingerTimer.C:
	case <-ctx.Done():
	}
}

// wait returns after d (reporting true), on wake or stop, or when a
// handler finishes.
func (st *loopState) wait(wake, stop <-chan struct{}, d time.Duration) (slept bool) {
	st.mu.Lock()
	if len(st.done) > 0 {
		st.mu.Unlock()
		return false // a handler finished already
	}
	st.arm(wantFinish)
	st.mu.Unlock()
	defer st.unwant()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-wake:
	case <-stop:
	case <-st.note:
	}
	return false
}

// commit records the outcomes of the queued attempts (with rec, which
// outlives ctx) and claims up to n jobs, in one transaction when the store
// allows it. It returns the claimed jobs, their claim time, and whether the
// queued outcomes were committed.
func (l *lane) commit(ctx, rec context.Context, queued []*attempt, n int) ([]Job, int64, bool, error) {
	q := l.q
	outs := outcomesOf(queued)
	t0 := q.now()
	leaseUntil := addMs(t0, q.leaseMs)
	if rc, ok := q.store.(RecordClaimer); ok && len(outs) > 0 && n > 0 && q.cfg.Limits.IsZero() {
		rctx, cancel := context.WithTimeout(rec, q.recordTO)
		jobs, err := rc.RecordAndClaim(rctx, outs, q.cfg.Queue, t0, leaseUntil, n)
		cancel()
		if err != nil {
			return nil, t0, false, fmt.Errorf("queue: recording outcomes and claiming: %w", err)
		}
		l.settle(queued, outs, false)
		return jobs, t0, true, nil
	}
	if len(outs) > 0 {
		rctx, cancel := context.WithTimeout(rec, q.recordTO)
		err := q.store.Record(rctx, outs)
		cancel()
		if err != nil {
			return nil, t0, false, fmt.Errorf("queue: recording outcomes: %w", err)
		}
	}
	l.settle(queued, outs, false)
	if n == 0 {
		return nil, t0, true, nil
	}
	jobs, err := q.claim(ctx, t0, leaseUntil, n)
	if err != nil {
		if ctx.Err() != nil {
			return nil, t0, true, nil // shutting down: nothing claimed
		}
		return nil, t0, true, fmt.Errorf("queue: claim: %w", err)
	}
	return jobs, t0, true, nil
}

// outcomesOf collects the outcomes to record of the queued attempts, in
// the order settle reads them back.
func outcomesOf(queued []*attempt) []Outcome {
	n := 0
	for _, a := range queued {
		if a.rec {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	outs := make([]Outcome, 0, n) // one allocation, not append's growth
	for _, a := range queued {
		if a.rec {
			outs = append(outs, a.out)
		}
	}
	return outs
}

// settle takes the committed outcomes on their attempts and reports errors.
// The due times of the jobs made pending go to the Queue, for the loops to
// wake at (wake: also those asleep now, for outcomes committed beside the
// loop).
func (l *lane) settle(queued []*attempt, outs []Outcome, wake bool) {
	w := l.w
	k := 0
	var soon []int64
	for _, a := range queued {
		recorded := false
		if a.rec {
			o := outs[k]
			a.settle(o)
			recorded = o.Applied
			if recorded && o.State == Pending && o.AvailableAt > o.Now {
				soon = append(soon, o.AvailableAt)
			}
			k++
		}
		if w.cfg.OnResult != nil {
			w.resMu.Lock()
			w.cfg.OnResult(Result{Job: a.job, Recorded: recorded, Err: a.err, Took: a.took, Snoozed: a.snoozed})
			w.resMu.Unlock()
		} else if a.err != nil && !errors.Is(a.err, context.Canceled) {
			w.report(fmt.Errorf("queue: job %q attempt %d: %w", a.job.ID, a.job.Attempts, a.err))
		}
	}
	if len(soon) > 0 {
		l.q.noteDue(l.q.cfg.Queue, soon, wake)
	}
}

// jitter draws uniformly from [0.5, 1.5)×mean.
func jitter(mean time.Duration) time.Duration {
	return mean/2 + rand.N(mean)
}

func (w *Worker) sweep(ctx context.Context) {
	for {
		t := time.NewTimer(jitter(w.cfg.SweepInterval))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			return
		}
		w.maintain(ctx)
	}
}

// maintain is one maintenance pass: bury the jobs that can never run
// again, then delete the done and dead jobs past their retention.
// Both cover every queue of the store, so one pass serves all the queues.
func (w *Worker) maintain(ctx context.Context) {
	var m Maintenance
	var err error
	q := w.lanes[0].q
	if m.Buried, err = q.Sweep(ctx); err != nil && ctx.Err() == nil {
		w.report(fmt.Errorf("queue: sweep: %w", err))
	}
	if p, ok := q.store.(Purger); ok {
		if m.PurgedDone, err = q.purgeRounds(ctx, p, Done, w.cfg.RetainDone, w.cfg.PurgeBatch); err != nil && ctx.Err() == nil {
			w.report(fmt.Errorf("queue: purging done jobs: %w", err))
		}
		if m.PurgedDead, err = q.purgeRounds(ctx, p, Dead, w.cfg.RetainDead, w.cfg.PurgeBatch); err != nil && ctx.Err() == nil {
			w.report(fmt.Errorf("queue: purging dead jobs: %w", err))
		}
	}
	if w.cfg.OnMaintenance != nil {
		w.cfg.OnMaintenance(m)
	}
}

func (w *Worker) report(err error) {
	if w.cfg.OnError != nil {
		w.cfg.OnError(err)
	}
}
