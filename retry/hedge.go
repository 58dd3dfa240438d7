package retry

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults used for zero fields of a Hedge.
const (
	// defaultHedgeInFlight is the number of attempts a Hedge lets run at
	// once, the first included: one hedge.
	defaultHedgeInFlight = 2
	// defaultMinSamples is the number of successes a Hedge observes before
	// its Quantile replaces its fixed Delay.
	defaultMinSamples = 100
	// hedgeWindow is the number of observations after which the latency
	// histogram halves its counts, so the quantile follows the last one to
	// two thousand successes rather than the whole past.
	hedgeWindow = 2048
	// hedgeRecompute is how often (in observations) the quantile is
	// computed again; Do reads the last value with one atomic load.
	hedgeRecompute = 32
)

// Hedge sends another attempt of a slow call while the first still runs
// and takes the first success — hedged requests (Dean & Barroso, "The Tail
// at Scale", CACM 2013): a request slower than most is hedged after the
// delay most take, so the caller's tail latency becomes that of the faster
// of two attempts, for a few percent more load.
//
// Only idempotent work may be hedged: two attempts of it may both reach
// the dependency and both be served.
//
// A Hedge holds what it learns about one dependency (the latency of its
// successes), so share one Hedge per dependency, as a Budget; it is safe
// for concurrent use. It is a separate value rather than a Policy field
// because that learned state is shared while a Policy is plain
// configuration, and because only an in-process caller can hedge: the
// durable drivers (queue, brokers) run one delivery of a unit of work at a
// time. Configure it before first use and do not modify it afterwards.
type Hedge struct {
	// Delay is how long an attempt runs before the next one is started:
	// always when Quantile is 0, and until MinSamples successes have been
	// observed when it is set. It must be > 0.
	Delay time.Duration
	// Quantile, when in (0, 1), hedges after that quantile of the observed
	// latency of successful calls (0.95: the slowest 5% are hedged, as Dean
	// & Barroso suggest). 0 means always Delay.
	Quantile float64
	// MinSamples is the number of successes to observe before Quantile
	// replaces Delay; 0 means 100. At most 1024.
	MinSamples int
	// MaxInFlight bounds the attempts of one call running at once, the
	// first included; 0 means 2 (one hedge). 1 turns hedging off.
	MaxInFlight int

	hist latencyHist
}

// Validate checks every field and names the first one that is wrong.
func (h *Hedge) Validate() error {
	switch {
	case h.Delay <= 0:
		return fmt.Errorf("%w: Hedge.Delay must be > 0, got %v", ErrInvalid, h.Delay)
	case math.IsNaN(h.Quantile) || h.Quantile < 0 || h.Quantile >= 1:
		return fmt.Errorf("%w: Hedge.Quantile must be in [0, 1) (0 means always Delay), got %v", ErrInvalid, h.Quantile)
	case h.MinSamples < 0 || h.MinSamples > hedgeWindow/2:
		return fmt.Errorf("%w: Hedge.MinSamples must be in [0, %d] (0 means %d), got %d", ErrInvalid, hedgeWindow/2, defaultMinSamples, h.MinSamples)
	case h.MaxInFlight < 0:
		return fmt.Errorf("%w: Hedge.MaxInFlight must be >= 0 (0 means %d), got %d", ErrInvalid, defaultHedgeInFlight, h.MaxInFlight)
	}
	return nil
}

// CurrentDelay returns the delay the next call hedges after: the learned
// quantile once MinSamples successes were observed, else Delay.
func (h *Hedge) CurrentDelay() time.Duration {
	if h.Quantile > 0 {
		if q := h.hist.q.Load(); q > 0 {
			return time.Duration(q)
		}
	}
	return h.Delay
}

// Observe records the latency of a call that succeeded without a retry,
// for Quantile, as Do records its own; a driver that applies a Hedge's
// rules itself (the simulator) calls it. It does nothing when Quantile
// is 0.
func (h *Hedge) Observe(d time.Duration) {
	if h.Quantile > 0 {
		h.observe(d, h.minSamples())
	}
}

func (h *Hedge) maxInFlight() int {
	if h.MaxInFlight == 0 {
		return defaultHedgeInFlight
	}
	return h.MaxInFlight
}

func (h *Hedge) minSamples() uint64 {
	if h.MinSamples == 0 {
		return defaultMinSamples
	}
	return uint64(h.MinSamples)
}

// Do calls fn under policy p (nil: the zero Policy) as [Do] does, and
// hedges: when an attempt has run CurrentDelay without an answer, another
// starts while it still runs, up to MaxInFlight at once. The first success
// wins: the other attempts' contexts are canceled and Do returns nil once
// they have returned. fn is called concurrently and must honour its
// context; Do waits for every attempt it started, so none outlives it.
//
// Every attempt runs through a [Step] and counts toward MaxAttempts. A
// hedge needs the Budget's Retry, as a retry does (gRPC A6 counts hedged
// attempts toward throttling), a Limiter slot and time before the
// deadline; one that cannot have them is not sent, and the next is due
// Delay later. A permanent error, or one of no class, stops every attempt
// and Do gives up with it; a retryable failure while others still run
// tells the Budget and frees its slot; when the last attempt in flight
// fails, the Policy decides a retry (after the Schedule's wait) or a
// give-up, as Do would. A canceled ctx cancels every attempt.
//
// A canceled loser is neither judged nor reported: the Budget hears
// nothing of it, its Limiter slot is released as a success (a sign of no
// overload) and no hook fires for it. The hooks see OnAttempt for every
// attempt started, OnRetry for each retry decided, and once OnSuccess (the
// winner) or OnGiveUp; they are called one at a time, though not always on
// the caller's goroutine.
//
// The latency Quantile learns from is that of the call, from its first
// attempt's start to the success, for calls that succeeded without a
// retry: below the delay a hedge cannot change it, so the quantile of
// what hedging leaves is the quantile of the attempts themselves.
//
// The first attempt runs on the caller's goroutine; a call that succeeds
// before its delay starts no goroutine and allocates nothing of its own
// (its state and hedge timer are reused from a pool; its attempts' context
// comes from a block of fresh ones, a block of 32 per allocation, never
// reused). The delay and the waits between attempts run on the runtime's
// timers (testing/synctest makes them virtual); Policy.Clock gives the
// time decisions read.
//
// The attempts' context has ctx's values and deadline; it is done when ctx
// is, when the call stops (a winner, a give-up) and when Do returns. It is
// not made by context.WithCancel, so context.Cause of it is ctx's cause.
func (h *Hedge) Do(ctx context.Context, p *Policy, fn func(context.Context) error) error {
	if p == nil {
		p = &defaultPolicy
	}
	if err := p.Validate(); err != nil {
		return err
	}
	if err := h.Validate(); err != nil {
		return err
	}
	if fn == nil {
		return errNilFunc
	}
	if h.maxInFlight() == 1 || p.maxAttempts() == 1 {
		return Do(ctx, p, fn)
	}
	r := newHedgeRun()
	r.h, r.p, r.fn, r.delay = h, p, fn, h.CurrentDelay()
	r.s.Policy = p
	r.hctx = r.newCtx(ctx)
	defer r.finish()
	return r.first(ctx)
}

// hedgeRuns keeps the state of calls that returned, with their timers and
// what is left of their block of contexts, for the next call. Runs inside
// a testing/synctest bubble neither take from it nor give back: their
// timer runs on the bubble's clock, one from outside would not. A pooled
// run's block keeps the parents of the contexts it handed out reachable
// until the block is used up or the pool dropped at a collection.
var hedgeRuns sync.Pool

func newHedgeRun() *hedgeRun {
	bubbled := inBubble()
	if !bubbled {
		if r, ok := hedgeRuns.Get().(*hedgeRun); ok {
			r.reuse = true
			return r
		}
	}
	r := &hedgeRun{reuse: !bubbled}
	r.timer = time.AfterFunc(time.Hour, r.fire)
	r.timer.Stop()
	return r
}

// finish ends the call: its attempts' context is canceled, and the state
// goes back to the pool when nothing else can hold it: the call returned
// (no panic), so the timer was stopped before it fired or its goroutine
// handed over its outcome, and every attempt's goroutine sent its result.
func (r *hedgeRun) finish() {
	r.hctx.cancel(context.Canceled)
	if !r.reuse || !r.idle {
		return
	}
	*r = hedgeRun{timer: r.timer, ctxs: r.ctxs}
	hedgeRuns.Put(r)
}

// inBubble reports whether the caller runs in a testing/synctest bubble,
// the one place where time.Now has no monotonic clock reading.
func inBubble() bool {
	t := time.Now()
	return t == t.Round(0)
}

// newCtx returns a fresh attempts' context under parent, taken from the
// run's block of them: contexts are never reused (the work may keep the
// one it was given), but a block of hedgeCtxBlock is one allocation.
func (r *hedgeRun) newCtx(parent context.Context) *hedgeCtx {
	if len(r.ctxs) == 0 {
		r.ctxs = make([]hedgeCtx, hedgeCtxBlock)
	}
	c := &r.ctxs[0]
	r.ctxs[0].parent = parent
	r.ctxs = r.ctxs[1:]
	return c
}

// hedgeCtxBlock is how many attempts' contexts one allocation makes.
const hedgeCtxBlock = 32

// hedgeRun is one call of Hedge.Do. Its coordinator — the caller's
// goroutine, or the goroutine of the hedge timer once it fired — alone
// starts and judges attempts; the attempts run fn and send their results.
type hedgeRun struct {
	h     *Hedge
	p     *Policy
	fn    func(context.Context) error
	delay time.Duration

	hctx   *hedgeCtx   // every attempt's parent: canceled when the call stops
	ctxs   []hedgeCtx  // fresh contexts for the next calls (newCtx)
	timer  *time.Timer // the first hedge's timer (AfterFunc r.fire), reused
	shared sync.Once   // makes results and final for the timer's goroutine and the caller
	reuse  bool        // the run was made outside a synctest bubble: it may be pooled
	idle   bool        // the call returned and no goroutine holds the run: finish may pool it

	s        step // the call's ledger (Delivery) and its give-up
	a1       hedgeAttempt
	start    time.Time
	next     time.Time // when the next attempt is due
	retry    bool      // the next attempt is a retry the Policy decided (its Budget charge made)
	retried  bool      // a retry was decided: the call's latency says nothing of the attempts'
	inflight int
	stopped  bool
	panicked any
	results  chan hedgeResult
	final    chan hedgeOutcome
}

type hedgeAttempt struct {
	s step
	n int
}

type hedgeResult struct {
	a     *hedgeAttempt
	err   error
	panic any  // what fn panicked with, when !ok
	ok    bool // fn returned
}

type hedgeOutcome struct {
	err   error
	panic any
}

// first runs attempt 1 on the caller's goroutine with the hedge timer
// armed, and goes on as the coordinator if the timer did not fire.
func (r *hedgeRun) first(ctx context.Context) error {
	p := r.p
	a := &r.a1
	a.s.Policy = p
	now := r.now(ctx)
	if a.s.Begin(r.hctx, now) != NoReason {
		r.idle = true // nothing started, the timer never armed
		return a.s.Err()
	}
	a.n = 1
	r.start = now
	r.s.Delivery = a.s.Delivery
	r.inflight = 1
	r.timer.Reset(r.delay)
	actx := a.s.Context()
	returned := false
	defer func() {
		if returned {
			return
		}
		v := recover() // fn panicked on the caller's goroutine
		if r.timer.Stop() {
			a.s.Abort()
			panic(v)
		}
		r.share()
		r.results <- hedgeResult{a: a, panic: v}
		panic((<-r.final).panic)
	}()
	err := r.fn(actx)
	returned = true
	if !r.timer.Stop() {
		// The timer fired: its goroutine coordinates; hand it the result.
		r.share()
		r.results <- hedgeResult{a: a, err: err, ok: true}
		out := <-r.final
		if out.panic != nil {
			panic(out.panic)
		}
		r.idle = true // the timer's goroutine sent its last and every attempt's returned
		return out.err
	}
	r.inflight = 0
	now = r.nowAfter(err)
	dec := a.s.End(err, now)
	if err == nil {
		r.observe(now)
		r.idle = true
		return nil
	}
	if !dec.Retry {
		r.idle = true
		return a.s.Err()
	}
	// A retry, as Do would make it; hedging goes on from there.
	r.s.Delivery, r.s.st().Last = a.s.Delivery, err
	r.retried, r.retry = true, true
	if now.IsZero() {
		now = p.now()
	}
	r.next = now.Add(dec.Delay)
	r.results = make(chan hedgeResult, r.maxAttempts())
	err = r.coordinate()
	if r.panicked != nil {
		panic(r.panicked) // an attempt on a goroutine of its own panicked
	}
	r.idle = true // every attempt's goroutine sent its last
	return err
}

// fire is the first hedge's timer: its goroutine becomes the coordinator,
// and the next attempt is due at once.
func (r *hedgeRun) fire() {
	r.share()
	err := r.coordinate()
	r.final <- hedgeOutcome{err: err, panic: r.panicked}
}

// share makes the channels through which the caller's first attempt and
// the timer's goroutine talk, for whichever of them comes first.
func (r *hedgeRun) share() {
	r.shared.Do(func() {
		r.results = make(chan hedgeResult, r.maxAttempts())
		r.final = make(chan hedgeOutcome, 1)
	})
}

func (r *hedgeRun) now(ctx context.Context) time.Time {
	if r.h.Quantile > 0 || r.s.NeedsNow(ctx) || r.p.Budget != nil {
		return r.p.now()
	}
	return time.Time{}
}

func (r *hedgeRun) nowAfter(err error) time.Time {
	if r.h.Quantile > 0 || r.p.Budget != nil || err != nil && r.s.needsNow() {
		return r.p.now()
	}
	return time.Time{}
}

// observe records the call's latency for the Quantile.
func (r *hedgeRun) observe(now time.Time) {
	if r.h.Quantile > 0 && !r.retried {
		r.h.Observe(now.Sub(r.start))
	}
}

func (r *hedgeRun) maxAttempts() int { return r.s.maxAttempts(r.p) }

// coordinate starts and judges attempts until the call stops and every
// attempt it started has returned, and returns the call's error. Waits
// run on the runtime's timers; Policy.Clock gives now.
func (r *hedgeRun) coordinate() error {
	p := r.p
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	due := false
	for {
		if r.stopped {
			if r.inflight == 0 {
				return r.s.Err()
			}
			r.judge(<-r.results)
			continue
		}
		if !r.retry && r.inflight == 0 {
			r.giveUp(Exhausted) // nothing runs and nothing may start (not reached)
			continue
		}
		var tc <-chan time.Time
		if r.retry || r.inflight < r.h.maxInFlight() && r.s.Delivery.Attempt < r.maxAttempts() {
			now := p.now()
			if !due {
				if wait := r.next.Sub(now); wait > 0 {
					if t == nil {
						t = time.NewTimer(wait)
					} else {
						t.Reset(wait)
					}
					tc = t.C
				} else {
					due = true
				}
			}
			if due {
				due = false
				r.startAttempt(now)
				continue
			}
		}
		var done <-chan struct{}
		if r.inflight == 0 {
			done = r.hctx.Done() // waiting for a retry; in flight, attempts see it
		}
		select {
		case res := <-r.results:
			r.judge(res)
		case <-tc:
			due = true
			continue
		case <-done:
			r.s.st().CtxErr = r.hctx.Err()
			r.giveUp(ctxReason(r.s.st().CtxErr))
		}
		if t != nil && tc != nil {
			t.Stop()
		}
	}
}

// startAttempt begins the next attempt at now and runs it on a goroutine
// of its own. A refused retry gives the call up (Begin reports it); a
// refused hedge is not sent (BeginHedge: no give-up), and the next is due
// Delay later.
func (r *hedgeRun) startAttempt(now time.Time) {
	retry := r.retry
	r.retry = false
	r.next = now.Add(r.delay)
	a := &hedgeAttempt{}
	a.s.Policy = r.p
	a.s.Delivery = r.s.Delivery
	if retry {
		a.s.st().Last = r.s.st().Last // a give-up reports the last error
		if reason := a.s.Begin(r.hctx, now); reason != NoReason {
			r.s.st().Reason, r.s.st().CtxErr = reason, a.s.st().CtxErr
			r.stop()
			return
		}
	} else if a.s.BeginHedge(r.hctx, now) != NoReason {
		return
	}
	r.s.Delivery = a.s.Delivery
	a.n = a.s.Delivery.Attempt
	r.inflight++
	go r.run(a, a.s.Context())
}

// run is an attempt's goroutine.
func (r *hedgeRun) run(a *hedgeAttempt, actx context.Context) {
	returned := false
	defer func() {
		if !returned {
			r.results <- hedgeResult{a: a, panic: recover()}
		}
	}()
	err := r.fn(actx)
	returned = true
	r.results <- hedgeResult{a: a, err: err, ok: true}
}

// judge handles an attempt's result on the coordinator: the attempt's
// Step judges it (Step.Judge), and the call's Step concludes (decides and
// reports) unless others still in flight carry the call on after a
// retryable failure.
func (r *hedgeRun) judge(res hedgeResult) {
	r.inflight--
	a := res.a
	switch {
	case !res.ok:
		a.s.Abort()
		if r.panicked == nil {
			r.panicked = res.panic
		}
		r.stop()
		return
	case r.stopped:
		r.drop(a)
		return
	}
	now := r.nowAfter(res.err)
	j := a.s.Judge(res.err, now)
	if j.Err != nil && !j.Interrupted && j.Class == ClassRetryable && r.inflight > 0 {
		r.s.st().Last = res.err // the others carry the call on; the next hedge starts when due
		return
	}
	if now.IsZero() && j.Err != nil {
		now = r.p.now()
	}
	dec := r.s.Conclude(j, now)
	switch {
	case j.Err == nil:
		r.observe(now)
		r.stop()
	case !dec.Retry:
		r.stop()
	default:
		r.retried, r.retry = true, true
		r.next = now.Add(dec.Delay)
	}
}

// giveUp stops the call for reason, firing OnGiveUp once.
func (r *hedgeRun) giveUp(reason Reason) {
	r.s.stop(reason)
	r.stop()
}

// stop ends the call: no attempt starts any more and those in flight are
// canceled.
func (r *hedgeRun) stop() {
	r.stopped = true
	r.hctx.cancel(context.Canceled)
}

// drop ends a loser that returned after the call stopped: nothing is
// judged (Step.Postpone), so its slot is released as a success and its
// context canceled, the Budget hears nothing and no hook fires.
func (r *hedgeRun) drop(a *hedgeAttempt) { a.s.Postpone() }

// hedgeCtx is the context of a call's attempts: its parent's values and
// deadline, done when the parent is or when the call stops. It is
// context.WithCancel without its allocations: its Done channel is made
// only when asked for, the parent is watched (context.AfterFunc) only
// from then on, and a canceled hedgeCtx with no channel is only a flag.
// Its AfterFunc method lets contexts derived from it (context.WithCancel,
// WithTimeout, AfterFunc) wait without a goroutine of their own.
// context.Cause of it is its parent's cause.
type hedgeCtx struct {
	parent context.Context
	ended  atomic.Bool // err is set
	mu     sync.Mutex
	err    error
	done   chan struct{}        // made by Done, closed at the end
	stop   func() bool          // stops watching parent
	afters map[*hedgeAfter]bool // AfterFunc's functions not yet run or stopped
}

type hedgeAfter struct{ f func() }

func (c *hedgeCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c *hedgeCtx) Value(key any) any           { return c.parent.Value(key) }
func (c *hedgeCtx) String() string              { return "retry.Hedge attempt context" }

func (c *hedgeCtx) Err() error {
	if c.ended.Load() {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.err
	}
	if err := c.parent.Err(); err != nil {
		return c.cancel(err)
	}
	return nil
}

func (c *hedgeCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		switch {
		case c.err != nil:
			close(c.done)
		case c.parent.Done() != nil:
			parent := c.parent
			c.stop = context.AfterFunc(parent, func() { c.cancel(parent.Err()) })
		}
	}
	return c.done
}

// AfterFunc arranges to call f in its own goroutine once c is done, as
// context.AfterFunc does; the context package uses it for contexts
// derived from c.
func (c *hedgeCtx) AfterFunc(f func()) func() bool {
	c.Done() // watch the parent
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	a := &hedgeAfter{f: f}
	if c.afters == nil {
		c.afters = map[*hedgeAfter]bool{}
	}
	c.afters[a] = true
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.afters[a] {
			return false
		}
		delete(c.afters, a)
		return true
	}
}

// cancel ends c with err unless it has ended already, and returns the
// error it ended with.
func (c *hedgeCtx) cancel(err error) error {
	c.mu.Lock()
	if c.err != nil {
		err = c.err
		c.mu.Unlock()
		return err
	}
	c.err = err
	c.ended.Store(true)
	if c.done != nil {
		close(c.done)
	}
	stop, afters := c.stop, c.afters
	c.stop, c.afters = nil, nil
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	for a := range afters {
		go a.f()
	}
	return err
}

// latencyHist is a lock-free log-linear histogram of durations: 16
// buckets per power of two (at most 6.25% wide), counts halved every
// hedgeWindow observations.
type latencyHist struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Uint64 // observations since the last halving
	q      atomic.Int64  // the last computed quantile, ns; 0 before enough samples
	busy   atomic.Bool   // one recomputation at a time
}

const (
	histSub     = 4                         // log2 of the buckets per power of two
	histBuckets = (64 - histSub) << histSub // d >= 1 has at most 63 bits
)

func histBucket(d time.Duration) int {
	v := uint64(max(d, 1))
	e := bits.Len64(v) - 1
	if e < histSub {
		return int(v)
	}
	return (e-histSub+1)<<histSub + int(v>>(e-histSub)&(1<<histSub-1))
}

// histUpper returns the largest duration of bucket i.
func histUpper(i int) time.Duration {
	if i < 1<<histSub {
		return time.Duration(i)
	}
	e := i>>histSub + histSub - 1
	m := uint64(i & (1<<histSub - 1))
	hi := (1<<histSub+m+1)<<(e-histSub) - 1
	if hi > math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(hi)
}

// observe adds one success's latency and now and then computes the
// quantile again.
func (h *Hedge) observe(d time.Duration, minSamples uint64) {
	hs := &h.hist
	hs.counts[histBucket(d)].Add(1)
	n := hs.n.Add(1)
	if (n%hedgeRecompute == 0 || n == minSamples) && hs.busy.CompareAndSwap(false, true) {
		h.recompute(minSamples)
		hs.busy.Store(false)
	}
}

func (h *Hedge) recompute(minSamples uint64) {
	hs := &h.hist
	var total uint64
	var counts [histBuckets]uint64
	for i := range counts {
		counts[i] = hs.counts[i].Load()
		total += counts[i]
	}
	if total < minSamples {
		return
	}
	rank := uint64(math.Ceil(h.Quantile * float64(total)))
	var sum uint64
	for i, c := range counts {
		sum += c
		if sum >= rank && c > 0 {
			hs.q.Store(int64(histUpper(i)))
			break
		}
	}
	if total >= hedgeWindow {
		var left uint64
		for i := range hs.counts {
			for {
				c := hs.counts[i].Load()
				if hs.counts[i].CompareAndSwap(c, c/2) {
					left += c / 2
					break
				}
			}
		}
		hs.n.Store(left)
	}
}
